"""How noisy is one track's figure from run to run? (issue 10, step 1)

Repeats a suite N times on the local environment, one broker per run (short
phases, brokers in turn so a slow drift of the machine affects all alike), and
prints per track (broker / variant / workload) and metric, over the trials whose
status is ``ok``:

- ``valid``: trials with status ok / trials run (the rest are named with their
  status, e.g. ``invalid: foreign load ...`` on a busy machine: they are counted,
  never used);
- ``cv_%``: coefficient of variation (standard deviation / mean) of the valid trials;
- ``robust_cv_%``: 1.4826 x MAD / median (what the regression rule sees);
- ``min``, ``median``, ``max``: the spread of the figure;
- ``trials_for_5%``: the smallest number of trials n whose median lies within
  +-5 % of the median of all valid trials in 90 % of bootstrap resamples
  (None: not reached with the trials at hand);
- ``cv_all_%``, ``robust_cv_all_%``: the same over every trial, invalid ones
  included: what the machine's load does to the figure. Never used where valid
  trials suffice; ``--out`` says which it used.

One JSON line per (track, metric), then a table. ``--out`` writes the per-metric
noise (robust CV, median over tracks) that bench/detection_power.py reads.

    cd bench && ../.venv/bin/python noise.py --repeats 4 --brokers kafka,pulsar,rabbitmq \\
        --results-root ../results/noise --out noise_measured.json
    ../.venv/bin/python noise.py --repeats 1 --trials 8 --pin broker=0,client=1 ...   # trials of one run, pinned
    ../.venv/bin/python noise.py --brokers rabbitmq --client rabbitmq=java ...   # another client library
    ../.venv/bin/python noise.py --analyse-only --results-root ../results/noise   # no new runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean, median, pstdev

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.metrics import METRICS  # noqa: E402
from brokerbench.regression import MAD_TO_SIGMA  # noqa: E402
from brokerbench.report.data import read_table  # noqa: E402
from brokerbench.util import split_trial  # noqa: E402


def run_suite(suite: str, broker: str, variant: str, minutes: float, warmup: float, results_root: str,
              trials: int | None = None, pinning: dict[str, str] | None = None,
              libraries: dict[str, str] | None = None) -> int:
    conf = {"brokers": [broker], "variants": [variant], "test_duration_minutes": minutes,
            "warmup_duration_minutes": warmup, "results_root": results_root, "regression_gate": "never"}
    if trials:
        conf["trials"] = trials
    if pinning:
        conf["cpu_pinning"] = pinning
    if libraries:
        conf["client_libraries"] = libraries
    cmd = [sys.executable, "-m", "brokerbench.cli", "bench", "--suite", suite, "--conf", json.dumps(conf)]
    started = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(json.dumps({"run": broker, "variant": variant, "rc": proc.returncode,
                      "seconds": round(time.time() - started, 1),
                      "tail": proc.stdout.strip().splitlines()[-1:] if proc.stdout else []}), flush=True)
    return proc.returncode


def trial_rows(results_root: str) -> list[dict]:
    rows = []
    for path in sorted(Path(results_root).glob("runs/*/*/summary/summary.csv")):
        _, table = read_table(path)
        for r in table:
            r["_run"] = path.parent.parent.name
            rows.append(r)
    return rows


def trials_for(values: list[float], within: float = 0.05, share: float = 0.9, draws: int = 2000) -> int | None:
    """Smallest n whose bootstrap median is within +-``within`` of the median of all in ``share`` of draws."""
    centre = median(values)
    rng = random.Random(1)
    for n in range(1, 16):
        hits = sum(abs(median(rng.choices(values, k=n)) - centre) <= within * abs(centre) for _ in range(draws))
        if hits >= share * draws:
            return n
    return None


def analyse(rows: list[dict]) -> list[dict]:
    out = []
    tracks: dict[tuple, list[dict]] = {}
    for r in rows:
        # the trials of one run are samples of one track (workload <id>.trial<k>)
        tracks.setdefault((r.get("broker"), r.get("variant"), split_trial(str(r.get("workload")))[0]), []).append(r)
    for (broker, variant, workload), trs in sorted(tracks.items(), key=lambda kv: tuple(map(str, kv[0]))):
        ok = [r for r in trs if r.get("status") == "ok"]
        not_ok = [str(r.get("status"))[:90] for r in trs if r.get("status") != "ok"]
        for m in METRICS:
            vals = [float(r[m.column]) for r in ok if isinstance(r.get(m.column), (int, float))]
            rec = {"broker": broker, "variant": variant, "workload": workload, "metric": m.column,
                   "trials": len(trs), "valid": len(ok), "not_ok": not_ok}
            every = [float(r[m.column]) for r in trs if isinstance(r.get(m.column), (int, float))]
            if len(every) >= 2 and median(every):
                med_all = median(every)
                rec["cv_all_percent"] = round(100 * pstdev(every) / mean(every), 1) if mean(every) else None
                rec["robust_cv_all_percent"] = round(
                    100 * MAD_TO_SIGMA * median(abs(v - med_all) for v in every) / abs(med_all), 1)
                rec["median_all"] = round(med_all, 4)
            if len(vals) >= 2 and median(vals):
                med = median(vals)
                rec.update({
                    "cv_percent": round(100 * pstdev(vals) / mean(vals), 1) if mean(vals) else None,
                    "robust_cv_percent": round(100 * MAD_TO_SIGMA * median(abs(v - med) for v in vals) / abs(med), 1),
                    "min": round(min(vals), 4), "median": round(med, 4), "max": round(max(vals), 4),
                    "trials_for_5_percent": trials_for(vals),
                })
            out.append(rec)
    return out


def table(records: list[dict]) -> str:
    cols = ["broker", "variant", "metric", "valid", "cv_percent", "robust_cv_percent", "min", "median", "max",
            "trials_for_5_percent", "cv_all_percent", "robust_cv_all_percent", "median_all"]
    body = [[("-" if r.get(c) is None else f"{r['valid']}/{r['trials']}" if c == "valid" else str(r.get(c)))
             for c in cols] for r in records]
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(cols)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(cols, widths)), "-|-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def per_metric_noise(records: list[dict], min_valid: int = 3) -> dict[str, dict]:
    """metric -> median (over tracks) robust CV and CV, from the valid trials of tracks with at least
    ``min_valid`` of them; a metric without such a track takes every trial (invalid included) and says so."""
    out = {}
    for m in METRICS:
        recs = [r for r in records if r["metric"] == m.column and r.get("robust_cv_percent") is not None
                and r["valid"] >= min_valid]
        source, rkey, ckey = "valid trials", "robust_cv_percent", "cv_percent"
        if not recs:
            recs = [r for r in records if r["metric"] == m.column and r.get("robust_cv_all_percent") is not None]
            source, rkey, ckey = "all trials, invalid included (too few valid)", "robust_cv_all_percent", "cv_all_percent"
        if recs:
            out[m.column] = {"robust_cv_percent": median(r[rkey] for r in recs),
                             "cv_percent": median(r[ckey] for r in recs if r.get(ckey) is not None),
                             "source": source, "tracks": len(recs), "valid_trials": sum(r["valid"] for r in recs),
                             "trials": sum(r["trials"] for r in recs)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="smoke")
    p.add_argument("--brokers", default="kafka,pulsar,rabbitmq")
    p.add_argument("--variant", default="fsync-off")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--minutes", type=float, default=0.25, help="measured phase (min)")
    p.add_argument("--warmup", type=float, default=0.05, help="warm-up (min)")
    p.add_argument("--trials", type=int, default=None,
                   help="trials per run (back to back on one deployed broker after one warm-up); each is a sample")
    p.add_argument("--pin", default=None, metavar="broker=0,client=1",
                   help="param cpu_pinning: the broker's and the clients' CPUs (taskset's syntax, ':' for ',' "
                        "inside a list, e.g. broker=0:2,client=1)")
    p.add_argument("--client", default=None, metavar="rabbitmq=java",
                   help="param client_libraries: a broker's client library instead of the suite's (e.g. "
                        "rabbitmq=java for the JVM engine), comma-separated")
    p.add_argument("--results-root", default=str(ROOT / "results" / "noise"))
    p.add_argument("--analyse-only", action="store_true", help="no new runs: analyse the runs under the root")
    p.add_argument("--out", help="write the per-metric noise as JSON (bench/detection_power.py --noise)")
    args = p.parse_args()
    root = os.path.abspath(args.results_root)
    pinning = {k: v.replace(":", ",") for k, v in (kv.split("=", 1) for kv in args.pin.split(","))} if args.pin \
        else None
    libraries = dict(kv.split("=", 1) for kv in args.client.split(",")) if args.client else None
    if not args.analyse_only:
        for i in range(args.repeats):
            for broker in [b.strip() for b in args.brokers.split(",") if b.strip()]:
                run_suite(args.suite, broker, args.variant, args.minutes, args.warmup, root, args.trials, pinning,
                          libraries)
    records = analyse(trial_rows(root))
    for r in records:
        print(json.dumps(r))
    print(table(records))
    noise = per_metric_noise(records)
    print(json.dumps({"per_metric_noise": noise}))
    if args.out:
        Path(args.out).write_text(json.dumps({"results_root": root, "per_metric_noise": noise,
                                              "tracks": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
