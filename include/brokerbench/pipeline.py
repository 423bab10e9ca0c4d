"""What each task of a benchmark DAG does, without Airflow.

Every function takes a :class:`RunContext` and works from files in the run's
results directory (``plan.json``, ``provenance/``) and the environment's
state directory, never from memory: tasks of one run may execute in separate
processes, and any task can be retried on its own. The Airflow operators in
:mod:`brokerbench.operators` are thin wrappers around these functions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# ANALYSIS_PARAMS: read by the analysis steps only; ENVIRONMENT_PARAMS: refine the plan's environment_settings
from brokerbench.spec.params import ANALYSIS_PARAMS, ENVIRONMENT_PARAMS
from brokerbench.spec.roots import default_results_root
from brokerbench.util import safe_name  # re-exported: result paths and S3 keys are built with it

log = logging.getLogger("brokerbench")

#: What a task does not download from an s3:// results store unless it reads it (RunContext.synced).
RUN_BULK = ("raw/", "hostmetrics/")

#: Repository root (include/brokerbench/pipeline.py -> parents[2]).
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class NotSelected(Exception):
    """This task's broker x variant is not part of the run (params chose others)."""


@dataclass
class RunContext:
    dag_id: str
    run_id: str
    suite: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def results_root(self) -> str:
        return self.params.get("results_root") or default_results_root()

    @property
    def run_key(self) -> str:
        from brokerbench.util import run_key

        return run_key(self.dag_id, self.run_id)

    @property
    def local_results_root(self) -> Path:
        """The results root, or its local staging copy when it is s3:// (see brokerbench.storage)."""
        from brokerbench.storage import staging_root

        return staging_root(self.results_root)

    @property
    def run_dir(self) -> Path:
        return self.local_results_root / "runs" / self.run_key

    @contextmanager
    def synced(self, *, history: bool = False, raw: Callable[["RunContext"], list[str]] | None = None):
        """For s3:// results (nothing to do for a local root): before the block, pull what the task reads into
        the staging copy - the run's small files (plan, provenance, summary; not the bulky ``raw/`` and
        ``hostmetrics/``), then ``raw(ctx)`` (result directories relative to the run dir, e.g. those a
        retried phase checks) and, with ``history``, the history partitions of the run's brokers; after it
        (also when it fails), push what the task wrote. Yields the S3Sync, or None for a local root."""
        from brokerbench.storage import synced

        run = f"runs/{self.run_key}/"

        def more() -> list[str]:  # after the run's small files came: they name what else to pull
            extra = [run + r.strip("/") + "/" for r in (raw(self) if raw else [])]
            return extra + (self.history_prefixes() if history else [])

        with synced(self.results_root, [run], push=[run], exclude=tuple(run + b for b in RUN_BULK),
                    more=more) as sync:
            yield sync

    def history_prefixes(self) -> list[str]:
        """The history partitions (relative to the results root) this run's verdicts and report read: one
        per broker of the plan (history/broker=<b>/), not the whole history."""
        brokers = sorted({i.broker for i in self.plan().items}) if self.plan_path.exists() else []
        return [f"history/broker={b}/" for b in brokers]

    @property
    def results_uri(self) -> str:
        """The run's directory in the results store: ``s3://.../runs/<dag>/<run>`` or the local path."""
        from brokerbench.storage import is_s3

        if is_s3(self.results_root):
            return f"{self.results_root.rstrip('/')}/runs/{self.run_key}"
        return str(self.run_dir)

    @property
    def plan_path(self) -> Path:
        return self.run_dir / "plan.json"

    def plan(self):
        from brokerbench.spec import Plan

        if not self.plan_path.exists():
            raise FileNotFoundError(f"{self.plan_path} is missing: the validate task has not run for this run")
        return Plan.from_json(self.plan_path.read_text())

    def environment_name(self) -> str:
        if self.plan_path.exists():
            return self.plan().environment
        if self.params.get("environment"):
            return self.params["environment"]
        from brokerbench.spec import load_suite

        return load_suite(self.suite).environment

    def environment(self):
        name = self.environment_name()
        if name == "local":
            from brokerbench.environments.local import LocalEnvironment

            return LocalEnvironment(self.run_key, self._env_settings())
        if name == "aws":
            from brokerbench.environments.aws.environment import AwsEnvironment

            return AwsEnvironment(self.run_key, self._env_settings(),
                                  plan=self.plan() if self.plan_path.exists() else None)
        raise NotImplementedError(f"environment {name!r} is not available in this version of brokerbench")

    def _env_settings(self) -> dict[str, Any]:
        if self.plan_path.exists():
            return dict(getattr(self.plan(), "environment_settings", {}) or {})
        return {}

    def write_json(self, relpath: str, data: Any) -> Path:
        from brokerbench.util import write_json_atomic

        return write_json_atomic(self.run_dir / relpath, data)

    def read_json(self, relpath: str) -> Any:
        return json.loads((self.run_dir / relpath).read_text())


