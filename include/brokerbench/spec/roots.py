"""Where brokerbench finds its spec files and puts its results: the two roots every other spec module and
the pipeline start from. A leaf of the spec package (it imports none of its siblings)."""

from __future__ import annotations

import os
from pathlib import Path

from brokerbench.resources import brokerbench_home, data_dir


def spec_root() -> Path:
    """The include/ directory holding workloads/, drivers/, variants/, suites/.

    ``BROKERBENCH_SPEC_ROOT`` overrides it; read on every call so that a
    changed environment takes effect without re-importing.
    """
    override = os.environ.get("BROKERBENCH_SPEC_ROOT")
    if override:
        return Path(override)
    return data_dir("suites").parent  # include/ in the tree, brokerbench/_data installed


def default_results_root() -> str:
    """``BROKERBENCH_RESULTS_ROOT``, else the results/ directory next to include/."""
    return os.environ.get("BROKERBENCH_RESULTS_ROOT") or str(spec_root().resolve().parent / "results")


def payload_dirs() -> list[Path]:
    """The directories a workload's ``payloadFile`` may come from, symlinks resolved, in lookup order.

    ``payload/`` of the spec root (``include/payload/``), each directory of ``BROKERBENCH_PAYLOAD_DIRS``
    (separated by ``os.pathsep``, ':' on Linux), then ``$BROKERBENCH_HOME/payload/``, where OMB's standard
    payloads are generated (so a user's own file of such a name wins). Read on every call, like the roots above.
    """
    dirs = [spec_root() / "payload"]
    dirs += [Path(d.strip()).expanduser() for d in os.environ.get("BROKERBENCH_PAYLOAD_DIRS", "").split(os.pathsep)
             if d.strip()]
    dirs.append(brokerbench_home() / "payload")
    out: list[Path] = []
    for d in dirs:
        real = d.resolve()
        if real not in out:
            out.append(real)
    return out
