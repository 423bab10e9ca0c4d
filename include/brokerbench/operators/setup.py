"""Operators of the setup task group: validate, acquire the environment's lease, provision, host setup."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException
from typing_extensions import override

from brokerbench.operators.base import BrokerbenchStepOperator, log, run_context
from brokerbench.pipeline.environment_lease import (
    acquire_environment,
    lease_scope,
    lease_store,
    recover_dead_runs,
)
from brokerbench.pipeline.setup import provision, setup_hosts, validate
from brokerbench.spec import SpecError
from brokerbench.triggers import LeaseFreeTrigger


class ValidatePlanOperator(BrokerbenchStepOperator):
    """Validates suite, workloads, drivers, variants and params; writes plan.json.

    Fails without retry on bad input: retrying cannot fix a wrong file.
    """

    def step(self, ctx):
        try:
            return validate(ctx)
        except SpecError as e:
            raise AirflowFailException(str(e)) from e


class AcquireEnvironmentOperator(BaseOperator):
    """Takes this run's environment lease (brokerbench.lease) before the run provisions anything.

    When another run holds it, the task logs which run and defers to
    :class:`brokerbench.triggers.LeaseFreeTrigger`: the waiting run shows as
    ``deferred``, holds no worker slot and starts no process until the lease is
    free (so waiting runs add no load to the hosts being measured). Gives up
    after ``timeout`` (24 h by default).
    """

    ui_color = "#fef9e7"

    def __init__(self, *, suite: str, timeout: dt.timedelta = dt.timedelta(hours=24), poll_s: float = 5.0,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.suite = suite
        self.timeout = timeout
        self.poll_s = poll_s

    @override
    def execute(self, context: Any, event: Any = None) -> Any:
        ctx = run_context(self.suite, context)
        with ctx.synced():
            busy = acquire_environment(ctx)
            scope, slots = lease_scope(ctx)
            if busy is None:
                # before anything is deployed: what dead runs left behind is stopped (provenance/recovered.json)
                recovered = recover_dead_runs(ctx)
        if busy is None:
            log.info("this run holds the lease of the %s environment", scope)
            return {"scope": scope, "run_key": ctx.run_key, "recovered": [r["run"] for r in recovered]}
        log.info("waiting, not failing: %s. This run provisions when the lease is free.", busy)
        self.defer(trigger=LeaseFreeTrigger(scope, slots, str(lease_store(ctx)), self.poll_s),
                   method_name="execute", timeout=self.timeout)


def _cleanup_failed_provision(context: Any) -> None:
    """on_failure_callback of provision: Airflow skips a setup's teardown when the setup failed, so whatever
    the failed tries created (found again by the run's tag) is removed here."""
    task = context["task"]
    ctx = run_context(task.suite, context)
    try:
        with ctx.synced():
            env = ctx.environment()
            record = env.cleanup_failed_provision(reason=str(context.get("exception")))
            log.warning("provision failed; cleaned up: %s", record)
    except Exception as e:  # noqa: BLE001 - a callback never raises; the hourly sweeper is the last resort
        log.error("cleanup after the failed provision did not complete: %s: %s", type(e).__name__, e)


class ProvisionOperator(BrokerbenchStepOperator):
    """Creates (or finds again) the hosts. A failed provision removes what it created: in the environment's own
    code (aws) and, when the last try fails, in ``on_failure_callback``."""

    ui_color = "#d5f5e3"

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("on_failure_callback", _cleanup_failed_provision)
        super().__init__(**kwargs)

    def step(self, ctx):
        return provision(ctx)


class HostSetupOperator(BrokerbenchStepOperator):
    """tuned-adm profile, time sync and clock offset, disk baseline: recorded per host."""

    def step(self, ctx):
        return setup_hosts(ctx)