# -- setup ------------------------------------------------------------------

def validate(ctx: RunContext) -> dict[str, Any]:
    """Load the suite, apply params, validate every file: write plan.json."""
    from brokerbench.spec import build_plan, load_suite

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
    if plan.environment == "aws":
        # profiles, counts, versions, types, cost cap: refused here, naming the setting, before any machine
        from brokerbench.environments.aws.environment import check_plan

        check_plan(plan, ctx.params)
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    if plan.environment == "local":
        # broker implementations and versions: resolved now (Maven Central, once per version), refused naming
        # the setting; the jars' checksums go into the provenance
        ctx.write_json("provenance/brokers.json", _check_local_brokers(plan, ctx.params))
    ctx.plan_path.write_text(plan.to_json())
    combos = sorted({(i.broker, i.variant) for i in plan.items})
    log.info("plan: %d measurements (%s) on %s, results in %s", len(plan.items),
             ", ".join(f"{b}/{v}" for b, v in combos), plan.environment, ctx.run_dir)
    return {"items": len(plan.items), "run_dir": str(ctx.run_dir), "environment": plan.environment}


def _check_local_brokers(plan, params: dict[str, Any]) -> dict[str, Any]:
    from brokerbench.environments.local import LocalSettingsError, check_brokers
    from brokerbench.spec import SpecError

    brokers = list(dict.fromkeys(i.broker for i in plan.items))
    try:
        found = check_brokers(plan.environment_settings, brokers)
    except LocalSettingsError as e:
        key, _, broker = e.setting.partition(".")
        given = params.get(key)
        source = "params" if (isinstance(given, dict) and broker in given) or (given and not broker) else \
            "environmentSettings"
        raise SpecError(str(e), None, f"{source}.{e.setting}") from None
    for broker, b in found.items():
        log.info("%s: %s %s%s", broker, b["implementation"], b.get("version") or "",
                 f" ({len(b['distribution'].get('jars', []))} jars in {b['distribution'].get('lib')})"
                 if b.get("distribution") else "")
    return found


# -- the environment's lease (brokerbench.lease) ---------------------------------

def lease_scope(ctx: RunContext) -> tuple[str, int]:
    """The run's lease scope and its number of slots (``local``: this machine, 1; ``aws``: the setting
    ``max_concurrent_runs``, default 1)."""
    from brokerbench.lease import scope_for

    env = ctx.environment_name()
    if env == "local":
        return scope_for(env), 1
    if env == "aws":
        from brokerbench.environments.aws.environment import merge_settings

        settings, _ = merge_settings(ctx._env_settings())  # defaults < suite and params < site settings
    else:
        settings = ctx._env_settings()
    return scope_for(env), max(1, int(settings.get("max_concurrent_runs") or 1))


def lease_ttl_s(ctx: RunContext) -> float:
    """How long the lease lasts without renewal: the longest phase of the plan plus 30 minutes (every step
    of the run renews it, so a crashed run frees the environment this long after its last step)."""
    longest = max((max(i.workload.warmup_duration_minutes or 0, i.workload.test_duration_minutes or 0)
                   for i in ctx.plan().items), default=0)
    return longest * 60.0 + 1800.0


