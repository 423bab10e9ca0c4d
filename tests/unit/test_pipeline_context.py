"""brokerbench.pipeline.context: where a run's files are, and what a task can know before validate ran."""

import pytest

from brokerbench.pipeline.context import NotSelected, RunContext
from brokerbench.util import safe_name


def test_run_paths_are_safe_for_hadoop_and_s3(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__2026-11-21T10:42:09.725280+00:00", "smoke",
                     {"results_root": str(tmp_path)})
    assert ":" not in ctx.run_key and "+" not in ctx.run_key
    assert ctx.run_dir == tmp_path / "runs" / "brokerbench_smoke" / safe_name(ctx.run_id)
    assert ctx.results_uri == str(ctx.run_dir)  # a local root: the run's directory itself


def test_an_s3_root_names_the_run_in_the_store_and_stages_it_locally(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path))
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": "s3://bucket/prefix"})
    assert ctx.results_uri == "s3://bucket/prefix/runs/brokerbench_smoke/manual__1"
    assert not str(ctx.run_dir).startswith("s3:")


def test_before_validate_there_is_no_plan_and_the_environment_comes_from_the_suite(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="the validate task has not run"):
        ctx.plan()
    assert ctx.environment_name() == "local"
    assert ctx.history_prefixes() == []
    ctx.write_json("provenance/x.json", {"a": 1})
    assert ctx.read_json("provenance/x.json") == {"a": 1}
    assert issubclass(NotSelected, Exception)
