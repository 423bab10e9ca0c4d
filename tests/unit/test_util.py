"""The shared helpers: names, keys, atomic writes, text tables."""

import json

from brokerbench.pipeline.context import RunContext
from brokerbench.util import dag_id_for, run_key, safe_name, text_table, write_atomic, write_json_atomic


def test_safe_name_keeps_exactly_the_result_path_character_set():
    assert safe_name("manual__2026-11-23T02:13:21.105238+00:00") == "manual__2026-11-23T02_13_21.105238_00_00"
    assert safe_name("a=b.c_d-e") == "a=b.c_d-e"
    assert safe_name("x/y z:+") == "x_y_z__"


def test_run_key_and_dag_id_are_the_ones_the_pipeline_and_dags_use():
    assert run_key("brokerbench_smoke", "manual__2026:1") == "brokerbench_smoke/manual__2026_1"
    ctx = RunContext("brokerbench_smoke", "manual__2026:1", "smoke")
    assert ctx.run_key == run_key(ctx.dag_id, ctx.run_id)
    assert dag_id_for("aws-seed-latency") == "brokerbench_aws_seed_latency"


def test_atomic_writes_leave_no_temporary_file(tmp_path):
    write_json_atomic(tmp_path / "a" / "x.json", {"b": 1, "a": {"c": tmp_path}})
    assert json.loads((tmp_path / "a" / "x.json").read_text()) == {"a": {"c": str(tmp_path)}, "b": 1}
    write_atomic(tmp_path / "a" / "y.bin", b"\x00\x01")
    assert (tmp_path / "a" / "y.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.json", "y.bin"]


def test_text_table():
    assert text_table(["broker", "p99 ms"], [["kafka", "1.5"], ["rabbitmq", None]]).splitlines() == [
        "broker    p99 ms",
        "--------  --------",
        "kafka     1.5",
        "rabbitmq",
    ]
