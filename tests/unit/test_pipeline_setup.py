"""brokerbench.pipeline.setup: validate writes the plan and the brokers' provenance, or refuses naming the field
before anything else runs."""

import pytest

from brokerbench.pipeline import setup
from brokerbench.pipeline.context import RunContext
from brokerbench.spec import SpecError


def test_validate_writes_the_plan_and_the_brokers_record(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["fsync-on", "fsync-off"],
                      "results_root": str(tmp_path)})
    out = setup.validate(ctx)
    assert out == {"items": len(ctx.plan().items), "run_dir": str(ctx.run_dir), "environment": "local",
                   "client_libraries": {"rabbitmq": "pika"}, "warnings": []}
    assert {(i.broker, i.variant) for i in ctx.plan().items} == {("rabbitmq", "fsync-on"), ("rabbitmq", "fsync-off")}
    assert ctx.read_json("provenance/brokers.json")["rabbitmq"]["implementation"] == "rabbitmq"


def test_a_refused_param_leaves_no_plan(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["no-such-variant"], "results_root": str(tmp_path)})
    with pytest.raises(SpecError):
        setup.validate(ctx)
    assert not ctx.plan_path.exists()
