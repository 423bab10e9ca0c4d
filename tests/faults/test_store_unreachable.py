"""A crash of the results store: S3 (moto's server) goes away while a task runs. The task fails within
seconds with one clear line, what it wrote stays in the staging copy, and the next push uploads it."""

from __future__ import annotations

import json
import time

import boto3
import pytest
from moto.server import ThreadedMotoServer

from brokerbench.pipeline.context import RunContext
from brokerbench.storage import StoreUnreachable
from tests.aws_fixtures import free_port, wait_port

BUCKET = "bench-results"


def _server(port: int) -> ThreadedMotoServer:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    wait_port(port)
    return server


@pytest.mark.timeout(300)
def test_an_unreachable_store_fails_the_task_clearly_and_loses_nothing(tmp_path, monkeypatch):
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_AWS", json.dumps(
        {"conn_type": "aws", "login": "testing", "password": "testing",
         "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    server = _server(port)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    s3.create_bucket(Bucket=BUCKET)
    ctx = RunContext(dag_id="brokerbench_smoke", run_id="manual__1", suite="smoke",
                     params={"results_root": f"s3://{BUCKET}/team"})
    result = ctx.run_dir / "raw" / "w" / "d" / "fsync-off" / "measure" / "localhost-0.jsonl"
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnreachable) as refused:
            with ctx.synced():
                result.parent.mkdir(parents=True)
                result.write_text('{"record":"end","status":"ok"}\n')
                server.stop()  # the store goes away while the task runs
        took = time.monotonic() - started
        message = str(refused.value)
        print(f"unreachable store: failed after {took:.1f} s: {message}")
        assert message.startswith(f"the results store s3://{BUCKET}/team could not be written (")
        assert "nothing is lost" in message and str(ctx.run_dir.parents[2]) in message
        assert took < 60, took
        assert result.read_text() == '{"record":"end","status":"ok"}\n'  # kept in the staging copy

        server = _server(port)  # the store is back (moto keeps its buckets in this process)
        with ctx.synced():
            pass  # the retry's push
        key = f"team/runs/{ctx.run_key}/raw/w/d/fsync-off/measure/localhost-0.jsonl"
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == result.read_bytes()
    finally:
        server.stop()
