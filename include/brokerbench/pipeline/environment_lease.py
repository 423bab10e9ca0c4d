"""The run's hold on its environment (a lease in :mod:`brokerbench.lease`, kept in the results store):
taken before provisioning, renewed before every step that loads the hosts, given back at the end."""

from __future__ import annotations

import os
from typing import Any

from brokerbench import lease
from brokerbench.pipeline.context import RunContext, log

# -- the environment's lease (brokerbench.lease) ---------------------------------


def lease_scope(ctx: RunContext) -> tuple[str, int]:
    """The run's lease scope and its number of slots, as its environment says
    (:meth:`brokerbench.environments.registry.EnvironmentKind.lease_scope`)."""
    return ctx.environment_kind().lease_scope(ctx.environment_settings(), ctx.plan_or_none())


def lease_ttl_s(ctx: RunContext) -> float:
    """How long the lease lasts without renewal: the longest phase of the plan plus 30 minutes (every step
    of the run renews it, so a crashed run frees the environment this long after its last step)."""
    longest = max((max(i.workload.warmup_duration_minutes or 0, i.workload.test_duration_minutes or 0)
                   for i in ctx.plan().items), default=0)
    return longest * 60.0 + 1800.0


def lease_store(ctx: RunContext):
    """Where the run's lease lives: the results store (``<results root>/locks``), shared by every worker."""
    return lease.store_for(ctx.results_root)


def acquire_environment(ctx: RunContext):
    """Take the environment's lease for this run: None when held, else :class:`brokerbench.lease.Busy`."""
    scope, slots = lease_scope(ctx)
    # `brokerbench bench` runs the whole DAG in one `airflow dags test` process: the lease goes with it
    bound = os.getpid() if os.environ.get("BROKERBENCH_LEASE_BOUND_TO_PROCESS") else None
    return lease.acquire(scope, ctx.run_key, slots=slots, ttl_s=lease_ttl_s(ctx),
                         note=f"suite {ctx.suite}, results {ctx.results_uri}", bound_pid=bound,
                         store=lease_store(ctx))


def hold_environment(ctx: RunContext) -> None:
    """Renew the run's lease before a step that loads the hosts; LeaseLost when the run does not hold it."""
    scope, _ = lease_scope(ctx)
    lease.renew(scope, ctx.run_key, lease_store(ctx))


def release_environment(ctx: RunContext) -> bool:
    scope, _ = lease_scope(ctx)
    return lease.release(scope, ctx.run_key, lease_store(ctx))


def recover_dead_runs(ctx: RunContext) -> list[dict[str, Any]]:
    """Before this run deploys anything: stop what runs that died holding the environment's lease left there
    (their brokers and workers, from the process registry), mark each dead run's DAG run and its unfinished task
    instances failed in Airflow's database (:func:`.airflow_runs.fail_dead_run`: where this process has the
    database), say so in the log and in the run's provenance (provenance/recovered.json, also when there was
    nothing to stop). Call it while holding the lease."""
    from brokerbench.pipeline import airflow_runs

    scope, _ = lease_scope(ctx)
    env = ctx.environment()
    recovered = []
    for key, dead in sorted(lease.take_dead(scope, lease_store(ctx)).items()):
        stopped = env.stop_leftovers_of(key)
        airflow = airflow_runs.fail_dead_run(key)
        recovered.append({"run": key, "why": dead.get("why"), "stopped": stopped, "airflow": airflow})
        log.warning("recovered the %s environment from dead run %s (%s): %d process(es) it left running stopped%s; "
                    "Airflow: %s", scope, key, dead.get("why"), len(stopped),
                    ": " + ", ".join(f"{p.get('broker')} {p.get('role')} pid {p.get('pid')}" for p in stopped)
                    if stopped else "", airflow["said"])
    ctx.write_json("provenance/recovered.json", {"scope": scope, "dead_runs": recovered})
    return recovered
