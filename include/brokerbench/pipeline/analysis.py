"""The analysis task group: the aggregation and the history append (Spark jobs of spark_jobs/, submitted by the
operator), the report, the regression verdicts and their gate, and the comparison report across runs."""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from brokerbench import history, suspects
from brokerbench.history import history_run_key
from brokerbench.metrics import JUDGED, Judgement
from brokerbench.outcome import RunOutcome, outcome_of, write_outcome
from brokerbench.pipeline.context import RunContext, log
from brokerbench.regression import Rule, counts, verdicts_for_run
from brokerbench.report import verdict_table
from brokerbench.storage import is_s3, staging_root, synced
from brokerbench.trials import combine
from brokerbench.util import safe_name


class RegressionFound(Exception):
    """A gated run has at least one regressed metric."""


class NothingToDo(Exception):
    """A Spark step has nothing to work on (no measured results to aggregate, no summary to append): the step
    fails, and a retry cannot change that."""


class SweepOnly(Exception):
    """A run of throughput sweeps only: nothing to append to the history, which holds measured phases. The
    history step is skipped, so are the verdicts after it; the run's outcome says "not judged"."""


#: spark-submit of the step's job in spark_jobs/ with its arguments, and the results root when the job reads an
#: s3:// store (it then gets the store's credentials); what the submission returns
SparkSubmit = Callable[[list[str], "str | None"], Any]


#: result files of a measured phase (a throughput sweep's measured phase is written to "sweep"), under raw/
MEASURED_FILES = ("*/*/*/measure/*.jsonl", "*/*/*/sweep/*.jsonl")


def has_measurements(ctx: RunContext, sync=None) -> bool:
    """Whether the run has a measured phase's result file: in the results store's listing when ``sync`` (an
    S3Sync) is given, else in the run directory."""
    if sync is not None:
        prefix = f"runs/{ctx.run_key}/raw/"
        return any(fnmatch.fnmatch(k[len(prefix):], pat) for k in sync.listing(prefix) for pat in MEASURED_FILES)
    return any(next((ctx.run_dir / "raw").glob(pat), None) for pat in MEASURED_FILES)


def is_sweep_only(ctx: RunContext) -> bool:
    """The run measured throughput sweeps and no measured phase: the aggregation wrote summary/sweep.csv and no
    summary table. Such a run has nothing for the history and is never judged."""
    summary = ctx.run_dir / "summary"
    return (summary / "sweep.csv").exists() and not (summary / "summary.parquet").exists()


#: summary/<this>: the aggregation's application also appended the run to the (local) history store
HISTORY_APPENDED = "history_appended.json"


def aggregate_results(ctx: RunContext, submit: SparkSubmit, run_type: str | None = None,
                      run_ts: str | None = None) -> Any:
    """spark_jobs/aggregate.py on the run's measured results, into ``summary/`` (for an s3:// store the job
    reads the run from S3 and writes into the staging copy, which the step's sync pushes). With a local results
    store and the run's type and time, the same Spark application also appends the run to the history store
    (``--history-root``: one Spark start for both steps; the history step then has nothing left to do)."""
    if not has_measurements(ctx, ctx.sync):
        raise NothingToDo(f"no measured results under {ctx.results_uri}/raw: nothing to aggregate")
    marker = ctx.run_dir / "summary" / HISTORY_APPENDED
    marker.unlink(missing_ok=True)
    args = ["--run-dir", ctx.results_uri, "--out-dir", str(ctx.run_dir / "summary")]
    together = ctx.sync is None and run_ts is not None and not is_sweep_only(ctx)
    if together and run_ts is not None:
        record_run_meta(ctx, run_type, run_ts)
        args += ["--history-root", history_uri(ctx)]
    log.info("aggregation of %s%s", ctx.results_uri, f", and its append to {history_uri(ctx)}" if together else "")
    result = submit(args, ctx.results_root)
    if together and (ctx.run_dir / "summary" / "summary.parquet").exists():
        marker.write_text(json.dumps({"history": history_uri(ctx), "run_type": run_type, "run_ts": run_ts}) + "\n")
    return result


def append_history(ctx: RunContext, run_type: str | None, run_ts: str, submit: SparkSubmit) -> Any:
    """Writes summary/run_meta.json, then spark_jobs/history.py appends the run's summary to the history store
    (replacing its earlier rows). For an s3:// store the job reads run_meta.json from S3 (uploaded first) and
    writes the run's history files into the staging copy; :func:`publish_history` uploads them."""
    if is_sweep_only(ctx):
        raise SweepOnly(f"a throughput sweep only: nothing to append to the history, which holds measured phases "
                        f"(the sweep's steps are in {ctx.results_uri}/summary/sweep.csv)")
    if not (ctx.run_dir / "summary" / "summary.parquet").exists():
        raise NothingToDo(f"no summary under {ctx.results_uri}/summary: nothing to append")
    marker = ctx.run_dir / "summary" / HISTORY_APPENDED
    if ctx.sync is None and marker.exists() and \
            marker.stat().st_mtime >= (ctx.run_dir / "summary" / "summary.parquet").stat().st_mtime:
        log.info("%s: appended to %s by the aggregation's Spark application (summary/%s)", ctx.results_uri,
                 json.loads(marker.read_text()).get("history"), HISTORY_APPENDED)
        return None
    record_run_meta(ctx, run_type, run_ts)
    location = history_uri(ctx)
    log.info("append %s (%s run at %s) to %s", ctx.results_uri, run_type, run_ts, location)
    args = ["--history-root", location, "--run-dir", ctx.results_uri]
    sync = ctx.sync
    if sync is None:
        return submit(args, None)
    sync.push([f"runs/{ctx.run_key}/summary/"])  # run_meta.json, before the job reads it
    out = ctx.local_results_root / "history"  # the job writes this run's history files here
    result = submit([*args, "--history-out", str(out)], ctx.results_root)
    publish_history(ctx, sync, out)
    return result


