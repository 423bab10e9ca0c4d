"""The brokerbench wheel that the aws environment installs on fleet hosts.

Client hosts run the worker, every host runs the agent (host metrics, local
deploys); both live in the ``brokerbench`` package, which installs without
Airflow (``pip install brokerbench[worker]``). The controller builds that wheel
from the source tree it runs from, so the hosts run exactly the controller's
code. A host is reinstalled only when its recorded package id differs:

* built from source: the SHA-256 of the package's sources and pyproject.toml
  (a rebuilt wheel of the same sources has another file hash, zip timestamps);
* a given wheel (setting ``worker_wheel``): the SHA-256 of the wheel file.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...resources import PACKAGE_DIR, source_root
from ..base import EnvironmentFailure

__all__ = ["PACKAGE_DIR", "WorkerPackage", "build_wheel", "source_id", "source_root", "worker_package"]


@dataclass(frozen=True)
class WorkerPackage:
    wheel: Path
    package_id: str  # sha256 hex, see the module docstring
    origin: str      # "built from <source tree>" or "given: <path>"


def _sources(root: Path) -> list[Path]:
    files = [root / "pyproject.toml"]
    files += sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    return files


def source_id(root: Path) -> str:
    """SHA-256 over the relative path and content of every source file of the wheel."""
    h = hashlib.sha256()
    for path in _sources(root):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def file_id(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_wheel(out_dir: Path) -> WorkerPackage:
    """Build the brokerbench wheel from the source tree into ``out_dir`` (reused when sources match).

    The build happens in a scratch copy (pyproject.toml, README.md, the
    package), so the source tree, which may be read-only in an image, is not
    touched.
    """
    root = source_root()
    if root is None:
        raise EnvironmentFailure(
            f"no brokerbench source tree above {PACKAGE_DIR} to build the worker wheel from: set "
            "worker_wheel to a built wheel, or preinstall brokerbench on the hosts' image and set "
            "worker_install to 'never'", "controller")
    pid = source_id(root)
    target = out_dir / pid[:16]
    built = sorted(target.glob("brokerbench-*.whl")) if target.is_dir() else []
    if built:
        return WorkerPackage(built[-1], pid, f"built from {root}")
    with tempfile.TemporaryDirectory(prefix="brokerbench-wheel-") as scratch:
        src = Path(scratch) / "src"
        (src / "include").mkdir(parents=True)
        shutil.copy2(root / "pyproject.toml", src / "pyproject.toml")
        readme = root / "README.md"
        (src / "README.md").write_text(readme.read_text(encoding="utf-8") if readme.is_file() else "brokerbench\n",
                                       encoding="utf-8")
        shutil.copytree(PACKAGE_DIR, src / "include" / "brokerbench",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        wheels = Path(scratch) / "wheels"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
             "-q", "-w", str(wheels), str(src)],
            capture_output=True, text=True, timeout=300)
        found = sorted(wheels.glob("brokerbench-*.whl"))
        if proc.returncode != 0 or not found:
            raise EnvironmentFailure(f"building the worker wheel failed (exit {proc.returncode}): "
                                    f"{(proc.stderr or proc.stdout).strip()[-800:]}", "controller")
        target.mkdir(parents=True, exist_ok=True)
        wheel = Path(shutil.copy2(found[0], target / found[0].name))
    return WorkerPackage(wheel, pid, f"built from {root}")


def worker_package(setting: str | None, out_dir: Path) -> WorkerPackage:
    """The wheel named by the ``worker_wheel`` setting, or one built from the sources."""
    if setting:
        path = Path(setting).expanduser()
        if not path.is_file() or path.suffix != ".whl":
            raise EnvironmentFailure(f"worker_wheel {setting!r} is not a wheel file", "controller")
        return WorkerPackage(path, file_id(path), f"given: {path}")
    return build_wheel(out_dir)
