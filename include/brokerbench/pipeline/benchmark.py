"""The benchmark task group, per broker x variant: deploy the broker, prepare the topics, run the warm-up and
measured phases on the environment's workers, undeploy.

A group's items are the plan's ``items_for(broker, variant)``: grouped by ``PlanItem.group_variant``, so side B
of an A/B run on another variant (compare_with.variants) runs in side A's group, alternating with it, while its
results, topics, provenance and phase labels go by its own variant (``item.variant``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from brokerbench.environments.base import BrokerEndpoint
from brokerbench.pipeline import environment_lease
from brokerbench.pipeline.context import NotSelected, RunContext, log
from brokerbench.spec import PlanItem
from brokerbench.spec.clients import ceiling_warning
from brokerbench.util import run_prefix, safe_name, write_atomic
from brokerbench.worker import jvm
from brokerbench.worker.job import LEAD_IN_MAX_S, Job, JobWorkload
from brokerbench.worker.runner import SWEEP_RATES, prepare_job
from brokerbench.worker.scaleout import shares, split_job

# -- per broker x variant ---------------------------------------------------


def _items(ctx: RunContext, broker: str, variant: str) -> list[PlanItem]:
    """The plan's items of ``broker`` x ``variant``; NotSelected when the run has none (params chose others)."""
    items = ctx.plan().items_for(broker, variant)
    if not items:
        raise NotSelected(f"{broker} / {variant} is not selected for this run")
    return items


def _provenance_path(broker: str, variant: str, side: str | None = None) -> str:
    """The deployed broker's record: ``provenance/<broker>__<variant>.json``; side B of an A/B run that deploys its
    sides afresh (another broker version, another variant): ``<broker>__<side B's variant>.B.json``, where the
    aggregation finds side B's rows their own provenance (by their variant and side)."""
    return f"provenance/{broker}__{variant}{'.B' if side == 'B' else ''}.json"


def _deployed_path(broker: str, variant: str) -> str:
    """Which side of an A/B run that redeploys its sides is deployed now in the deployment of ``broker`` x
    ``variant`` (side A's variant): "A" or "B"."""
    return f"state/{broker}__{variant}.side"


def _redeploys(ctx: RunContext, broker: str) -> bool:
    return ctx.plan().redeploys_sides(broker)


def deploy(ctx: RunContext, broker: str, variant: str) -> dict[str, Any]:
    """The deployment of ``broker`` x ``variant``: in an A/B run that redeploys its sides, the first trial's side,
    afresh (a broker left running with equal settings is stopped first, as at every later change of side)."""
    environment_lease.hold_environment(ctx)
    first = _items(ctx, broker, variant)[0]
    if not _redeploys(ctx, broker):
        return deploy_side(ctx, broker, variant, None).to_dict()
    ctx.environment(first.side).undeploy(broker)
    return deploy_side(ctx, broker, variant, first.side).to_dict()


def deploy_side(ctx: RunContext, broker: str, variant: str, side: str | None) -> BrokerEndpoint:
    """Deploy ``broker`` for the deployment of ``variant`` (side A's) as ``side`` of an A/B run that redeploys its
    sides wants it - its broker version, its variant's broker settings and JVM options - (None: the run's one
    deployment) and record it (provenance, and which side is deployed)."""
    items = [i for i in _items(ctx, broker, variant) if side is None or i.side == side]
    first = items[0]
    endpoint = ctx.environment(side).deploy(broker, first.broker_settings, first.variant, first.driver_overrides,
                                            jvm_options=list(first.jvm_options))
    record = {**endpoint.to_dict(), "variant_description": first.variant_description,
              "variant_jvm_options": list(first.jvm_options),
              "drivers": {i.driver.name: i.driver.to_omb_dict() for i in items}}
    if side is not None:
        record["side"] = side
    if first.variant != variant:
        record["deployment_of"] = variant  # side B's variant, alternating with side A's in side A's task group
    ctx.write_json(_provenance_path(broker, first.variant, side), record)
    if side is not None:
        write_atomic(ctx.run_dir / _deployed_path(broker, variant), side)
    d = endpoint.durability or {}
    log.info("%s deployed%s: %s %s; %sdurability %s: %s", broker, f" (side {side})" if side else "",
             endpoint.implementation, endpoint.version,
             f"JVM options {' '.join(first.jvm_options)}; " if first.jvm_options else "", first.variant,
             "honoured" if d.get("honoured") else f"NOT honoured: {d.get('note')}")
    return endpoint


