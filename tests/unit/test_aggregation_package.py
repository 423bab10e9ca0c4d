"""spark_jobs/brokerbench_spark as a --py-files zip (no Spark needed): every module inside,
importable from the zip alone, rebuilt only when a source changes; the entry points stay
scripts of a few lines."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spark_jobs" / "brokerbench_spark"
sys.path.insert(0, str(ROOT / "spark_jobs"))

from brokerbench_spark.pyfiles import build_zip  # noqa: E402


def test_zip_holds_the_package_and_is_reused(tmp_path):
    path = Path(build_zip(tmp_path))
    names = set(zipfile.ZipFile(path).namelist())
    expected = {f"brokerbench_spark/{p.name}" for p in PACKAGE.glob("*.py")}
    assert names == expected
    assert {"brokerbench_spark/cli.py", "brokerbench_spark/merge.py", "brokerbench_spark/history.py"} <= names
    mtime = path.stat().st_mtime_ns
    assert Path(build_zip(tmp_path)) == path and path.stat().st_mtime_ns == mtime


def test_package_imports_from_the_zip_alone(tmp_path):
    path = build_zip(tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import brokerbench_spark.cli, brokerbench_spark.history; "
            "print(brokerbench_spark.cli.__file__)")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip().startswith(path)


def test_entry_points_are_thin():
    for script, target in (("aggregate.py", "brokerbench_spark.cli"), ("history.py", "brokerbench_spark.history")):
        text = (ROOT / "spark_jobs" / script).read_text()
        assert f"from {target} import main" in text
        assert "pyspark" not in text.split('"""')[-1]  # all Spark code lives in the package
