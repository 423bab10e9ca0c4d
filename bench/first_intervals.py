"""What the first intervals of measured phases weigh in a run's figures: each trial's p50 and p99 with its
first k intervals left out, and their robust CV over the trials.

Reads the raw worker files of runs already made (noise.py's ``--results-root``), nothing is run. Each trial's
percentiles come from its intervals' merged histograms (histogram.py), as the aggregation reads them; the
robust CV is noise.py's (1.4826 x MAD / median). Made to find out whether a measured phase's start (new worker
processes, cold clients) moved the trials' figures: it did through the JVM engine (docs/analytics.md, "The
measured phase's lead-in"), which is why a measured phase now starts with a lead-in (docs/worker.md).

    cd bench && ../.venv/bin/python first_intervals.py /tmp/nn2 /tmp/nn5pj --skip 0,1,2
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from brokerbench.histogram import LogHistogram  # noqa: E402

METRICS = ("publish_latency_us", "e2e_latency_us")


def robust_cv_percent(values: list[float]) -> float:
    x = np.asarray(values, dtype=float)
    med = float(np.median(x))
    return 100.0 * 1.4826 * float(np.median(np.abs(x - med))) / med if med else float("nan")


def trial_percentiles(path: str, skip: int) -> dict[tuple[str, int], float]:
    """p50 and p99 (ms) of one worker file's measured intervals from the (skip+1)-th on."""
    intervals = [json.loads(line) for line in open(path, encoding="utf-8") if '"record":"interval"' in line]
    out = {}
    for metric in METRICS:
        h = LogHistogram()
        for r in intervals[skip:]:
            if metric in r:
                h.merge(LogHistogram.from_dict(r[metric]))
        for p in (50, 99):
            v = h.percentile(p)
            out[(metric, p)] = float("nan") if v is None else v / 1000.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", help="results roots of noise.py runs")
    ap.add_argument("--skip", default="0,1", help="first intervals to leave out, comma-separated counts")
    args = ap.parse_args()
    skips = [int(s) for s in args.skip.split(",")]
    print("root | driver | variant | trials | intervals left out | publish p50 rcv % (median ms) | "
          "publish p99 | e2e p50 | e2e p99")
    for root in args.roots:
        tracks: dict[tuple[str, str], list[str]] = {}
        for f in sorted(glob.glob(f"{root}/runs/*/*/raw/*/*/*/measure/*.jsonl")):
            parts = Path(f).parts
            tracks.setdefault((parts[-4], parts[-3]), []).append(f)
        for (driver, variant), files in tracks.items():
            for skip in skips:
                per = [trial_percentiles(f, skip) for f in files]
                cells = []
                for metric in METRICS:
                    for p in (50, 99):
                        vals = [t[(metric, p)] for t in per]
                        cells.append(f"{robust_cv_percent(vals):.1f} ({np.median(vals):.3f})")
                print(f"{Path(root).name} | {driver} | {variant} | {len(files)} | {skip} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