def report(ctx: RunContext, failed_tasks: Sequence[str] = ()) -> str:
    # the report draws with Plotly: loaded in the report task, not where DAG files are parsed
    from brokerbench.report.html import build_report, render_text_summary

    path = build_report(ctx.run_dir, history_root=run_history_root(ctx), failed_tasks=failed_tasks)
    log.info("\n%s", render_text_summary(ctx.run_dir))
    log.info("report: %s", path)
    export_monitoring(ctx)
    return str(path)


def export_monitoring(ctx: RunContext) -> dict[str, Path]:
    """``monitoring/``: the run's Prometheus scrape configuration, a Grafana dashboard per broker and its series
    in OpenMetrics text (brokerbench.monitoring), from the raw scraper files (pulled for an s3:// store: they are
    bulk, not in the staging copy); a failure is logged, never the report's."""
    # the catalogs (brokerbench.environments): loaded in the report task, not where DAG files are parsed
    from brokerbench import monitoring

    try:
        if ctx.sync is not None:
            ctx.sync.pull([f"runs/{ctx.run_key}/brokermetrics/"])
        written = monitoring.export(ctx.run_dir)
    except Exception as e:  # noqa: BLE001 - exports for the user's own stack: the report stands without them
        log.warning("monitoring exports not written: %s: %s", type(e).__name__, e)
        return {}
    if written:
        log.info("monitoring: %s", ", ".join(str(p) for p in written.values()))
    return written


def history_uri(ctx: RunContext) -> str:
    """The history store's URI: ``s3://.../history`` or the local history directory."""
    return f"{ctx.results_root.rstrip('/')}/history" if is_s3(ctx.results_root) else run_history_root(ctx)


def publish_history(ctx: RunContext, sync, out: Path) -> dict[str, int]:
    """After the history job wrote this run's rows into ``out`` (a local directory; the job's manifest
    ``_manifests/<run key>.json`` lists the files): upload exactly those files under ``history/`` and delete
    the run's keys the job did not write again (a re-run whose partition values changed), so the store never
    holds a run twice. Other runs' keys are never touched."""
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


def run_history_root(ctx: RunContext) -> str:
    """The history store this run reads and appends to: the local one, or the staging copy of an s3:// one."""
    return history.history_root(ctx.local_results_root)


def record_run_meta(ctx: RunContext, run_type: str | None, run_ts: str) -> dict[str, Any]:
    """summary/run_meta.json: the run's identity for the history job."""
    plan = ctx.plan() if ctx.plan_path.exists() else None
    meta = history.run_meta(ctx.dag_id, ctx.run_id, run_type, run_ts,
                    plan.environment if plan else ctx.environment_name(), ctx.suite, ctx.params)
    history.write_run_meta(ctx.run_dir, meta)
    return meta


def verdicts(ctx: RunContext) -> dict[str, Any]:
    """Regression verdicts of this run against its tracks' history: summary/regression.{json,csv}."""
    key = history_run_key(ctx.dag_id, ctx.run_id)
    rule = Rule(min_runs=int(ctx.params.get("regression_min_runs") or Rule.min_runs))
    # a run's trials are one value per metric and track, in this run and in every earlier one
    rows = combine(history.read_history(run_history_root(ctx)))
    current = [r for r in rows if r.get("run_key") == key]
    if not current:
        raise RuntimeError(f"no rows of run {key} in the history at {run_history_root(ctx)}: the history step "
                           f"did not append this run")
    result = verdicts_for_run(current, rows, rule)
    suspects.attach_history(result, current, rows)  # what moved with each change, over the same history
    plan = ctx.plan_or_none()
    if plan is not None and plan.compare_with is not None:
        # an A/B run: side B against side A, from the run's own trial rows (side B is not in the history)
        from brokerbench.ab_verdicts import verdicts as ab_verdicts
        from brokerbench.report.data import read_table

        # side B of another variant (compare_with.variants) is judged against the side A variant it ran beside
        paired = {str(i.variant): str(getattr(i, "group_variant", None) or i.variant) for i in plan.items
                  if i.side == "B"}
        ab = ab_verdicts(read_table(ctx.run_dir / "summary" / "summary.csv")[1], rule.metrics,
                         side_b_variants={b: a for b, a in paired.items() if b != a})
        log.info("A/B (side B against side A, %s):\n%s", json.dumps(plan.compare_with), verdict_table.text_table(ab))
        result = ab + result
    verdict_table.write_verdicts(ctx.run_dir, result, rule, key)
    log.info("regression verdicts (%s):\n%s", ", ".join(f"{k}: {v}" for k, v in sorted(counts(result).items())),
             verdict_table.text_table(result))
    for line in verdict_table.suspect_sentences(result):
        log.info("suspects: %s", line)
    return counts(result)


