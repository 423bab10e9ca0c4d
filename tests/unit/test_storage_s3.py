"""An s3:// results store used by workers that share nothing else (moto's server as S3).

Each "worker" below has its own BROKERBENCH_HOME, so its staging copy starts
empty: what a task reads must come from S3, what it writes must go back, and
nothing more than the task needs is downloaded.
"""

from __future__ import annotations

import json

import pytest
from fixtures_results import history_row, write_history_rows

from brokerbench.pipeline import analysis, benchmark, setup
from brokerbench.pipeline.context import RunContext
from tests.aws_fixtures import moto_server, s3_client  # noqa: F401 - a fixture

BUCKET = "bench-results"
ROOT = f"s3://{BUCKET}/team"


@pytest.fixture
def s3(moto_server, monkeypatch):
    client = s3_client(moto_server)
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    return client


def _keys(client, prefix: str = "team/") -> set[str]:
    out = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out |= {o["Key"] for o in page.get("Contents", [])}
    return out


def _worker(tmp_path, monkeypatch, name: str) -> None:
    """From here on this test process is worker ``name``: a home (and staging copy) of its own."""
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / name))


def _ctx() -> RunContext:
    return RunContext(dag_id="brokerbench_smoke", run_id="manual__1", suite="smoke",
                      params={"results_root": ROOT, "brokers": ["rabbitmq", "kafka"], "variants": ["fsync-off"],
                              # validate resolves Apache Kafka's version; a unit test stays off the network
                              "broker_implementations": {"kafka": "tansu"}})


def test_a_task_pulls_what_it_reads_and_pushes_what_it_writes(s3, tmp_path, monkeypatch):
    _worker(tmp_path, monkeypatch, "w1")
    ctx = _ctx()
    with ctx.synced():
        setup.validate(ctx)
        raw = ctx.run_dir / "raw" / "w" / "d" / "fsync-off" / "measure"
        raw.mkdir(parents=True)
        (raw / "localhost-0.jsonl").write_text('{"record":"end","status":"ok"}\n')
        (ctx.run_dir / "hostmetrics").mkdir()
        (ctx.run_dir / "hostmetrics" / "h.jsonl").write_text("{}\n")
    run = f"team/runs/{ctx.run_key}/"
    assert {run + "plan.json", run + "raw/w/d/fsync-off/measure/localhost-0.jsonl",
            run + "hostmetrics/h.jsonl"} <= _keys(s3)
    write_history_rows(tmp_path / "hist", [history_row(1, broker="kafka"), history_row(1, broker="pulsar"),
                                          history_row(2, broker="rabbitmq")])
    for f in (tmp_path / "hist").rglob("*.parquet"):
        s3.upload_file(str(f), BUCKET, "team/history/" + f.relative_to(tmp_path / "hist").as_posix())

    # another worker: an empty staging copy
    _worker(tmp_path, monkeypatch, "w2")
    ctx2 = _ctx()
    assert not ctx2.plan_path.exists()
    with ctx2.synced(history=True) as sync:
        assert ctx2.plan_path.exists()  # small files of the run come along
        assert not (ctx2.run_dir / "raw").exists()  # the bulky ones do not
        assert analysis.has_measurements(ctx2, sync)  # ... but the store's listing shows the measured phase
        assert not analysis.has_measurements(ctx2)
        assert not (ctx2.run_dir / "hostmetrics").exists()
        hist = ctx2.local_results_root / "history"
        assert {p.name for p in hist.iterdir()} == {"broker=kafka", "broker=rabbitmq"}  # not pulsar's
        (ctx2.run_dir / "summary").mkdir()
        (ctx2.run_dir / "summary" / "regression.json").write_text("{}")
    assert run + "summary/regression.json" in _keys(s3)
    assert sync.uploaded == [f"runs/{ctx.run_key}/summary/regression.json"]  # nothing else went up again

    # a retried measured phase reads its own result directories, and only those
    _worker(tmp_path, monkeypatch, "w3")
    ctx3 = _ctx()
    with ctx3.synced(raw=lambda c: ["raw/w/d/fsync-off"]):
        assert benchmark.completed_ok(ctx3.run_dir / "raw/w/d/fsync-off/measure/localhost-0.jsonl")
        assert not (ctx3.run_dir / "hostmetrics").exists()


