"""brokerbench.pipeline.teardown: what the environment stopped is recorded with the run."""

from brokerbench.pipeline import teardown
from brokerbench.pipeline.context import RunContext


class _Env:
    def __init__(self):
        self.calls = 0

    def teardown(self):
        self.calls += 1
        return {"stopped": ["rabbitmq"], "left": []}


def test_teardown_records_what_it_stopped(tmp_path, monkeypatch):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    env = _Env()
    monkeypatch.setattr(ctx, "environment", lambda side=None: env)
    assert teardown.teardown(ctx) == {"stopped": ["rabbitmq"], "left": []}
    assert env.calls == 1
    assert ctx.read_json("provenance/teardown.json") == {"stopped": ["rabbitmq"], "left": []}
