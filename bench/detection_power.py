"""Detection power of the shipped regression rules (issue 10, step 4).

Builds synthetic histories of one track per metric from the run-to-run noise
measured by bench/noise.py (log-normal noise with the measured robust CV; a
run's value is the median of ``--trials`` such draws), then applies the shipped
verdicts (:func:`brokerbench.regression.judge_series`, default
:class:`~brokerbench.regression.Rule`) run by run, as the nightly would:

- **false alarms**: histories with no change; every run after the first
  ``--warmup`` is judged; ``false_alarms_per_100`` = runs judged ``regressed``
  per 100 runs judged (``improved`` ones are counted apart);
- **power**: ``--warmup`` runs at the base level, then a step of 5, 10 or 25 %
  in the worse direction (latency up, rate down) for ``--after`` runs; a step
  is *found* at the first run after it judged ``regressed``; ``found_3`` =
  share found within 3 runs (the step's own run counts as 1), ``found`` = share
  found within ``--after`` runs, ``median_runs`` = median runs until found
  (among those found).

One JSON line per (metric, trials), then a table.

    cd bench && ../.venv/bin/python detection_power.py --noise noise_measured.json [--trials 1,3] [--reps 100]
    ../.venv/bin/python detection_power.py --cv publish_latency_p99_ms=10 --metrics publish_latency_p99_ms
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.metrics import METRICS, Judgement  # noqa: E402
from brokerbench.regression import Rule, judge_series  # noqa: E402

STEPS = (0.05, 0.10, 0.25)


def draw(rng: random.Random, level: float, sigma: float, trials: int) -> float:
    vals = sorted(level * math.exp(rng.gauss(0.0, sigma)) for _ in range(trials))
    return median(vals)


def rows_of(values: list[float], column: str) -> list[dict]:
    return [{"run_key": f"r{i:04d}", "run_ts": f"2026-01-01T00:00:00+{i:05d}", column: v, "status": "ok"}
            for i, v in enumerate(values)]


def verdicts(rows: list[dict], start: int, metric, rule: Rule, stop_at_regressed: bool = False) -> list[str]:
    out = []
    for i in range(start, len(rows)):
        v = judge_series(rows[:i], rows[i], metric, rule)["verdict"]
        out.append(v)
        if stop_at_regressed and v == Judgement.REGRESSED:
            break
    return out


def measure(metric, cv_percent: float, trials: int, reps: int, warmup: int, judged: int, after: int,
            rule: Rule, seed: int) -> dict:
    rng = random.Random(seed)
    sigma = math.log1p(cv_percent / 100.0)
    level = 100.0
    regressed = improved = total = 0
    for _ in range(max(1, reps // 5)):  # each false-alarm history judges `judged` runs
        values = [draw(rng, level, sigma, trials) for _ in range(warmup + judged)]
        vs = verdicts(rows_of(values, metric.column), warmup, metric, rule)
        regressed += vs.count(Judgement.REGRESSED)
        improved += vs.count(Judgement.IMPROVED)
        total += len(vs)
    out = {"metric": metric.column, "cv_percent": cv_percent, "trials": trials, "judged_runs": total,
           "false_alarms_per_100": round(100.0 * regressed / total, 2),
           "false_improved_per_100": round(100.0 * improved / total, 2)}
    sign = 1.0 if metric.better == "lower" else -1.0
    for step in STEPS:
        delays = []
        for _ in range(reps):
            pre = [draw(rng, level, sigma, trials) for _ in range(warmup)]
            post = [draw(rng, level * (1 + sign * step), sigma, trials) for _ in range(after)]
            vs = verdicts(rows_of(pre + post, metric.column), warmup, metric, rule, stop_at_regressed=True)
            delays.append(vs.index(Judgement.REGRESSED) + 1 if Judgement.REGRESSED in vs else None)
        found = [d for d in delays if d is not None]
        key = f"{round(step * 100)}%"
        out[f"found_3_{key}"] = round(sum(d <= 3 for d in found) / reps, 2)
        out[f"found_{key}"] = round(len(found) / reps, 2)
        out[f"median_runs_{key}"] = median(found) if found else None
    return out


def table(records: list[dict]) -> str:
    cols = ["metric", "cv_percent", "trials", "false_alarms_per_100"]
    for step in STEPS:
        key = f"{round(step * 100)}%"
        cols += [f"found_3_{key}", f"found_{key}", f"median_runs_{key}"]
    body = [["-" if r.get(c) is None else str(r.get(c)) for c in cols] for r in records]
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(cols)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(cols, widths)), "-|-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--noise", help="bench/noise.py --out file (per-metric robust CV)")
    p.add_argument("--cv", action="append", default=[],
                   help="metric=percent[,percent...] (overrides --noise; several values: one row each)")
    p.add_argument("--metrics", help="comma-separated metrics (default: every metric with a CV)")
    p.add_argument("--trials", default="1", help="comma-separated trials per run, e.g. 1,3,5")
    p.add_argument("--reps", type=int, default=100, help="histories per step size")
    p.add_argument("--warmup", type=int, default=20, help="runs before the step / before judging")
    p.add_argument("--judged", type=int, default=100, help="runs judged per no-change history")
    p.add_argument("--after", type=int, default=10, help="runs after the step")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    cvs: dict[str, list[float]] = {}
    if args.noise:
        doc = json.loads(Path(args.noise).read_text())
        for m, rec in (doc.get("per_metric_noise") or {}).items():
            cvs[m] = [float(rec["robust_cv_percent"])]
    for item in args.cv:
        m, _, v = item.partition("=")
        cvs[m] = [float(x) for x in v.split(",")]
    wanted = [m.strip() for m in args.metrics.split(",")] if args.metrics else None
    rule = Rule()
    records = []
    for metric in METRICS:
        if metric.column not in cvs or (wanted and metric.column not in wanted):
            continue
        for cv in cvs[metric.column]:
            for trials in [int(t) for t in args.trials.split(",")]:
                started = time.time()
                rec = measure(metric, cv, trials, args.reps, args.warmup, args.judged, args.after, rule, args.seed)
                rec["seconds"] = round(time.time() - started, 1)
                print(json.dumps(rec), flush=True)
                records.append(rec)
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