def lease_store(ctx: RunContext):
    """Where the run's lease lives: the results store (``<results root>/locks``), shared by every worker."""
    from brokerbench import lease

    return lease.store_for(ctx.results_root)


def acquire_environment(ctx: RunContext):
    """Take the environment's lease for this run: None when held, else :class:`brokerbench.lease.Busy`."""
    from brokerbench import lease

    scope, slots = lease_scope(ctx)
    # `brokerbench bench` runs the whole DAG in one `airflow dags test` process: the lease goes with it
    bound = os.getpid() if os.environ.get("BROKERBENCH_LEASE_BOUND_TO_PROCESS") else None
    return lease.acquire(scope, ctx.run_key, slots=slots, ttl_s=lease_ttl_s(ctx),
                         note=f"suite {ctx.suite}, results {ctx.results_uri}", bound_pid=bound,
                         store=lease_store(ctx))


def hold_environment(ctx: RunContext) -> None:
    """Renew the run's lease before a step that loads the hosts; LeaseLost when the run does not hold it."""
    from brokerbench import lease

    scope, _ = lease_scope(ctx)
    lease.renew(scope, ctx.run_key, lease_store(ctx))


def release_environment(ctx: RunContext) -> bool:
    from brokerbench import lease

    scope, _ = lease_scope(ctx)
    return lease.release(scope, ctx.run_key, lease_store(ctx))


def provision(ctx: RunContext) -> dict[str, Any]:
    hold_environment(ctx)
    fleet = ctx.environment().provision()
    ctx.write_json("provenance/fleet.json", fleet)
    return fleet


def setup_hosts(ctx: RunContext) -> dict[str, Any]:
    hold_environment(ctx)
    record = ctx.environment().setup_hosts()
    ctx.write_json("provenance/hosts.json", record)
    for h in record.get("hosts", []):
        log.info("host %s: tuned %s, clock offset %s ms", h.get("name"),
                 "applied" if h.get("tuned", {}).get("applied") else
                 f"not applied ({h.get('tuned', {}).get('reason')})",
                 h.get("time_sync", {}).get("clock_offset_ms"))
    return record


# -- per broker x variant ---------------------------------------------------

def _items(ctx: RunContext, broker: str, variant: str):
    items = [i for i in ctx.plan().items if i.broker == broker and i.variant == variant]
    if not items:
        raise NotSelected(f"{broker} / {variant} is not selected for this run")
    return items


def _provenance_path(broker: str, variant: str) -> str:
    return f"provenance/{broker}__{variant}.json"


def deploy(ctx: RunContext, broker: str, variant: str) -> dict[str, Any]:
    items = _items(ctx, broker, variant)
    hold_environment(ctx)
    first = items[0]
    endpoint = ctx.environment().deploy(broker, first.broker_settings, variant, first.driver_overrides)
    record = {**endpoint.to_dict(), "variant_description": first.variant_description,
              "drivers": {i.driver.name: i.driver.to_omb_dict() for i in items}}
    ctx.write_json(_provenance_path(broker, variant), record)
    d = endpoint.durability or {}
    log.info("%s deployed: %s %s; durability %s: %s", broker, endpoint.implementation, endpoint.version,
             variant, "honoured" if d.get("honoured") else f"NOT honoured: {d.get('note')}")
    return endpoint.to_dict()


def _endpoint(ctx: RunContext, broker: str, variant: str) -> dict[str, Any]:
    from brokerbench.environments.base import BrokerEndpoint

    d = ctx.read_json(_provenance_path(broker, variant))
    return BrokerEndpoint.from_dict(d).to_dict()


