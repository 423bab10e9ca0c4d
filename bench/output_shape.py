"""Compare the shape of two runs' outputs: which files exist, the keys of every JSON file, the columns and row
identities of every CSV, the headings and table headers of the report - everything but the figures, timestamps and
run ids. A refactor that must not change behaviour shows no difference between a run before and one after.

    .venv/bin/python bench/output_shape.py RUN_DIR_BEFORE RUN_DIR_AFTER

RUN_DIR is a run's results directory (``<results root>/runs/<dag_id>/<run_id>``). Prints each difference and exits
1 if there is any, else prints what was compared and exits 0.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

#: row identity columns of the CSV tables (those present are used)
IDENTITY = ("workload", "broker", "variant", "driver", "phase", "metric", "trial", "step", "host")
#: objects whose keys are data (process names of the foreign load), folded into one "*" key
DATA_KEYED = ("foreign_top_mean_percent",)
#: parts of names and values that differ between runs by nature
VOLATILE = re.compile(r"\d{4}-\d\d-\d\dT[\d:_.+-]+|manual__[\w.:+-]+|\b[0-9a-f]{8,}\b|\d+")


def normalise(text: str) -> str:
    return VOLATILE.sub("#", text)


def json_shape(value, path: str = "") -> set[str]:
    """Key paths with the kind of value at each; list items are folded into ``[]``."""
    if isinstance(value, dict):
        out = {f"{path}{{}}"}
        data_keyed = path.rsplit(".", 1)[-1] in DATA_KEYED
        for k, v in value.items():
            out |= json_shape(v, f"{path}.{'*' if data_keyed else normalise(str(k))}")
        return out
    if isinstance(value, list):
        out = {f"{path}[]"}
        for v in value:
            out |= json_shape(v, f"{path}[]")
        return out
    # a figure may be null where an interval had no messages: null and numbers are one kind here
    kind = "number" if value is None or isinstance(value, (int, float)) else type(value).__name__
    return {f"{path}:{kind}"}


def csv_shape(path: Path) -> set[str]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {"(no rows)"}
    columns = list(rows[0])
    ids = [c for c in IDENTITY if c in columns]
    return {"columns: " + ",".join(columns)} | {"row: " + "|".join(r[c] for c in ids) for r in rows}


class _Outline(HTMLParser):
    def __init__(self):
        super().__init__()
        self.items: list[str] = []
        self._tag: str | None = None

    def handle_starttag(self, tag, _attrs):
        if tag in ("h1", "h2", "h3", "h4", "th", "caption"):
            self._tag = tag

    def handle_endtag(self, tag):
        if tag == self._tag:
            self._tag = None

    def handle_data(self, data):
        if self._tag and data.strip():
            self.items.append(f"{self._tag}: {normalise(data.strip())}")


def html_shape(path: Path) -> set[str]:
    parser = _Outline()
    parser.feed(path.read_text())
    return set(parser.items)


def shape(run: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in sorted(run.rglob("*")):
        if not p.is_file() or "summary.parquet" in p.parts:
            continue
        name = normalise(p.relative_to(run).as_posix())
        if p.suffix == ".json":
            out[name] = json_shape(json.loads(p.read_text()))
        elif p.suffix == ".csv":
            out[name] = csv_shape(p)
        elif p.suffix == ".html":
            out[name] = html_shape(p)
        else:
            out[name] = set()
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    before, after = (shape(Path(a)) for a in sys.argv[1:])
    differences = 0
    for name in sorted(before.keys() | after.keys()):
        if name not in after or name not in before:
            print(f"{name}: only in {'before' if name in before else 'after'}")
            differences += 1
            continue
        for item in sorted(before[name] - after[name]):
            print(f"{name}: - {item}")
            differences += 1
        for item in sorted(after[name] - before[name]):
            print(f"{name}: + {item}")
            differences += 1
    print(f"{len(before)} files compared, {sum(map(len, before.values()))} shape items, {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
