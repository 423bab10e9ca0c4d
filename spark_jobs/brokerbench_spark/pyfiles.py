"""The package as a zip for ``spark-submit --py-files`` (needs neither pyspark nor brokerbench).

With ``spark-submit spark_jobs/aggregate.py`` on the machine that holds the sources,
Python finds the package beside the script. Where only the script travels (cluster deploy
mode, a remote driver), the package must go with it::

    spark-submit --py-files "$(python spark_jobs/brokerbench_spark/pyfiles.py)" spark_jobs/aggregate.py ...

``build_zip(out_dir)`` writes ``brokerbench_spark-<hash of the sources>.zip`` (rebuilt only
when a source changes) and returns its path. The executors import the package too (the
aggregation's workerfiles.py reads the worker files and merges the buckets); the job adds
the zip to the context itself when it runs from the source directory.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.glob("*.py"))


def zip_name() -> str:
    """The zip's file name: ``brokerbench_spark-<hash of the sources>.zip``."""
    digest = hashlib.sha256()
    for p in sources():
        digest.update(p.name.encode() + b"\0" + p.read_bytes())
    return f"brokerbench_spark-{digest.hexdigest()[:16]}.zip"


def build_zip(out_dir: str | os.PathLike | None = None) -> str:
    """Zip of the package (``brokerbench_spark/*.py``); returns its path."""
    files = sources()
    out = Path(out_dir or Path(tempfile.gettempdir()) / "brokerbench-spark")
    out.mkdir(parents=True, exist_ok=True)
    target = out / zip_name()
    if not target.exists():
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                zf.write(p, f"{PACKAGE.name}/{p.name}")
        os.replace(tmp, target)
    return str(target)


if __name__ == "__main__":
    print(build_zip(sys.argv[1] if len(sys.argv) > 1 else None))