def _names(ctx: RunContext, item) -> tuple[list[str], list[str]]:
    """Topic and subscription names, unique per run (OMB uses random names); the trials of a workload share
    them (the first trial's warm-up prepared them)."""
    tag = hashlib.sha1(ctx.run_key.encode()).hexdigest()[:8]
    base = safe_name(f"bb-{tag}-{item.base_workload_id}-{item.variant}")
    topics = [f"{base}-{t}" for t in range(item.workload.topics)]
    # the tag too: a Kafka consumer group named "sub-0" would otherwise be shared
    # with every earlier run on the same broker
    subs = [f"sub-{tag}-{s}" for s in range(item.workload.subscriptions_per_topic)]
    return topics, subs


def _job(ctx: RunContext, item, endpoint: dict, phase: str, duration_s: float, interval_s: float,
         worker: str) -> dict[str, Any]:
    topics, subs = _names(ctx, item)
    w = item.workload
    workload = w.to_omb_dict()
    if getattr(w, "payload_path", None):
        workload["payloadFile"] = str(w.payload_path)  # the worker may run in another directory
    from brokerbench.worker.job import Job

    return Job(**{
        "worker": worker, "phase": phase, "workload_id": w.id, "broker": item.broker,
        "variant": item.variant, "workload": workload, "driver": item.driver.to_omb_dict(),
        "endpoint": endpoint, "topics": topics, "subscriptions": subs,
        "duration_s": duration_s, "interval_s": interval_s, "rate_msg_s": w.producer_rate,
        "producers_per_topic": w.producers_per_topic,
        "consumers_per_subscription": w.consumer_per_subscription,
        "consumers_in_subscription": w.consumer_per_subscription,
        "kind": _kind(workload),
        "sweep_rates_msg_s": w.sweep_rates_msg_s,
        "clock_offset_ms": _clock_offset_ms(ctx),
    }).to_dict()


def _clock_offset_ms(ctx: RunContext) -> float | None:
    """The largest clock offset of any host (host setup's record), for validity flags."""
    try:
        hosts = ctx.read_json("provenance/hosts.json").get("hosts", [])
    except (OSError, ValueError):
        return None
    offsets = [abs(float(h["time_sync"]["clock_offset_ms"])) for h in hosts
               if (h.get("time_sync") or {}).get("clock_offset_ms") is not None]
    return max(offsets) if offsets else None


def _kind(workload: dict[str, Any]) -> str:
    from brokerbench.worker.runner import workload_kind

    return workload_kind(workload)


def worker_processes(ctx: RunContext) -> int:
    """Worker processes per client host: ``BROKERBENCH_WORKER_PROCESSES``, else the plan's
    environment setting ``worker_processes``, else 1 (see docs/worker.md, scale-out)."""
    value = os.environ.get("BROKERBENCH_WORKER_PROCESSES") or \
        (getattr(ctx.plan(), "environment_settings", {}) or {}).get("worker_processes") or 1
    return max(1, int(value))


def prepare_topics(ctx: RunContext, broker: str, variant: str) -> list[str]:
    from brokerbench.worker.runner import prepare_job

    endpoint = _endpoint(ctx, broker, variant)
    hold_environment(ctx)
    created = []
    for item in _items(ctx, broker, variant):
        if not item.warms_up:
            continue  # a later trial: the first trial's topics
        job = _job(ctx, item, endpoint, "prepare", 0, 1, "prepare")
        prepare_job(job)
        created += job["topics"]
        log.info("%s: created %s with %d partitions and subscriptions %s", broker, ", ".join(job["topics"]),
                 item.workload.partitions_per_topic, ", ".join(job["subscriptions"]))
    return created


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