def deployed_side(ctx: RunContext, broker: str, variant: str) -> str | None:
    """The side deployed now in an A/B run that redeploys its sides (None in other runs or before the deploy)."""
    try:
        return (ctx.run_dir / _deployed_path(broker, variant)).read_text().strip() or None
    except OSError:
        return None


def _endpoint(ctx: RunContext, broker: str, variant: str) -> BrokerEndpoint:
    """Where the deployed broker listens, from the deploy task's provenance record (of the side deployed now)."""
    side = deployed_side(ctx, broker, variant)
    own = ctx.plan().side_variant(broker, variant, side)
    return BrokerEndpoint.from_dict(ctx.read_json(_provenance_path(broker, own, side)))


def _names(ctx: RunContext, item) -> tuple[list[str], list[str]]:
    """Topic and subscription names, unique per run (OMB uses random names); the trials of a workload share
    them (the first trial's warm-up prepared them)."""
    prefix = run_prefix(ctx.run_key)
    base = safe_name(f"{prefix}-{item.base_workload_id}-{item.variant}")
    topics = [f"{base}-{t}" for t in range(item.workload.topics)]
    # the run's prefix too: a Kafka consumer group named "sub-0" would otherwise be shared with every earlier
    # run on the same broker, and the external environment deletes exactly what carries the prefix
    subs = [f"{prefix}-sub-{s}" for s in range(item.workload.subscriptions_per_topic)]
    return topics, subs


def _job(ctx: RunContext, item, endpoint: BrokerEndpoint, phase: str, duration_s: float, interval_s: float,
         worker: str) -> Job:
    topics, subs = _names(ctx, item)
    w = item.workload
    workload = JobWorkload.parse(w.to_omb_dict())
    if getattr(w, "payload_path", None):
        workload.payload_file = str(w.payload_path)  # the worker may run in another directory
    sweep_rates = w.sweep_rates_msg_s
    if phase == "warmup" and workload.kind_of() == "throughput-sweep":
        # the warm-up of a sweep is its first step held for the whole warm-up: running every step there would
        # end it overloading the broker, and the measured phase's first (lowest) step would start on that backlog
        sweep_rates = [(sweep_rates or SWEEP_RATES)[0]]
    return Job.build(workload=workload, worker=worker, phase=phase, workload_id=w.id, broker=item.broker,
                     variant=item.variant, driver=item.driver.to_omb_dict(), endpoint=endpoint.to_dict(),
                     topics=topics, subscriptions=subs, duration_s=duration_s, interval_s=interval_s,
                     client_library=item.client_library, sweep_rates_msg_s=sweep_rates,
                     clock_offset_ms=_clock_offset_ms(ctx))


def _clock_offset_ms(ctx: RunContext) -> float | None:
    """The largest clock offset of any host (host setup's record), for validity flags."""
    try:
        hosts = ctx.read_json("provenance/hosts.json").get("hosts", [])
    except (OSError, ValueError):
        return None
    offsets = [abs(float(h["time_sync"]["clock_offset_ms"])) for h in hosts
               if (h.get("time_sync") or {}).get("clock_offset_ms") is not None]
    return max(offsets) if offsets else None


def worker_processes(ctx: RunContext) -> int:
    """Worker processes per client host: ``BROKERBENCH_WORKER_PROCESSES``, else the plan's
    environment setting ``worker_processes``, else 1 (see docs/worker.md, scale-out)."""
    return processes_for(ctx.plan())


def processes_for(plan) -> int:
    """:func:`worker_processes` of a plan."""
    value = os.environ.get("BROKERBENCH_WORKER_PROCESSES") or \
        (getattr(plan, "environment_settings", {}) or {}).get("worker_processes") or 1
    return max(1, int(value))