def regression_gate(ctx: RunContext, run_type: str | None) -> dict[str, Any]:
    """Fails (RegressionFound) when a metric regressed and this run is gated.

    Param ``regression_gate``: ``auto`` (default) gates scheduled runs only,
    ``always`` gates every run, ``never`` none. Returns what it checked. A run without verdicts
    (no measurements, or the verdicts step did not write them) is not judged, never a gate failure: the
    step that did not run is the run's failure (``run_outcome``), not the gate's.
    """
    mode = ctx.params.get("regression_gate") or "auto"
    gated = mode == "always" or (mode == "auto" and run_type == "scheduled")
    data = verdict_table.read_verdicts(ctx.run_dir)
    if data is None:
        why = ("no measurements" if not has_measurements(ctx, ctx.sync)
               else f"{ctx.run_dir / 'summary' / 'regression.json'} is missing (the verdicts step did not write it)")
        log.warning("not judged: %s; the gate has nothing to check (regression_gate=%s)", why, mode)
        return {"regressed": 0, "judged": 0, "gated": gated, "mode": mode, "run_type": run_type,
                "not_judged": why}
    verdicts = data.get("verdicts", [])
    regressed = [v for v in verdicts if v.get("verdict") == Judgement.REGRESSED]
    lines = [f"{v['workload']} {v['broker']} {v['variant']} {v['metric']}: {v['evidence']}" for v in regressed]
    if regressed and gated:
        raise RegressionFound(f"{len(regressed)} metric(s) regressed:\n" + "\n".join(lines))
    judged = [v for v in verdicts if v.get("verdict") in JUDGED]
    if regressed:
        log.warning("%d metric(s) regressed; not gating (regression_gate=%s, run type %s):\n%s",
                    len(regressed), mode, run_type, "\n".join(lines))
    elif not judged:
        # "no regression" would be misread: nothing was compared (invalid rows, too little history, no data)
        log.warning("not judged: %s; this run says nothing about regressions",
                    outcome_of(verdicts).reason)
    else:
        log.info("no regression: %d metric(s) judged, %d not judged", len(judged), len(verdicts) - len(judged))
    return {"regressed": len(regressed), "judged": len(judged), "gated": gated, "mode": mode, "run_type": run_type}


def run_outcome(ctx: RunContext, failed_tasks: list[str], stopped: bool = False) -> RunOutcome:
    """The run's outcome (brokerbench.outcome) from its verdicts and the tasks that failed; written to
    summary/outcome.json and logged as the run's last lines."""
    data = verdict_table.read_verdicts(ctx.run_dir)
    failed = list(failed_tasks) + (["(the run was stopped)"] if stopped else [])
    # an s3:// store's raw/ is not downloaded to a task (RUN_BULK): its listing says whether the run measured
    result = outcome_of(data.get("verdicts") if data else None, failed, has_measurements=has_measurements(ctx, ctx.sync),
                        sweep_only=is_sweep_only(ctx))
    write_outcome(ctx.run_dir, result)
    log.info("results: %s", ctx.results_uri)
    log.info("OUTCOME: %s", result.headline)
    return result


def compare(results_root: str, out_name: str, environment: str | None = None,
            brokers: list[str] | None = None) -> str:
    """The comparison report of the whole history: <results_root>/comparisons/<out_name>/comparison.html.

    Also copied to <results_root>/comparisons/latest.html. An ``s3://`` results root is read through its
    staging copy: the history is pulled (all of it: the comparison is of the whole history), the report is
    written there and pushed back.
    """
    # the comparison draws with Plotly: loaded in the compare task only
    from brokerbench.report.compare import build_comparison, text_summary, version_changes_text

    local = staging_root(results_root)
    with synced(results_root, ["history/"], push=["comparisons/"]):
        out_dir = local / "comparisons" / safe_name(out_name)
        path = build_comparison(history.history_root(local), out_dir, environment or None, brokers or None)
        shutil.copyfile(path, local / "comparisons" / "latest.html")
        rows = [r for r in history.read_history(history.history_root(local)) if r.get("status") == "ok"
                and (not environment or r.get("environment") == environment)
                and (not brokers or r.get("broker") in brokers)]
    log.info("comparison (latest run per broker) of %d ok history rows read from %s:\n%s", len(rows),
             f"{results_root.rstrip('/')}/history", text_summary(rows))
    log.info("versions of each broker, older -> newer:\n%s", version_changes_text(combine(rows)))
    log.info("comparison report: %s", path)
    return str(path)
