"""False positives and power of the A/B comparison of one run (brokerbench.abtest.compare), by simulation.

Each simulated run measures side A and side B with ``trials`` trials each; a
trial's value is ``100 x exp(N(0, sigma))`` (log-normal run-to-run noise, sigma
= log(1 + cv) as in detection_power.py, ``cv`` = the robust CV as a fraction),
side B's level is 1, 1.05 or 1.10 times A's in the worse direction of the
metric (latency up, rate down). Per trials per side it prints:

- ``achieved_confidence_percent``: the exact coverage of the interval compare uses at ``--confidence``;
- ``false_positive_percent``: share of A/A runs (no difference) with a verdict of ``slower`` or ``faster``;
- ``power_5_percent`` / ``power_10_percent``: share of runs with a 5 % / 10 % worse side B whose verdict
  is ``slower``.

The noise is ``--cv`` if given, else the metric's ``robust_cv_percent`` in ``--noise``
(bench/noise.py --out; default noise_measured.json, p99 publish latency). One JSON
line per trials per side, then a table.

``--from-trials <results root>`` takes the noise from real trials instead of a model: the valid trials of
each track under the root (bench/noise.py's runs, e.g. ``--trials 10``: one broker deployed, ten measured
phases) are split at random into two disjoint sides of ``trials`` each (A/A: both sides are the same
broker, so every verdict of a difference is a false positive), and for the power side B's values are
multiplied by 1.05 / 1.10 in the metric's worse direction. This keeps the real distribution of the
figure (its skew and outliers), but the splits reuse the same trials, so the shares are estimates for
this set of trials, not independent runs; a track needs at least 2 x trials valid trials.

    cd bench && ../.venv/bin/python ab_power.py [--noise noise_measured.json --metric publish_latency_p99_ms]
    ../.venv/bin/python ab_power.py --cv 0.05 --trials 4,5,6,8,10 --reps 2000
    ../.venv/bin/python ab_power.py --from-trials ../results/noise-trials --trials 4,5 --metric publish_latency_p50_ms
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.abtest import FASTER, SLOWER, compare, interval_rank  # noqa: E402
from brokerbench.metrics import METRICS  # noqa: E402

STEPS = (0.05, 0.10)


def noise_cv(path: Path, metric: str) -> float | None:
    """The metric's robust CV (fraction) from a noise.py --out file, None when it has no such figure."""
    if not path.is_file():
        return None
    rec = (json.loads(path.read_text()).get("per_metric_noise") or {}).get(metric) or {}
    value = rec.get("robust_cv_percent")
    return None if value is None else float(value) / 100.0


def share(rng: np.random.Generator, trials: int, sigma: float, factor: float, higher_is_better: bool,
          confidence: float, reps: int, hits: tuple[str, ...]) -> float:
    """Share of ``reps`` simulated runs (B's level = factor x A's) whose verdict is one of ``hits``."""
    found = 0
    for _ in range(reps):
        a = 100.0 * np.exp(rng.normal(0.0, sigma, trials))
        b = 100.0 * factor * np.exp(rng.normal(0.0, sigma, trials))
        found += compare(list(a), list(b), higher_is_better=higher_is_better, confidence=confidence).verdict in hits
    return found / reps


def measure(trials: int, cv: float, higher_is_better: bool, confidence: float, reps: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, trials])
    sigma = math.log1p(cv)
    rank = interval_rank(trials, trials, confidence)
    rec = {"trials_per_side": trials, "cv_percent": round(100 * cv, 2),
           "achieved_confidence_percent": None if rank is None else round(100 * rank[1], 1),
           "false_positive_percent": round(100 * share(rng, trials, sigma, 1.0, higher_is_better, confidence,
                                                       reps, (SLOWER, FASTER)), 1)}
    for step in STEPS:
        factor = 1 - step if higher_is_better else 1 + step
        rec[f"power_{round(100 * step)}_percent"] = round(
            100 * share(rng, trials, sigma, factor, higher_is_better, confidence, reps, (SLOWER,)), 1)
    return rec