def client_rate_warnings(plan, processes: int) -> list[str]:
    """One line per workload and broker whose rate per worker process (split over ``processes`` as the run
    splits it) is above the measured ceiling of the item's client library (spec/clients.py); in plan order."""
    warnings: dict[str, None] = {}
    for item in plan.items:
        w = item.workload
        if not w.producer_rate:
            continue  # 0 = find the maximum rate (a sweep, or unthrottled): no rate to hold
        consumers = w.consumer_per_subscription if w.subscriptions_per_topic else 0
        what = f"workload {item.base_workload_id!r} on {item.broker} (driver {item.driver.name!r})"
        for share in shares(w.producers_per_topic, consumers, float(w.producer_rate), processes):
            if share is None or not share.producers_per_topic:
                continue
            line = ceiling_warning(item.broker, item.client_library, share.rate_msg_s,
                                   bool(share.consumers_per_subscription), what)
            if line:
                warnings.setdefault(line, None)
                break  # one line per workload and broker: the first process above its ceiling
    return list(warnings)


def jvm_libraries() -> set[str]:
    """The client libraries that run in the JVM engine (brokerbench.worker.jvm)."""
    return {lib for lib, _ in jvm.JVM_LIBRARIES.values()}


def record_client_engine(ctx: RunContext, broker: str, variant: str, libraries: set[str],
                         side: str | None = None) -> dict[str, Any] | None:
    """When one of ``libraries`` runs in the JVM engine (docs/worker.md): its build (source hash, the engine jar's
    and every client jar's SHA-256) into ``provenance/<broker>__<variant>.json`` (side B of an A/B run that
    redeploys its sides: ``<broker>__<variant>.B.json``) as ``client_engine``; None when none does or it is not
    built."""
    if not jvm_libraries() & libraries:
        return None
    manifest = jvm.manifest()
    if manifest is None:
        return None
    engine = {k: manifest.get(k) for k in ("engine", "source_hash", "built", "jar", "libraries", "lib")}
    record = ctx.read_json(_provenance_path(broker, variant, side))
    record["client_engine"] = engine
    ctx.write_json(_provenance_path(broker, variant, side), record)
    return engine


def prepare_topics(ctx: RunContext, broker: str, variant: str) -> list[str]:
    environment_lease.hold_environment(ctx)
    return _prepare(ctx, broker, variant, _endpoint(ctx, broker, variant), deployed_side(ctx, broker, variant))


def _prepare(ctx: RunContext, broker: str, variant: str, endpoint: BrokerEndpoint, side: str | None) -> list[str]:
    """Create every workload's topics and subscriptions on the deployed broker (``side``: only that side's items,
    in an A/B run that redeploys its sides)."""
    env = ctx.environment(side)
    created = []
    libraries = set()
    for item in _items(ctx, broker, variant):
        if not item.warms_up or (side is not None and item.side != side):
            continue  # a later trial: the first trial's topics; the other side: prepared after its deploy
        job = _job(ctx, item, endpoint, "prepare", 0, 1, "prepare")
        env.record_created(broker, object_names(job))  # before they exist: a crash in between leaves none unknown
        with env.client_secrets():
            prepare_job(job)  # a JVM engine's library: built first (brokerbench.worker.jvm.ensure_built)
        created += job.topics
        libraries.add(item.client_library)
        log.info("%s: created %s with %d partitions and subscriptions %s", broker, ", ".join(job.topics),
                 item.workload.partitions_per_topic, ", ".join(job.subscriptions))
    record_client_engine(ctx, broker, ctx.plan().side_variant(broker, variant, side), libraries, side)
    return created


def object_names(job: Job) -> list[str]:
    """The names a job's prepare creates on the broker: topics (RabbitMQ: exchanges) and subscriptions (Kafka:
    consumer groups; Pulsar: subscriptions of the topics) or, on RabbitMQ, which has no subscription object,
    the queues ``<topic>.<subscription>.<partition>``."""
    if job.broker == "rabbitmq":
        partitions = job.workload.partitions_per_topic
        return list(job.topics) + [f"{t}.{s}.{p}" for t in job.topics for s in job.subscriptions
                                   for p in range(partitions)]
    return list(job.topics) + list(job.subscriptions)


