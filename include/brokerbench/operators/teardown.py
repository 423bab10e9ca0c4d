"""Teardown operators: stop everything the run started, give the environment's lease back; and the hourly
sweeper of expired aws instances."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from brokerbench.operators.base import BrokerbenchStepOperator
from brokerbench.pipeline.environment_lease import release_environment
from brokerbench.pipeline.teardown import teardown


class ReleaseEnvironmentOperator(BrokerbenchStepOperator):
    """Gives the environment's lease back (a teardown: runs whatever happened to the run)."""

    ui_color = "#f2f3f4"

    def step(self, ctx):
        return {"released": release_environment(ctx)}


class SweepExpiredInstancesOperator(BaseOperator):
    """Terminates brokerbench EC2 instances of any run that outlived their maximum lifetime."""

    ui_color = "#fadbd8"

    def execute(self, context: Any) -> Any:
        from brokerbench.environments.aws.fleet import sweep_expired  # boto3: only in the sweeper

        p = dict(context["params"] or {})
        return sweep_expired(p["aws_conn_id"], p.get("region_name") or None, float(p["grace_minutes"]),
                             bool(p["dry_run"]))


class TeardownOperator(BrokerbenchStepOperator):
    """Stops and releases everything the run started. Runs even when tasks failed."""

    ui_color = "#f2f3f4"

    def step(self, ctx):
        return teardown(ctx)