def measure_real(values: list[float], trials: int, higher_is_better: bool, confidence: float, reps: int,
                 seed: int) -> dict:
    """:func:`measure` with real trial values: random disjoint splits into sides of ``trials`` each."""
    rng = np.random.default_rng([seed, trials, len(values)])
    vals = np.asarray(values, dtype=float)
    counts = {"fp": 0, **{step: 0 for step in STEPS}}
    for _ in range(reps):
        order = rng.permutation(len(vals))
        a, b = vals[order[:trials]], vals[order[trials:2 * trials]]
        counts["fp"] += compare(list(a), list(b), higher_is_better=higher_is_better,
                                confidence=confidence).verdict in (SLOWER, FASTER)
        for step in STEPS:
            factor = 1 - step if higher_is_better else 1 + step
            counts[step] += compare(list(a), list(b * factor), higher_is_better=higher_is_better,
                                    confidence=confidence).verdict == SLOWER
    rank = interval_rank(trials, trials, confidence)
    return {"trials_per_side": trials, "valid_trials": len(vals),
            "achieved_confidence_percent": None if rank is None else round(100 * rank[1], 1),
            "false_positive_percent": round(100 * counts["fp"] / reps, 1),
            **{f"power_{round(100 * step)}_percent": round(100 * counts[step] / reps, 1) for step in STEPS}}


def real_tracks(root: str, metric: str) -> dict[str, list[float]]:
    """Valid trial values of ``metric`` per track (broker/variant/workload) under a results root."""
    from noise import trial_rows

    from brokerbench.util import split_trial

    out: dict[str, list[float]] = {}
    for r in trial_rows(root):
        value = r.get(metric)
        if r.get("status") == "ok" and isinstance(value, (int, float)):
            key = f"{r.get('broker')}/{r.get('variant')}/{split_trial(str(r.get('workload')))[0]}"
            out.setdefault(key, []).append(float(value))
    return out


def table(records: list[dict]) -> str:
    cols = list(records[0])
    body = [["-" if r[c] is None else str(r[c]) for c in cols] for r in records]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--noise", default=str(Path(__file__).with_name("noise_measured.json")),
                   help="bench/noise.py --out file (per-metric robust CV in percent)")
    p.add_argument("--metric", default="publish_latency_p99_ms", help="whose noise and direction (a METRICS column)")
    p.add_argument("--cv", type=float, help="run-to-run robust CV as a fraction, e.g. 0.05 (overrides --noise)")
    p.add_argument("--trials", default="4,5,6,8,10", help="comma-separated trials per side")
    p.add_argument("--reps", type=int, default=2000, help="simulated runs per trials per side and difference")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--from-trials", metavar="RESULTS_ROOT",
                   help="real trials (bench/noise.py runs with --trials) instead of the log-normal model")
    args = p.parse_args()
    metric = next((m for m in METRICS if m.column == args.metric), None)
    if metric is None:
        p.error(f"--metric: unknown metric {args.metric!r}")
    if args.from_trials:
        records = []
        for track, values in sorted(real_tracks(args.from_trials, args.metric).items()):
            for trials in [int(t) for t in args.trials.split(",")]:
                if len(values) < 2 * trials:
                    print(f"# {track}: {len(values)} valid trials, too few for {trials} a side")
                    continue
                rec = {"track": track, "metric": args.metric,
                       **measure_real(values, trials, metric.better == "higher", args.confidence, args.reps,
                                      args.seed)}
                print(json.dumps(rec), flush=True)
                records.append(rec)
        if records:
            print(table(records))
        return 0
    cv = args.cv if args.cv is not None else noise_cv(Path(args.noise), args.metric)
    if cv is None:
        p.error(f"{args.noise} has no robust CV for {args.metric}: give --cv")
    print(f"# {args.metric}: robust CV {100 * cv:.1f} % ({'--cv' if args.cv is not None else args.noise}), "
          f"{args.reps} simulated runs per cell, {100 * args.confidence:g} % requested", flush=True)
    records = []
    for trials in [int(t) for t in args.trials.split(",")]:
        started = time.time()
        rec = measure(trials, cv, metric.better == "higher", args.confidence, args.reps, args.seed)
        rec["seconds"] = round(time.time() - started, 1)
        print(json.dumps(rec), flush=True)
        records.append(rec)
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