def raw_prefixes(ctx: RunContext, broker: str, variant: str) -> list[str]:
    """The result directories (relative to the run dir) of broker x variant's workloads: what a retried phase
    reads to skip measurements already complete."""
    try:
        items = _items(ctx, broker, variant)
    except (NotSelected, FileNotFoundError):
        return []
    return sorted({f"raw/{safe_name(i.workload.id)}/{safe_name(i.driver.name)}/{safe_name(i.variant)}"
                   for i in items})


def result_path(ctx: RunContext, item, phase: str, worker: str) -> Path:
    return (ctx.run_dir / "raw" / safe_name(item.workload.id) / safe_name(item.driver.name)
            / safe_name(item.variant) / phase / f"{safe_name(worker)}.jsonl")


def completed_ok(path: Path) -> bool:
    """True when a result file ends with an ``end`` record of status ok."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            last = f.read().decode(errors="replace").strip().splitlines()[-1]
        rec = json.loads(last)
        return rec.get("record") == "end" and rec.get("status") == "ok"
    except (OSError, IndexError, ValueError):
        return False


def _interval_count(path: Path) -> int:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.startswith('{"record":"interval"'))
    except OSError:
        return 0


def keep_best_attempt(final: Path, attempt: Path) -> Path:
    """Decide which of two attempts' result files is the phase's result.

    The new attempt replaces the earlier file when it completed, or when it
    measured more intervals; the other file is kept beside it under a name
    the aggregation does not read (``*.jsonl.superseded-<time>``). Results
    already measured are never lost to a retry that fails sooner.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S")
    if not final.exists() or completed_ok(attempt) or _interval_count(attempt) > _interval_count(final):
        if final.exists():
            final.replace(final.with_name(f"{final.name}.superseded-{stamp}"))
        attempt.replace(final)
    elif attempt.exists():
        attempt.replace(final.with_name(f"{final.name}.superseded-{stamp}"))
        log.warning("%s: this attempt measured less than the earlier one; the earlier result is kept", final)
    return final


def salvage_attempts(run_dir: Path) -> list[Path]:
    """The result files of a try that was killed before it could keep them (``<result>.attempt``, written as the
    worker measures): each becomes the result, or is kept beside it (:func:`keep_best_attempt`), so a crash or
    the next try never loses what was measured. Returns the results decided."""
    decided = []
    for attempt in sorted((run_dir / "raw").glob("*/*/*/*/*.jsonl.attempt")):
        final = attempt.with_name(attempt.name.removesuffix(".attempt"))
        decided.append(keep_best_attempt(final, attempt))
        log.warning("kept what a killed try measured: %s -> %s", attempt.name, decided[-1].name)
    return decided