def test_publish_history_uploads_the_run_and_drops_its_stale_keys_only(s3, tmp_path, monkeypatch):
    from brokerbench.history import history_run_key
    from brokerbench.storage import S3Sync

    _worker(tmp_path, monkeypatch, "w1")
    ctx = _ctx()
    key = history_run_key(ctx.dag_id, ctx.run_id)
    other = "history/broker=kafka/broker_version=1/workload=w/variant=v/date=2026-11-01/run_key=other/p.parquet"
    stale = f"history/broker=kafka/broker_version=0.9/workload=w/variant=v/date=2026-11-01/run_key={key}/p.parquet"
    for k in (other, stale):
        s3.put_object(Bucket=BUCKET, Key=f"team/{k}", Body=b"x")
    out = tmp_path / "history-out"
    new = f"broker=kafka/broker_version=1/workload=w/variant=v/date=2026-11-02/run_key={key}/part-0.parquet"
    (out / new).parent.mkdir(parents=True)
    (out / new).write_bytes(b"new")
    (out / "_manifests").mkdir()
    (out / "_manifests" / f"{key}.json").write_text(json.dumps({"run_key": key, "files": [new]}))
    done = analysis.publish_history(ctx, S3Sync(ROOT), out)
    assert done == {"uploaded": 1, "removed": 1}
    assert {k for k in _keys(s3, "team/history/")} == {f"team/{other}", f"team/history/{new}"}


def test_compare_reads_and_writes_an_s3_results_root(s3, tmp_path, monkeypatch):
    _worker(tmp_path, monkeypatch, "w1")
    rows = [history_row(d, p99=5.0) for d in range(1, 4)] + [history_row(4, version="3.9.0", p99=4.0)]
    write_history_rows(tmp_path / "hist", rows)
    for f in (tmp_path / "hist").rglob("*.parquet"):
        s3.upload_file(str(f), BUCKET, "team/history/" + f.relative_to(tmp_path / "hist").as_posix())
    path = analysis.compare(ROOT, "manual__c1")
    assert "3.9.0" in open(path).read()
    assert {"team/comparisons/manual__c1/comparison.html", "team/comparisons/latest.html"} <= _keys(s3)


def test_the_spark_steps_on_an_s3_root_submit_after_what_the_job_reads_is_in_the_store(s3, tmp_path, monkeypatch):
    """The aggregation is refused without a measured phase in the store; the history job is submitted once the
    run's run_meta.json is in S3 (the job reads it there), and the history files it wrote are uploaded after it."""
    from brokerbench.history import history_run_key

    _worker(tmp_path, monkeypatch, "w1")
    ctx = _ctx()
    run = f"team/runs/{ctx.run_key}/"
    with ctx.synced():
        with pytest.raises(analysis.NothingToDo, match="nothing to aggregate"):
            analysis.aggregate_results(ctx, lambda args, root: pytest.fail("submitted"))
        (ctx.run_dir / "summary").mkdir(parents=True)
        (ctx.run_dir / "summary" / "summary.parquet").write_bytes(b"PAR1")
    key = history_run_key(ctx.dag_id, ctx.run_id)
    rel = f"broker=kafka/broker_version=1/workload=w/variant=v/date=2026-11-02/run_key={key}/part-0.parquet"
    submitted = []

    def submit(args, results_root):
        assert run + "summary/run_meta.json" in _keys(s3)
        assert args[-2:] == ["--history-out", str(ctx.local_results_root / "history")]
        out = ctx.local_results_root / "history"
        (out / rel).parent.mkdir(parents=True)
        (out / rel).write_bytes(b"rows")
        (out / "_manifests").mkdir()
        (out / "_manifests" / f"{key}.json").write_text(json.dumps({"run_key": key, "files": [rel]}))
        submitted.append((args[:4], results_root))
        return "appended"

    _worker(tmp_path, monkeypatch, "w2")
    ctx = _ctx()
    with ctx.synced():
        assert analysis.append_history(ctx, "manual", "2026-11-02T00:00:00+00:00", submit) == "appended"
    assert submitted == [(["--history-root", f"{ROOT}/history", "--run-dir", f"{ROOT}/runs/{ctx.run_key}"], ROOT)]
    assert f"team/history/{rel}" in _keys(s3)
