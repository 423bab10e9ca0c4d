"""brokerbench.pipeline.environment_lease: one run at a time on an environment, for as long as its longest phase
plus a margin."""

from brokerbench import lease
from brokerbench.pipeline import environment_lease, setup
from brokerbench.pipeline.context import RunContext


def _validated(tmp_path, run_id, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    ctx = RunContext("brokerbench_smoke", run_id, "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "results_root": str(tmp_path / "r")})
    setup.validate(ctx)
    return ctx


def test_the_lease_lasts_the_longest_phase_plus_half_an_hour(tmp_path, monkeypatch):
    ctx = _validated(tmp_path, "manual__1", monkeypatch)
    longest = max(max(i.workload.warmup_duration_minutes or 0, i.workload.test_duration_minutes or 0)
                  for i in ctx.plan().items)
    assert environment_lease.lease_ttl_s(ctx) == longest * 60.0 + 1800.0
    assert environment_lease.lease_scope(ctx) == (lease.scope_for("local"), 1)


def test_a_second_run_waits_until_the_first_releases(tmp_path, monkeypatch):
    first = _validated(tmp_path, "manual__1", monkeypatch)
    second = _validated(tmp_path, "manual__2", monkeypatch)
    assert environment_lease.acquire_environment(first) is None
    busy = environment_lease.acquire_environment(second)
    assert isinstance(busy, lease.Busy)
    environment_lease.hold_environment(first)  # the holder renews
    assert environment_lease.release_environment(first) is True
    assert environment_lease.acquire_environment(second) is None
    assert environment_lease.release_environment(second) is True