def run_phase(ctx: RunContext, broker: str, variant: str, phase: str) -> list[dict[str, Any]]:
    """Run the warm-up or the measured phase of every workload of broker x variant.

    With trials (plan ``trials`` > 1) the measured phase runs each workload's
    trials back to back, each into its own result files; only the first trial
    has a warm-up. In an A/B run that redeploys its sides (side B on another
    broker version or variant, :meth:`Plan.redeploys_sides`), the measured phase
    stops the broker and deploys the other side's afresh wherever the side
    changes (ABBA: once per pair of trials), prepares the topics again and warms
    the new broker up before the trial; the warm-up task warms up the side
    deployed first only. A retried task skips workloads whose result is already
    complete. A failing workload does not stop the others; the task fails at the
    end, naming every failure, with all result files kept.
    """
    endpoint = _endpoint(ctx, broker, variant)
    environment_lease.hold_environment(ctx)
    env = ctx.environment()
    # a killed earlier try of this task may have left its workers sending: never measure beside them
    for w in env.stop_workers():
        log.warning("stopped a leftover worker of an earlier try: %s", w)
    salvage_attempts(ctx.run_dir)  # before this try writes its own attempt files over them
    env.health(broker)  # a broker that died fails here, by name, before any load
    redeploys = _redeploys(ctx, broker)
    outcomes: list[dict[str, Any]] = []
    failures: list[str] = []
    for item in _items(ctx, broker, variant):
        if phase == "warmup" and not item.warms_up:
            continue  # trial 2..N: measured right after the trial before it, on the same warm topics
        if redeploys and item.side != deployed_side(ctx, broker, variant):
            if phase == "warmup":
                log.info("%s: side %s is warmed up after its deploy, in the measured phase", item.key, item.side)
                continue
            if phase == "measure" and _complete(ctx, item):
                continue
            endpoint = _switch_side(ctx, broker, variant, item)
            res, failed = _run_item(ctx, env, item, endpoint, "warmup")
            outcomes, failures = outcomes + res, failures + failed
        res, failed = _run_item(ctx, env, item, endpoint, phase)
        outcomes, failures = outcomes + res, failures + failed
    if failures:
        raise RuntimeError(f"{phase} on {broker} failed for {len(failures)} worker(s); results measured so far "
                           f"are kept in {ctx.run_dir / 'raw'}:\n" + "\n".join(failures))
    return outcomes


def _switch_side(ctx: RunContext, broker: str, variant: str, item) -> BrokerEndpoint:
    """Stop the broker and deploy ``item``'s side afresh (a new process: never one reused because its settings
    equal the other side's), create the topics again; the caller warms it up."""
    log.info("%s: side %s: deploying %s afresh (%s)", item.key, item.side, broker, side_difference(ctx, item))
    ctx.environment(item.side).undeploy(broker)
    endpoint = deploy_side(ctx, broker, variant, item.side)
    _prepare(ctx, broker, variant, endpoint, item.side)
    return endpoint


def side_difference(ctx: RunContext, item) -> str:
    """What ``item``'s side deploys other than the other side, in words: its variant, version, broker settings or
    JVM options; "same version and settings as side A: an A/A redeploy" when nothing differs."""
    plan = ctx.plan()
    other_side = "A" if item.side == "B" else "B"
    other = next((i for i in plan.items_for(item.broker, item.group_variant) if i.side == other_side), item)
    versions = {s: (plan.side_environment_settings(s).get("broker_versions") or {}).get(item.broker)
                or (ctx.environment_kind().default_broker_versions() or {}).get(item.broker) for s in ("A", "B")}
    said = []
    if item.variant != other.variant:
        said.append(f"variant {item.variant}")
    if versions[item.side] != versions[other_side]:
        said.append(f"version {versions[item.side]}")
    if item.broker_settings != other.broker_settings and item.variant == other.variant:
        said.append("broker settings " + (", ".join(f"{k}={v}" for k, v in sorted(item.broker_settings.items()))
                                          or "the defaults"))
    if item.jvm_options != other.jvm_options and item.variant == other.variant:
        said.append(f"JVM options {' '.join(item.jvm_options) or 'the defaults'}")
    return ", ".join(said) or f"same version and settings as side {other_side}: an A/A redeploy"


def _complete(ctx: RunContext, item) -> bool:
    """Whether ``item``'s measured phase already has complete result files (a retried task skips it)."""
    outs = [o for o in (ctx.run_dir / "raw" / safe_name(item.workload.id) / safe_name(item.driver.name)
                        / safe_name(item.variant)).glob("*/*.jsonl") if o.parent.name in ("measure", "sweep")]
    return bool(outs) and all(completed_ok(o) for o in outs)


