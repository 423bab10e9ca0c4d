"""One home for the small helpers every layer uses: names, keys, atomic writes, text tables.

* :func:`safe_name`: a path segment any filesystem, S3 and Hadoop accept. Result
  paths and S3 keys are built from it, so its character set is fixed:
  ``A-Z a-z 0-9 . _ = -`` kept, anything else (``:``, ``+``, ``/``, spaces) becomes ``_``.
* :func:`run_key`: a DAG run's key, ``<safe dag_id>/<safe run_id>``.
* :func:`dag_id_for`: the DAG id of a suite, ``brokerbench_<suite>`` with ``-`` as ``_``.
* :func:`trial_id` / :func:`split_trial`: the workload id of one trial of a run with
  ``trials`` > 1, ``<workload>.trial<k>``, and back.
* :func:`write_atomic` / :func:`write_json_atomic`: a reader never sees half a file.
* :func:`text_table`: a plain-text table (tabulate).

Imports nothing of brokerbench, so the worker and every environment may use it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]")


def safe_name(s: str) -> str:
    """A path segment any filesystem, S3 and Hadoop accept (no ':' or '+')."""
    return _UNSAFE.sub("_", s)


def run_key(dag_id: str, run_id: str) -> str:
    """The key of a DAG run in result paths and state directories: ``<dag_id>/<run_id>``, each made safe."""
    return f"{safe_name(dag_id)}/{safe_name(run_id)}"


def run_prefix(key: str) -> str:
    """The prefix of every topic, subscription, queue and consumer group a run creates on a broker,
    ``bb-<8 hex digits of sha1(run key)>``; its objects are named ``<prefix>-...`` (the external environment's
    teardown deletes exactly those)."""
    import hashlib

    return "bb-" + hashlib.sha1(key.encode()).hexdigest()[:8]


def dag_id_for(suite_name: str) -> str:
    """The DAG id of a suite."""
    return f"brokerbench_{suite_name}".replace("-", "_")


#: what a trial's workload id appends: ``<workload>.trial<k>``. Only characters :func:`safe_name`
#: and ``spec.common.path_safe`` keep, never ``__`` (it separates fields of labels and file names),
#: and no Hive partition escaping: result paths, labels, summary rows and the history's
#: ``workload=`` partition carry it unchanged. Workload files may not end in it (spec.workload).
TRIAL_SEP = ".trial"
_TRIAL = re.compile(r"^(?P<base>.+)\.trial(?P<k>[1-9][0-9]*)$")


#: what side B of an A/B run (param ``compare_with``, docs/analytics.md "A/B in one run") appends to its workload
#: id before the trial suffix: ``<workload>.B.trial<k>``; side A keeps ``<workload>.trial<k>``, the run's own
#: track
SIDE_B = ".B"


def side_b_id(workload_id: str) -> str:
    """The workload id of side B of ``workload_id`` (without a trial suffix)."""
    return f"{workload_id}{SIDE_B}"


def split_side(workload_id: str) -> tuple[str, bool]:
    """(workload id without side B's suffix, whether it was side B's); a trial suffix must be split first."""
    if workload_id.endswith(SIDE_B) and len(workload_id) > len(SIDE_B):
        return workload_id[: -len(SIDE_B)], True
    return workload_id, False


def trial_id(workload_id: str, k: int) -> str:
    """The workload id of trial ``k`` (1-based) of ``workload_id``."""
    return f"{workload_id}{TRIAL_SEP}{k}"


def split_trial(workload_id: str) -> tuple[str, int | None]:
    """(base workload id, trial number) of a workload id; (the id, None) when it names no trial."""
    m = _TRIAL.match(workload_id or "")
    return (m.group("base"), int(m.group("k"))) if m else (workload_id, None)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    tmp.replace(path)
    return path


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, sort_keys: bool = True) -> Path:
    """JSON (indented, ``default=str``) written atomically."""
    return write_atomic(path, json.dumps(data, indent=2, sort_keys=sort_keys, default=str))


def text_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table: a header, a rule, one line per row, columns left-aligned."""
    from tabulate import tabulate  # tabulate: only when a table is printed

    return tabulate([[("" if v is None else v) for v in r] for r in rows], headers=list(columns),
                    tablefmt="simple", disable_numparse=True)