def run_phase(ctx: RunContext, broker: str, variant: str, phase: str) -> list[dict[str, Any]]:
    """Run the warm-up or the measured phase of every workload of broker x variant.

    With trials (plan ``trials`` > 1) the measured phase runs each workload's
    trials back to back, each into its own result files; only the first trial
    has a warm-up. A retried task skips workloads whose result is already complete. A
    failing workload does not stop the others; the task fails at the end,
    naming every failure, with all result files kept.
    """
    plan = ctx.plan()
    endpoint = _endpoint(ctx, broker, variant)
    hold_environment(ctx)
    env = ctx.environment()
    # a killed earlier try of this task may have left its workers sending: never measure beside them
    for w in env.stop_workers():
        log.warning("stopped a leftover worker of an earlier try: %s", w)
    env.health(broker)  # a broker that died fails here, by name, before any load
    outcomes, failures = [], []
    for item in _items(ctx, broker, variant):
        if phase == "warmup" and not item.warms_up:
            continue  # trial 2..N: measured right after the trial before it, on the same warm topics
        minutes = item.workload.warmup_duration_minutes if phase == "warmup" else item.workload.test_duration_minutes
        if not minutes:
            log.info("%s: no %s configured", item.key, phase)
            continue
        from brokerbench.worker.scaleout import split_job

        job = _job(ctx, item, endpoint, phase, minutes * 60.0, plan.interval_seconds, "localhost-0")
        # a throughput sweep's measured phase is written to phase directory "sweep"
        phase_dir = "sweep" if phase == "measure" and job["kind"] == "throughput-sweep" else phase
        jobs = [dict(j, phase=phase_dir) for j in split_job(job, worker_processes(ctx))]
        outs = [result_path(ctx, item, phase_dir, j["worker"]) for j in jobs]
        out = outs[0]
        if phase == "measure" and all(completed_ok(o) for o in outs):
            log.info("%s: measured phase already complete in %s, not repeated", item.key, out.parent)
            continue
        attempts = [o.with_name(o.name + ".attempt") for o in outs]
        log.info("%s: %s (%s) for %.0f s at %s msg/s in %d worker process(es)", item.key, phase, job["kind"],
                 minutes * 60, job["rate_msg_s"], len(jobs))
        label = safe_name(f"{item.workload.id}__{item.driver.name}__{item.variant}__{phase}")
        phase_rec = env.before_phase(phase, label)
        try:
            res = env.run_workers(jobs, [str(a) for a in attempts], timeout_s=minutes * 60.0 + WORKER_GRACE_S)
        finally:
            if phase_rec is not None:
                # host metrics of the phase, stored with the results (hostmetrics/<same path>/<host>.jsonl)
                dest = ctx.run_dir / "hostmetrics" / Path(*out.relative_to(ctx.run_dir / "raw").parts[:-1])
                phase_rec["hosts"] = env.after_phase(phase, label, str(dest))
                ctx.write_json(f"provenance/phases/{label}.json", phase_rec)
        for o, a in zip(outs, attempts):
            keep_best_attempt(o, a)
        for r, o in zip(res, outs):
            r["path"] = str(o)
        outcomes += res
        failures += [f"{item.key}: {r['worker']}: {r.get('error') or 'exit ' + str(r['returncode'])}"
                     for r in res if r.get("returncode") != 0]
    if failures:
        raise RuntimeError(f"{phase} on {broker} failed for {len(failures)} worker(s); results measured so far "
                           f"are kept in {ctx.run_dir / 'raw'}:\n" + "\n".join(failures))
    return outcomes


#: the workers' own bound past a phase's duration (run_phase's timeout_s), s
WORKER_GRACE_S = 180.0


def phase_timeout_s(ctx: RunContext, broker: str, variant: str, phase: str) -> float:
    """A phase task's execution_timeout: each workload's phase plus the workers' bound, plus 5 minutes."""
    total = 0.0
    for item in _items(ctx, broker, variant):
        if phase == "warmup" and not item.warms_up:
            continue
        minutes = item.workload.warmup_duration_minutes if phase == "warmup" else item.workload.test_duration_minutes
        if minutes:
            total += minutes * 60.0 + WORKER_GRACE_S
    return total + 300.0


def undeploy(ctx: RunContext, broker: str) -> None:
    ctx.environment().undeploy(broker)


# -- analysis and teardown ------------------------------------------------------

#: result files of a measured phase (a throughput sweep's measured phase is written to "sweep"), under raw/
MEASURED_FILES = ("*/*/*/measure/*.jsonl", "*/*/*/sweep/*.jsonl")


