"""The setup task group: validate the plan, provision the hosts, set them up."""

from __future__ import annotations

import json
from typing import Any

from brokerbench.environments.registry import PlanCheck, environment_kind
from brokerbench.pipeline import benchmark, environment_lease
from brokerbench.pipeline.context import RunContext, log
from brokerbench.spec import Plan, SpecError, build_plan, load_suite

# ANALYSIS_PARAMS: read by the analysis steps only; ENVIRONMENT_PARAMS: refine the plan's environment_settings
from brokerbench.spec.params import ANALYSIS_PARAMS, ENVIRONMENT_PARAMS
from brokerbench.spec.run_conf import check_names_and_numbers

# -- setup ------------------------------------------------------------------


def validate(ctx: RunContext) -> dict[str, Any]:
    """Load the suite, apply params, validate every file: write plan.json."""
    check_names_and_numbers(ctx.params)  # an unknown param is named with the closest known ones
    bench_params = {k: v for k, v in ctx.params.items() if k not in ANALYSIS_PARAMS + ENVIRONMENT_PARAMS}
    plan = build_plan(load_suite(ctx.suite), bench_params)
    # environment params (aws: versions, instance types, cost cap) refine the suite's environmentSettings
    for key in ENVIRONMENT_PARAMS:
        value = ctx.params.get(key)
        if value in (None, "", {}, []):
            continue
        if isinstance(value, dict) and isinstance(plan.environment_settings.get(key), dict):
            value = {**plan.environment_settings[key], **value}
        plan.environment_settings[key] = value
    # the environment's refusals (aws: profiles, counts, versions, types, cost cap; external: connections,
    # variants that need a broker restart, the safety limits; local: broker implementations and versions),
    # each naming the setting, before the lease and before any machine
    checked = environment_kind(plan.environment).check_plan(plan, ctx.params)
    side_b = check_side_b(plan, ctx.params)
    if side_b is not None:  # side B's own provenance files beside side A's: <name>.B.json
        checked.said += [f"side B: {line}" for line in side_b.said]
        checked.provenance.update({k.removesuffix(".json") + ".B.json": v for k, v in side_b.provenance.items()})
    for line in checked.said:
        log.info("%s", line)
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    for relpath, record in checked.provenance.items():
        ctx.write_json(relpath, record)
    ctx.write_plan(plan)
    combos = sorted({(i.broker, i.variant) for i in plan.items})
    log.info("plan: %d measurements (%s) on %s, results in %s", len(plan.items),
             ", ".join(f"{b}/{v}" for b, v in combos), plan.environment, ctx.run_dir)
    clients = {i.broker: i.client_library for i in plan.items}
    log.info("client libraries: %s", ", ".join(f"{b} {lib}" for b, lib in clients.items()))
    # a rate one worker process was never measured to hold: said, not refused (a faster host may hold it)
    warnings = benchmark.client_rate_warnings(plan, benchmark.processes_for(plan))
    for line in warnings:
        log.warning("%s", line)
    return {"items": len(plan.items), "run_dir": str(ctx.run_dir), "environment": plan.environment,
            "client_libraries": clients, "warnings": warnings}


def check_side_b(plan: Plan, params: dict[str, Any]) -> PlanCheck | None:
    """Side B's broker versions of an A/B run, checked by the environment as side A's are (a refusal names
    ``compare_with.broker_versions...``); refused where the environment deploys nothing, as side B's variants
    are (``compare_with.variants``: broker settings and JVM options need a broker deployed afresh). None: no side
    B versions."""
    kind = environment_kind(plan.environment)
    variants = (plan.compare_with or {}).get("variants")
    if variants and kind.default_broker_versions() is None:
        raise SpecError(f"the {plan.environment} environment deploys no broker (it never restarts a cluster): side B "
                        f"cannot run another variant ({', '.join(variants)}); compare runs of two variants instead "
                        "(brokerbench compare)", field="compare_with.variants")
    versions = (plan.compare_with or {}).get("broker_versions")
    if not versions:
        return None
    if kind.default_broker_versions() is None:
        raise SpecError(f"the {plan.environment} environment deploys no broker (its clusters run their own "
                        "versions): side B cannot run another version; compare runs of two clusters instead "
                        "(brokerbench compare)", field="compare_with.broker_versions")
    side_b = plan.model_copy(update={"environment_settings": plan.side_environment_settings("B")})
    merged = {**(params.get("broker_versions") or {}), **versions}
    try:
        return kind.check_plan(side_b, {**params, "broker_versions": merged})
    except SpecError as e:
        field = (e.field or "broker_versions").removeprefix("params.")
        if field.startswith("broker_versions"):
            raise SpecError(e.message, file=e.file, field=f"compare_with.{field}") from None
        # another setting side B's versions do not fit (e.g. a suite's kafka_mode): that setting, and why side B
        raise SpecError(f"side B of the A/B run (compare_with.broker_versions {json.dumps(versions)}): {e.message}",
                        file=e.file, field=field) from None


def provision(ctx: RunContext) -> dict[str, Any]:
    environment_lease.hold_environment(ctx)
    fleet = ctx.environment().provision()
    ctx.write_json("provenance/fleet.json", fleet)
    return fleet


def setup_hosts(ctx: RunContext) -> dict[str, Any]:
    environment_lease.hold_environment(ctx)
    record = ctx.environment().setup_hosts()
    ctx.write_json("provenance/hosts.json", record)
    for h in record.get("hosts", []):
        log.info("host %s: tuned %s, clock offset %s ms", h.get("name"),
                 "applied" if h.get("tuned", {}).get("applied") else
                 f"not applied ({h.get('tuned', {}).get('reason')})",
                 h.get("time_sync", {}).get("clock_offset_ms"))
    return record
