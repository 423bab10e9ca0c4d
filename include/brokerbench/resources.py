"""Files brokerbench ships and where it keeps its own state, found without assuming a source tree.

Package data lives in ``brokerbench/_data`` and is found through
:mod:`importlib.resources`, so it is there whether the package is installed
from a wheel or editable from the tree. In the tree, ``_data`` holds symlinks
to the directories users edit (``include/workloads``, ``drivers``,
``variants``, ``suites`` and ``include/infra/aws``); a wheel stores them as
files.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

#: the package directory (include/brokerbench in the tree)
PACKAGE_DIR = Path(str(files("brokerbench")))


def data_dir(name: str) -> Path:
    """A directory of package data: ``workloads``, ``drivers``, ``variants``, ``suites``, ``infra-aws``.

    Symlinks are resolved, so paths in messages name the files users edit.
    """
    return Path(str(files("brokerbench").joinpath("_data", name))).resolve()


def source_root() -> Path | None:
    """The project directory (pyproject.toml naming brokerbench) above the package, if any:
    None for an installed (non-editable) package."""
    for parent in PACKAGE_DIR.parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file():
            return parent if 'name = "brokerbench"' in pyproject.read_text(encoding="utf-8") else None
    return None


def brokerbench_home() -> Path:
    """``BROKERBENCH_HOME``, else ``.brokerbench`` in the project (the tree), else in the user's home."""
    env = os.environ.get("BROKERBENCH_HOME")
    if env:
        return Path(env)
    return (source_root() or Path.home()) / ".brokerbench"