def has_measurements(ctx: RunContext, sync=None) -> bool:
    """Whether the run has a measured phase's result file: in the results store's listing when ``sync`` (an
    S3Sync) is given, else in the run directory."""
    if sync is not None:
        import fnmatch

        prefix = f"runs/{ctx.run_key}/raw/"
        return any(fnmatch.fnmatch(k[len(prefix):], pat) for k in sync.listing(prefix) for pat in MEASURED_FILES)
    return any(next((ctx.run_dir / "raw").glob(pat), None) for pat in MEASURED_FILES)


def report(ctx: RunContext) -> str:
    from brokerbench.report import build_report, render_text_summary

    path = build_report(ctx.run_dir, history_root=history_root(ctx))
    log.info("\n%s", render_text_summary(ctx.run_dir))
    log.info("report: %s", path)
    return str(path)


def history_uri(ctx: RunContext) -> str:
    """The history store's URI: ``s3://.../history`` or the local history directory."""
    from brokerbench.storage import is_s3

    return f"{ctx.results_root.rstrip('/')}/history" if is_s3(ctx.results_root) else history_root(ctx)


def publish_history(ctx: RunContext, sync, out: Path) -> dict[str, int]:
    """After the history job wrote this run's rows into ``out`` (a local directory; the job's manifest
    ``_manifests/<run key>.json`` lists the files): upload exactly those files under ``history/`` and delete
    the run's keys the job did not write again (a re-run whose partition values changed), so the store never
    holds a run twice. Other runs' keys are never touched."""
    from brokerbench.history import history_run_key

    key = history_run_key(ctx.dag_id, ctx.run_id)
    manifest_path = out / "_manifests" / f"{key}.json"
    if not manifest_path.exists():
        raise RuntimeError(f"the history job wrote no manifest {manifest_path}: nothing to publish")
    files = [str(f).lstrip("/") for f in json.loads(manifest_path.read_text())["files"]]
    for rel in files:
        sync.client.upload_file(str(out / rel), sync.bucket, sync.key(f"history/{rel}"))
    mine = f"/run_key={key}/"
    stale = [rel for rel in sync.listing("history/")
             if mine in f"/{rel}" and rel.removeprefix("history/") not in set(files)]
    if stale:
        sync.delete(stale)
    log.info("history: %d file(s) of run %s uploaded to %s/history, %d stale key(s) of the run removed",
             len(files), key, ctx.results_root.rstrip("/"), len(stale))
    return {"uploaded": len(files), "removed": len(stale)}


def history_root(ctx: RunContext) -> str:
    from brokerbench.history import history_root as root

    return root(ctx.local_results_root)


def write_run_meta(ctx: RunContext, run_type: str | None, run_ts: str) -> dict[str, Any]:
    """summary/run_meta.json: the run's identity for the history job."""
    from brokerbench.history import run_meta
    from brokerbench.history import write_run_meta as write

    plan = ctx.plan() if ctx.plan_path.exists() else None
    meta = run_meta(ctx.dag_id, ctx.run_id, run_type, run_ts,
                    plan.environment if plan else ctx.environment_name(), ctx.suite, ctx.params)
    write(ctx.run_dir, meta)
    return meta


def verdicts(ctx: RunContext) -> dict[str, Any]:
    """Regression verdicts of this run against its tracks' history: summary/regression.{json,csv}."""
    from brokerbench.history import history_run_key, read_history
    from brokerbench.regression import Rule, counts, verdicts_for_run
    from brokerbench.report.verdict_table import text_table, write_verdicts

    key = history_run_key(ctx.dag_id, ctx.run_id)
    rule = Rule(min_runs=int(ctx.params.get("regression_min_runs") or Rule.min_runs))
    from brokerbench.trials import combine

    # a run's trials are one value per metric and track, in this run and in every earlier one
    history = combine(read_history(history_root(ctx)))
    current = [r for r in history if r.get("run_key") == key]
    if not current:
        raise RuntimeError(f"no rows of run {key} in the history at {history_root(ctx)}: the history step "
                           f"did not append this run")
    result = verdicts_for_run(current, history, rule)
    write_verdicts(ctx.run_dir, result, rule, key)
    log.info("regression verdicts (%s):\n%s", ", ".join(f"{k}: {v}" for k, v in sorted(counts(result).items())),
             text_table(result))
    return counts(result)


