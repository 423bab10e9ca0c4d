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
    assert {"brokerbench_spark/entry.py", "brokerbench_spark/phase_tables.py",
            "brokerbench_spark/history_writer.py"} <= names
    mtime = path.stat().st_mtime_ns
    assert Path(build_zip(tmp_path)) == path and path.stat().st_mtime_ns == mtime


def test_package_imports_from_the_zip_alone(tmp_path):
    path = build_zip(tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import brokerbench_spark.entry, brokerbench_spark.history_writer; "
            "print(brokerbench_spark.entry.__file__)")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert out.stdout.strip().startswith(path)


def test_entry_points_are_thin():
    for script, target in (("aggregate.py", "brokerbench_spark.entry"), ("history.py", "brokerbench_spark.history_writer")):
        text = (ROOT / "spark_jobs" / script).read_text()
        assert f"from {target} import main" in text
        assert "pyspark" not in text.split('"""')[-1]  # all Spark code lives in the package


def test_the_package_is_added_to_the_context_unless_py_files_ship_these_sources(tmp_path):
    from brokerbench_spark import entry

    class Context:
        def __init__(self, py_files: str):
            self.conf, self.added = {"spark.submit.pyFiles": py_files}, []

        def getConf(self):
            return self.conf

        def addPyFile(self, path):
            self.added.append(path)

    class Session:
        def __init__(self, py_files: str):
            self.sparkContext = Context(py_files)

    shipped = Session(f"file:/x/y.zip,file:{build_zip(tmp_path)}")  # the operators' --py-files
    entry.ship_package(shipped)
    assert shipped.sparkContext.added == []
    stale = Session("file:/tmp/brokerbench-spark/brokerbench_spark-0000000000000000.zip")  # other sources
    entry.ship_package(stale)
    bare = Session("")  # spark-submit spark_jobs/aggregate.py without --py-files
    entry.ship_package(bare)
    for session in (stale, bare):
        (added,) = session.sparkContext.added
        assert Path(added).name == Path(build_zip(tmp_path)).name


# -- no Spark session needed: the package's pure-Python helpers --------------------------


def test_raw_member_is_the_objects_text_as_in_the_file():
    from brokerbench_spark.reading import raw_member

    doc = ('{\n  "implementation": "x", "q": {"z": "a\\"}"},\n  "durability": {\n    "variant": "v",\n'
           '    "settings": {\n      "a": 1,\n      "b": [1, 2],\n      "c": {"d": "e}"}\n    }\n  }\n}\n')
    assert raw_member(doc, ("durability", "settings")) == \
        '{\n      "a": 1,\n      "b": [1, 2],\n      "c": {"d": "e}"}\n    }'
    assert raw_member('{"durability": {"settings": "a string"}}', ("durability", "settings")) is None
    assert raw_member('{"durability": null}', ("durability", "settings")) is None
    assert raw_member("{}", ("durability", "settings")) is None
    assert raw_member("not json", ("durability", "settings")) is None


def test_local_listing_and_globs(tmp_path):
    from brokerbench_spark.store import expand_run_dirs, list_files

    for run in ("r1", "r2"):
        f = tmp_path / "runs" / run / "raw" / "w" / "d" / "v" / "measure" / "c1.jsonl"
        f.parent.mkdir(parents=True)
        f.write_text("{}\n")
    (tmp_path / "runs" / "r1" / "raw" / "w" / "d" / "v" / "measure" / "notes.txt").write_text("x")
    assert [p for p, _ in list_files(str(tmp_path / "runs" / "r1"), "raw/*/*/*/*/*.jsonl")] == \
        [str(tmp_path / "runs" / "r1" / "raw" / "w" / "d" / "v" / "measure" / "c1.jsonl")]
    assert expand_run_dirs([str(tmp_path / "runs" / "*")]) == [str(tmp_path / "runs" / r) for r in ("r1", "r2")]
    assert expand_run_dirs([str(tmp_path / "none*")]) == [str(tmp_path / "none*")]
    assert expand_run_dirs(["a/", "a", "b"]) == ["a", "b"]


def test_s3_listing_globs_and_lines(monkeypatch):
    from moto import mock_aws

    from brokerbench_spark import store

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with mock_aws():
        client = store.s3_client()
        client.create_bucket(Bucket="bb-unit")
        for run in ("r1", "r2"):
            client.put_object(Bucket="bb-unit", Key=f"res/runs/dag/{run}/raw/w/d/v/measure/c1.jsonl",
                              Body=b'{"record": "meta"}\n\n{"record": "end"}')
        client.put_object(Bucket="bb-unit", Key="res/runs/dag/r1/raw/w/d/v/measure/_tmp.jsonl", Body=b"x")
        client.put_object(Bucket="bb-unit", Key="res/runs/dag/r1/summary/summary.csv", Body=b"x")
        files = store.list_files("s3://bb-unit/res/runs/dag/r1", "raw/*/*/*/*/*.jsonl", client)
        assert files == [("s3://bb-unit/res/runs/dag/r1/raw/w/d/v/measure/c1.jsonl", 37)]
        assert store.expand_run_dirs(["s3://bb-unit/res/runs/dag/*"], client=client) == \
            ["s3://bb-unit/res/runs/dag/r1", "s3://bb-unit/res/runs/dag/r2"]
        from brokerbench_spark.workerfiles import file_lines
        assert file_lines(files[0][0], client) == [b'{"record": "meta"}', b'{"record": "end"}']
        assert store.read_text("s3://bb-unit/res/runs/dag/r1/summary/summary.csv", client) == "x"
        assert store.read_text("s3://bb-unit/res/runs/dag/r1/summary/missing", client) is None


def test_executor_env_only_what_is_set(monkeypatch):
    from brokerbench_spark.store import AWS_ENV, executor_env

    for k in AWS_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    assert executor_env() == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k"}


def test_out_dirs_contract(tmp_path):
    import pytest

    from brokerbench_spark.entry import out_dirs

    assert out_dirs([str(tmp_path / "r")], None) == [str(tmp_path / "r" / "summary")]
    assert out_dirs(["s3://b/r"], [str(tmp_path / "o")]) == [str(tmp_path / "o")]
    with pytest.raises(SystemExit, match="required"):
        out_dirs(["s3://b/r"], None)
    with pytest.raises(SystemExit, match="one per run"):
        out_dirs(["a", "b"], ["o"])


def test_history_partition_values_escaped_as_spark():
    from brokerbench_spark.history_writer import escape_partition

    assert escape_partition("3.8.0") == "3.8.0"
    assert escape_partition("a/b:c=d") == "a%2Fb%3Ac%3Dd"
