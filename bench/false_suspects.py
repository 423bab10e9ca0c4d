"""False suspects in A/A runs: how often an A/B run whose two sides are the same names a suspect.

Each run is ``brokerbench bench`` of the nightly suite (``--suite``, default nightly-latency) on one broker and
variant, as an A/A run: ``compare_with.broker_versions`` names side A's own version, so both sides are deployed
afresh at every change of side (the path every version or variant A/B takes) and differ in nothing else. For each
run it reads ``summary/regression.json`` and ``summary/summary.csv`` and prints one JSON line:

- ``ab_changes``: A/B verdicts regressed or improved (every one a false positive);
- ``named_suspects``: suspects those verdicts name (what a user is shown: the gated figure);
- ``ungated_suspects`` / ``candidates``: the suspects brokerbench.suspects.from_trials finds over the same usable
  trials when asked regardless of the verdict (what the candidates alone would flag, without the gate), and how
  many candidates were compared;

then the totals: the share of runs that named any suspect, and the share of compared candidates flagged ungated.

    .venv/bin/python bench/false_suspects.py --broker kafka --runs 4 [--duration 2] [--warmup 1] [--trials 4]
    .venv/bin/python bench/false_suspects.py --rejudge <results root>   # the runs already under a results root

``--duration`` is the measured phase in minutes (default: the suite's, 2 minutes for nightly-latency), ``--warmup``
the warm-up after each deploy (default: the suite's).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from brokerbench import suspects
from brokerbench.ab_verdicts import group_sides, usable
from brokerbench.environments.machine.distributions import DEFAULT_VERSIONS
from brokerbench.metrics import Judgement

ROOT = Path(__file__).resolve().parents[1]
BROKERBENCH = str(Path(sys.executable).parent / "brokerbench")


def judge_run(run_dir: Path) -> dict:
    """The A/A run's false verdicts, the suspects they name, and the suspects of every group without the gate."""
    verdicts = json.loads((run_dir / "summary" / "regression.json").read_text())["verdicts"]
    ab = [v for v in verdicts if v.get("rule") == "A/B"]
    changes = [v for v in ab if v.get("verdict") in (Judgement.REGRESSED, Judgement.IMPROVED)]
    named = sorted({s["column"] for v in changes for s in (v.get("suspects") or {}).get("suspects", [])})
    with open(run_dir / "summary" / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ungated, compared = [], 0
    for (workload, broker, _variant), sides in sorted(group_sides(rows).items()):
        ev = suspects.from_trials(broker, [r for r in sides["A"] if usable(r)], [r for r in sides["B"] if usable(r)])
        compared += sum(f.status != "not compared" for f in ev.findings)
        ungated += [f"{workload} {broker} {f.column} {f.change_text()}" for f in ev.findings if f.status == "suspect"]
    return {"run": str(run_dir), "ab_verdicts": len(ab), "ab_changes": len(changes),
            "changed_metrics": [v["metric"] for v in changes], "named_suspects": named,
            "ungated_suspects": ungated, "candidates": compared}


def one_run(args: argparse.Namespace, results: Path) -> Path:
    version = args.version or DEFAULT_VERSIONS[args.broker]
    conf = {"results_root": str(results), "trials": args.trials,
            "compare_with": {"broker_versions": {args.broker: version}},
            **({"warmup_duration_minutes": args.warmup} if args.warmup is not None else {})}
    cmd = [BROKERBENCH, "bench", "--suite", args.suite, "--brokers", args.broker, "--variants", args.variant,
           "--conf", json.dumps(conf)]
    if args.duration:
        cmd += ["--duration", str(args.duration)]
    before = set((results / "runs").glob("*/*")) if (results / "runs").exists() else set()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    new = sorted(set((results / "runs").glob("*/*")) - before)
    if not new:
        raise SystemExit(f"the run wrote nothing (exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return new[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="kafka", choices=sorted(DEFAULT_VERSIONS))
    ap.add_argument("--version", help="the broker version of both sides (default: the local environment's)")
    ap.add_argument("--variant", default="fsync-off")
    ap.add_argument("--suite", default="nightly-latency")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--trials", type=int, default=4, help="trials per side (default 4, the fewest an A/B run takes)")
    ap.add_argument("--duration", type=float, help="measured phase in minutes (default: the suite's)")
    ap.add_argument("--warmup", type=float, help="warm-up after each deploy in minutes (default: the suite's)")
    ap.add_argument("--rejudge", type=Path, help="judge the runs under this results root; measure nothing")
    args = ap.parse_args()
    if args.rejudge:
        run_dirs = sorted(p for p in (args.rejudge / "runs").glob("*/*") if (p / "summary" / "regression.json").exists())
    else:
        results = Path(tempfile.mkdtemp(prefix="bb-false-suspects-"))
        run_dirs = []
        for _ in range(args.runs):
            run_dirs.append(one_run(args, results))
            print(json.dumps(judge_run(run_dirs[-1])), flush=True)
    judged = [judge_run(d) for d in run_dirs]
    if args.rejudge:
        for j in judged:
            print(json.dumps(j), flush=True)
    runs = len(judged)
    named = sum(bool(j["named_suspects"]) for j in judged)
    flagged = sum(len(j["ungated_suspects"]) for j in judged)
    compared = sum(j["candidates"] for j in judged)
    print(json.dumps({"runs": runs, "runs_with_a_false_verdict": sum(bool(j["ab_changes"]) for j in judged),
                      "runs_naming_a_suspect": named,
                      "runs_naming_a_suspect_percent": round(100 * named / runs, 1) if runs else None,
                      "ungated_flagged": flagged, "ungated_compared": compared,
                      "ungated_flagged_percent": round(100 * flagged / compared, 2) if compared else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
