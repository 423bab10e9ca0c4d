"""Operators of the benchmark task group, per broker x variant: deploy, prepare topics, the phases, undeploy."""

from __future__ import annotations

import datetime as dt
from typing import Any

from brokerbench.operators.base import BrokerbenchStepOperator, log, run_context
from brokerbench.pipeline.benchmark import deploy, phase_timeout_s, prepare_topics, raw_prefixes, run_phase, undeploy
from brokerbench.pipeline.context import NotSelected


class _BrokerVariantOperator(BrokerbenchStepOperator):
    def __init__(self, *, broker: str, variant: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.broker = broker
        self.variant = variant


class DeployBrokerOperator(_BrokerVariantOperator):
    """Starts the broker configured for the durability variant (restarting it if needed)."""

    ui_color = "#fdebd0"

    def step(self, ctx):
        self._ctx = ctx
        return deploy(ctx, self.broker, self.variant)

    def on_kill(self) -> None:
        """A deploy stopped half-way leaves no broker process behind."""
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            log.warning("deploy killed: stopping %s", self.broker)
            undeploy(ctx, self.broker)


class PrepareTopicsOperator(_BrokerVariantOperator):
    def step(self, ctx):
        return prepare_topics(ctx, self.broker, self.variant)


class RunPhaseOperator(_BrokerVariantOperator):
    """Runs the workers for one phase (``warmup`` or ``measure``) of every workload."""

    ui_color = "#fadbd8"

    def __init__(self, *, phase: str, **kwargs: Any):
        super().__init__(**kwargs)
        if phase not in ("warmup", "measure"):
            raise ValueError(f"phase must be warmup or measure, not {phase!r}")
        self.phase = phase

    def pre_execute(self, context: Any) -> None:
        """execution_timeout from the plan: every workload's phase, plus the workers' own bound, plus 5 minutes."""
        ctx = run_context(self.suite, context)
        try:
            with ctx.synced():
                seconds = phase_timeout_s(ctx, self.broker, self.variant, self.phase)
        except (NotSelected, FileNotFoundError):
            return
        if self.execution_timeout is None or self.execution_timeout.total_seconds() > seconds:
            self.execution_timeout = dt.timedelta(seconds=seconds)
            log.info("execution_timeout %.0f s (from the plan's %s durations)", seconds, self.phase)

    def raw_needed(self, ctx):
        return raw_prefixes(ctx, self.broker, self.variant) if self.phase == "measure" else []

    def step(self, ctx):
        self._ctx = ctx
        return run_phase(ctx, self.broker, self.variant, self.phase)

    def on_kill(self) -> None:
        """Killed from the UI, the API or by execution_timeout: stop this run's workers, so no load is left."""
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            return
        stopped = ctx.environment().stop_workers()
        log.warning("%s killed: stopped %d worker process(es)%s", self.task_id, len(stopped),
                    "".join(f"\n  {w}" for w in stopped))


class UndeployBrokerOperator(BrokerbenchStepOperator):
    def __init__(self, *, broker: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.broker = broker

    def step(self, ctx):
        undeploy(ctx, self.broker)