def regression_gate(ctx: RunContext, run_type: str | None) -> dict[str, Any]:
    """Fails (RegressionFound) when a metric regressed and this run is gated.

    Param ``regression_gate``: ``auto`` (default) gates scheduled runs only,
    ``always`` gates every run, ``never`` none. Returns what it checked.
    """
    from brokerbench.metrics import JUDGED, Judgement
    from brokerbench.report.verdict_table import read_verdicts

    mode = ctx.params.get("regression_gate") or "auto"
    data = read_verdicts(ctx.run_dir)
    if data is None:
        raise RuntimeError(f"{ctx.run_dir / 'summary' / 'regression.json'} is missing: no verdicts to check")
    verdicts = data.get("verdicts", [])
    regressed = [v for v in verdicts if v.get("verdict") == Judgement.REGRESSED]
    gated = mode == "always" or (mode == "auto" and run_type == "scheduled")
    lines = [f"{v['workload']} {v['broker']} {v['variant']} {v['metric']}: {v['evidence']}" for v in regressed]
    if regressed and gated:
        raise RegressionFound(f"{len(regressed)} metric(s) regressed:\n" + "\n".join(lines))
    judged = [v for v in verdicts if v.get("verdict") in JUDGED]
    if regressed:
        log.warning("%d metric(s) regressed; not gating (regression_gate=%s, run type %s):\n%s",
                    len(regressed), mode, run_type, "\n".join(lines))
    elif not judged:
        # "no regression" would be misread: nothing was compared (invalid rows, too little history, no data)
        log.warning("nothing judged: none of the %d verdict(s) compared a valid figure with a baseline "
                    "(%s); this run says nothing about regressions", len(verdicts),
                    ", ".join(sorted({str(v.get("verdict")).split(" (")[0] for v in verdicts})) or "no verdicts")
    else:
        log.info("no regression: %d metric(s) judged, %d not judged", len(judged), len(verdicts) - len(judged))
    return {"regressed": len(regressed), "judged": len(judged), "gated": gated, "mode": mode, "run_type": run_type}


def compare(results_root: str, out_name: str, environment: str | None = None,
            brokers: list[str] | None = None) -> str:
    """The comparison report of the whole history: <results_root>/comparisons/<out_name>/comparison.html.

    Also copied to <results_root>/comparisons/latest.html. An ``s3://`` results root is read through its
    staging copy: the history is pulled (all of it: the comparison is of the whole history), the report is
    written there and pushed back.
    """
    import shutil

    from brokerbench.history import history_root as root
    from brokerbench.history import read_history
    from brokerbench.report.compare import build_comparison, text_summary
    from brokerbench.storage import staging_root, synced

    local = staging_root(results_root)
    with synced(results_root, ["history/"], push=["comparisons/"]):
        out_dir = local / "comparisons" / safe_name(out_name)
        path = build_comparison(root(local), out_dir, environment or None, brokers or None)
        shutil.copyfile(path, local / "comparisons" / "latest.html")
        rows = [r for r in read_history(root(local)) if r.get("status") == "ok"
                and (not environment or r.get("environment") == environment)
                and (not brokers or r.get("broker") in brokers)]
    log.info("comparison (latest run per broker) of %d ok history rows read from %s:\n%s", len(rows),
             f"{results_root.rstrip('/')}/history", text_summary(rows))
    log.info("comparison report: %s", path)
    return str(path)


class RegressionFound(Exception):
    """A gated run has at least one regressed metric."""


def teardown(ctx: RunContext) -> dict[str, Any]:
    record = ctx.environment().teardown()
    try:
        ctx.write_json("provenance/teardown.json", record)
    except OSError as e:  # the results location itself may be the problem
        log.warning("could not record teardown in %s: %s", ctx.run_dir, e)
    log.info("teardown: %s", record)
    return record
