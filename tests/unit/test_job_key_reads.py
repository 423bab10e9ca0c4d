"""A job is read as a typed :class:`brokerbench.worker.job.Job`, never as a dict by string key.

The job goes from the pipeline to the worker's file through one serialiser (``Job.to_dict`` / ``Job.to_json``) and
comes back through one parser (``Job.parse`` / ``read_job``); this test parses every module of the package with
ast and counts the string-key reads (``x["key"]``, ``x.get("key")``) on job dicts: ``job``, ``self.job``,
``jobs[...]`` and their parts ``.workload`` / ``.driver`` / ``.endpoint``; in the worker also the parts under
their own names (``workload``, ``driver``, ``endpoint``, with or without ``self.``); ``j`` in the modules that
split jobs. Each read left is listed in :data:`EXCEPTIONS` with its reason.

Run as a script to print every read and the count (``python tests/unit/test_job_key_reads.py [package dir]``).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "include" / "brokerbench"

_JOB = r"(self\.)?(job|jobs\[[^]]*\])"
_PART = r"(\.(workload|driver|endpoint)|\[['\"](workload|driver|endpoint)['\"]\])"
#: a job dict anywhere in the package, or one of its parts
GENERIC = re.compile(rf"^{_JOB}{_PART}?$")
#: in the worker the job's parts also travel under their own names (a driver's self.driver, payload_pool's workload)
WORKER = re.compile(r"^(self\.)?(workload|driver|endpoint)$")
#: ``j``: a job in the modules that split jobs
SPLIT = re.compile(r"^j$")

_ENVIRONMENT_EDGE = ("the environments take jobs as the job file's dict (Job.to_dict) and send them on as JSON "
                     "(an agent on a client host); brokerbench.worker is outside their layer "
                     "(test_import_rules), so they cannot hold a Job")

#: (module relative to the package, receiver, key) -> why it is read by key; how many times it may occur
EXCEPTIONS: dict[tuple[str, str, str], tuple[int, str]] = {
    ("environments/aws/environment.py", "job", "workload"): (
        2, "the payload file is copied to the client host and the job's payloadFile rewritten to its copy: "
           + _ENVIRONMENT_EDGE),
    ("environments/aws/environment.py", "jobs[i]", "worker"): (
        1, "the worker named in the failure record of a host whose agent returned nothing: " + _ENVIRONMENT_EDGE),
    ("environments/machine/runtime.py", "job", "worker"): (
        1, "the worker's name for its log and pid record: " + _ENVIRONMENT_EDGE),
}


def key_reads(path: Path, root: Path = PACKAGE) -> list[tuple[int, str, str]]:
    """(line, receiver, key) of every string-key read on a job dict in ``path``."""
    src = path.read_text(encoding="utf-8")
    in_worker = "worker" in path.relative_to(root).parts
    splits = "split_job" in src
    found = []
    for node in ast.walk(ast.parse(src)):
        recv = key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            recv, key = node.value, node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            recv, key = node.func.value, node.args[0].value
        if recv is None:
            continue
        text = ast.unparse(recv)
        if GENERIC.match(text) or (in_worker and WORKER.match(text)) or (splits and SPLIT.match(text)):
            found.append((node.lineno, text, key))
    return sorted(found)


def all_key_reads(root: Path = PACKAGE) -> list[tuple[str, int, str, str]]:
    return [(str(p.relative_to(root)), line, recv, key)
            for p in sorted(root.rglob("*.py")) for line, recv, key in key_reads(p, root)]


def test_jobs_are_read_by_attribute_except_the_listed_reads():
    found = Counter((path, recv, key) for path, _, recv, key in all_key_reads())
    unlisted = {k: n for k, n in found.items() if n > EXCEPTIONS.get(k, (0, ""))[0]}
    assert not unlisted, ("string-key reads on job dicts: read the typed Job's attributes instead (or list the "
                          f"read with its reason in EXCEPTIONS): {unlisted}")
    stale = {k: n for k, (n, _) in EXCEPTIONS.items() if found.get(k, 0) < n}
    assert not stale, f"listed reads that are gone (lower their count or drop them): {stale}"


def test_the_counter_sees_each_form_of_read(tmp_path):
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "m.py").write_text(
        "def f(job, self, workload, jobs, i):\n"
        "    return job['a'], job.get('b'), self.job.workload['c'], jobs[i].get('d'), workload.get('e'), "
        "job.workload.partitions, x['f']\n")
    (tmp_path / "p.py").write_text("def g(job, workload):\n    return job['driver'].get('n'), workload['w']\n")
    assert sorted((p, recv, key) for p, _, recv, key in all_key_reads(tmp_path)) == [
        ("p.py", "job", "driver"), ("p.py", "job['driver']", "n"),
        ("worker/m.py", "job", "a"), ("worker/m.py", "job", "b"), ("worker/m.py", "jobs[i]", "d"),
        ("worker/m.py", "self.job.workload", "c"), ("worker/m.py", "workload", "e")]


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else PACKAGE
    reads = all_key_reads(root)
    for path, line, recv, key in reads:
        print(f"{path}:{line}: {recv}[{key!r}]")
    print(f"job-dict string-key reads: {len(reads)}")
