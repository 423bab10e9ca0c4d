"""What the aggregation reads: every worker file of every run once, by the executors (workerfiles.py and
phase_tables.py, one task per few phase directories), and the small JSON documents (provenance, host
metrics) by the driver. Local paths and s3:// URIs alike (store.py)."""

from __future__ import annotations

import json
from typing import Sequence

from .store import list_files
from .workerfiles import PhaseDir, task_slices

WORKER_PATTERN = "raw/*/*/*/*/*.jsonl"
#: phase directories never read: nothing of a warm-up enters any output (only files whose
#: meta record says measure or sweep do), and a warm-up's files are as large as a measurement's
UNREAD_PHASES = ("warmup",)
#: worker-file tasks per core (smaller tasks balance phases of unequal size)
TASKS_PER_CORE = 3
#: bytes of worker files below which one task more is not worth its fixed cost
MIN_TASK_BYTES = 8 << 20


def worker_files(run_dir: str, client=None) -> list[tuple[str, int]]:
    """(URI, bytes) of the run's worker files: local absolute paths or s3:// URIs, sorted."""
    return list_files(run_dir, WORKER_PATTERN, client)


def worker_pattern(run_dir: str) -> str:
    return f"{run_dir}/{WORKER_PATTERN}"


# -- worker files --------------------------------------------------------------------


def phase_dirs(files: dict[str, tuple[int, int]]) -> list[tuple[tuple[int, list[str]], int]]:
    """The worker files ({URI: (run, bytes)}) as work for workerfiles.py: one item per run and
    phase directory, ((run, its files, sorted), bytes); warm-up directories are not read
    (UNREAD_PHASES)."""
    dirs: dict[tuple[int, str], list[str]] = {}
    for uri, (run, _) in files.items():
        directory = uri.rsplit("/", 1)[0]
        if directory.rsplit("/", 1)[-1] not in UNREAD_PHASES:
            dirs.setdefault((run, directory), []).append(uri)
    return [((run, sorted(uris)), sum(files[u][1] for u in uris)) for (run, _), uris in sorted(dirs.items())]


def read_tasks(files: dict[str, tuple[int, int]], parallelism: int) -> list[list[PhaseDir]]:
    """The executors' tasks: the phase directories of ``files`` ({URI: (run, bytes)}) packed by bytes, one task
    per MIN_TASK_BYTES of input (a task's fixed cost, a Python worker and the package's import, is paid once for a
    small input: one smoke run is one task), at most TASKS_PER_CORE per core of ``parallelism``."""
    work = phase_dirs(files)
    by_size = max(1, -(-sum(size for _, size in work) // MIN_TASK_BYTES))
    return task_slices(work, min(by_size, parallelism * TASKS_PER_CORE))


def _value_end(text: str, i: int) -> int:
    """The index after the JSON value that starts at ``text[i]`` (no validation)."""
    if text[i] == '"':
        i += 1
        while text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        return i + 1
    if text[i] in "{[":
        depth = 0
        while True:
            c = text[i]
            if c == '"':
                i = _value_end(text, i)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(text) and text[i] not in ",}] \t\r\n":
        i += 1
    return i


def raw_member(text: str, path: Sequence[str]) -> str | None:
    """The raw text of the object or array at ``path`` (keys of nested objects) in a JSON
    document, as Spark's multi-line JSON reader gives an object read into a string column
    (the input's characters from the opening to the closing bracket); None when the value is
    missing, not an object or array, or the text is no JSON."""

    decoder = json.JSONDecoder()
    try:
        i = 0
        for depth, key in enumerate(path):
            while text[i].isspace():
                i += 1
            if text[i] != "{":
                return None
            i += 1
            found = False
            while True:
                while text[i] in " \t\r\n,":
                    i += 1
                if text[i] == "}":
                    return None
                name, i = decoder.raw_decode(text, i)
                while text[i] in " \t\r\n:":
                    i += 1
                if name == key:
                    found = True
                    break
                i = _value_end(text, i)
            if not found:
                return None
        return text[i:_value_end(text, i)] if text[i] in "{[" else None
    except (IndexError, ValueError):
        return None