def _run_item(ctx: RunContext, env, item, endpoint: BrokerEndpoint,
              phase: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One workload's warm-up or measured phase on the environment's workers: (worker outcomes, failures)."""
    plan = ctx.plan()
    minutes = item.workload.warmup_duration_minutes if phase == "warmup" else item.workload.test_duration_minutes
    if not minutes:
        log.info("%s: no %s configured", item.key, phase)
        return [], []
    job = _job(ctx, item, endpoint, phase, minutes * 60.0, plan.interval_seconds, "localhost-0")
    # a throughput sweep's measured phase is written to phase directory "sweep"
    phase_dir = "sweep" if phase == "measure" and job.kind == "throughput-sweep" else phase
    jobs = [one.with_(phase=phase_dir) for one in split_job(job, worker_processes(ctx))]
    outs = [result_path(ctx, item, phase_dir, one.worker) for one in jobs]
    out = outs[0]
    if phase == "measure" and all(completed_ok(o) for o in outs):
        log.info("%s: measured phase already complete in %s, not repeated", item.key, out.parent)
        return [], []
    attempts = [o.with_name(o.name + ".attempt") for o in outs]
    log.info("%s: %s (%s) for %.0f s at %s msg/s in %d worker process(es)", item.key, phase, job.kind,
             minutes * 60, job.rate_msg_s, len(jobs))
    label = safe_name(f"{item.workload.id}__{item.driver.name}__{item.variant}__{phase}")
    if item.client_library in jvm_libraries():
        # the JVM engine's build (made by the prepare step), for workers on other machines than this one
        jvm.ensure_built(progress=lambda line: log.info("%s", line))
        env.provide_client_engine(str(jvm.engine_dir()))
    phase_rec = env.before_phase(phase, label)
    scraping = env.start_broker_metrics(label)
    try:
        # the environments take jobs as their files' dicts (Job.to_dict: an agent sends them on as JSON)
        res = env.run_workers([one.to_dict() for one in jobs], [str(a) for a in attempts],
                              timeout_s=minutes * 60.0 + job.lead_in_s + WORKER_GRACE_S)
    finally:
        under = Path(*out.relative_to(ctx.run_dir / "raw").parts[:-1])
        if scraping is not None:
            # the brokers' own metrics of the phase (brokermetrics/<same path>/<host>.jsonl)
            scraping["files"] = env.stop_broker_metrics(label, str(ctx.run_dir / "brokermetrics" / under))
        if phase_rec is not None:
            # host metrics of the phase, stored with the results (hostmetrics/<same path>/<host>.jsonl)
            phase_rec["hosts"] = env.after_phase(phase, label, str(ctx.run_dir / "hostmetrics" / under))
            if scraping is not None:
                phase_rec["broker_metrics"] = scraping
            ctx.write_json(f"provenance/phases/{label}.json", phase_rec)
    for o, a in zip(outs, attempts):
        keep_best_attempt(o, a)
    for r, o in zip(res, outs):
        r["path"] = str(o)
    return res, [f"{item.key}: {r['worker']}: {r.get('error') or 'exit ' + str(r['returncode'])}"
                 for r in res if r.get("returncode") != 0]


#: the workers' own bound past a phase's duration (run_phase's timeout_s), s
WORKER_GRACE_S = 180.0


def phase_timeout_s(ctx: RunContext, broker: str, variant: str, phase: str) -> float:
    """A phase task's execution_timeout: each workload's phase plus the workers' bound, plus 5 minutes; in an A/B
    run that redeploys its sides, the measured phase also each change of side's deploy and warm-up."""
    total, side = 0.0, "A"
    redeploys = _redeploys(ctx, broker)
    for item in _items(ctx, broker, variant):
        if phase == "warmup" and not item.warms_up:
            continue
        if redeploys and item.side != side:
            if phase == "warmup":
                continue  # warmed up after its deploy, in the measured phase
            side = str(item.side)
            total += DEPLOY_BOUND_S + (item.workload.warmup_duration_minutes or 0) * 60.0 + WORKER_GRACE_S
        minutes = item.workload.warmup_duration_minutes if phase == "warmup" else item.workload.test_duration_minutes
        if minutes:
            total += minutes * 60.0 + (LEAD_IN_MAX_S if phase == "measure" else 0.0) + WORKER_GRACE_S
    return total + 300.0


#: a broker deploy's bound in a phase task's execution_timeout (an A/B run's change of side), s
DEPLOY_BOUND_S = 600.0


def undeploy(ctx: RunContext, broker: str) -> None:
    ctx.environment().undeploy(broker)
