"""A/A and A/B comparisons on a real broker with a known, injected difference: the false-positive rate and the power
of the A/B verdict (brokerbench.abtest.compare) at this machine's noise, measured rather than modelled.

One broker (Kafka, Pulsar or RabbitMQ) is deployed once (local environment, loopback) behind a DelayProxy
(tests/support/delay_proxy.py) that it advertises (RabbitMQ: that its URI names), so every client byte from the
broker passes the proxy on both sides. A "run" here is what an A/B run of
the product measures: ``--trials`` trials per side in ABBA order (A B B A A B B A ...), each trial one worker job of
``--seconds`` at ``--rate`` msg/s on a topic of its own, judged per metric with the same ``compare`` at 95 %. Side B
differs from side A only by the proxy's delay on broker-to-client bytes:

- **A/A**: delay 0 on both sides: every ``slower`` / ``faster`` verdict is a false positive;
- **A/B, linger** (``--linger-ms``, Kafka): side B's producers wait this long (ms) for a batch instead of the
  driver's 1 ms, through the same proxy at no delay: a difference whose size on the tail follows its length (a
  proxy delay of any length adds the proxy timer's own tail, docs/analytics.md);
- **A/B**: side B's delay is a fraction of side A's level of a metric (``--targets``, default a 10 % p99 and a 5 %
  p50 publish latency, the issue's goals), computed from a calibration of ``--calibrate`` trials without delay. An
  acknowledgement that waits d ms adds about d ms to every publish latency, so the share a delay makes differs per
  metric; the table gives the difference each delay made, measured as the ratio of the pooled medians of all B
  and all A trials of those runs, next to the share of runs that called B ``slower`` (the power).

Runs of each kind alternate (A/A, A/B 1, A/B 2, A/A, ...) so the machine's drift spreads over all of them. A trial
whose worker reports it invalid (its producers missed their schedule) is left out of its side, as a run would.

    cd bench && ../.venv/bin/python ab_injected.py --broker kafka --runs 8 [--pin broker=1,client=0] [--out F]

Prints one JSON line per run, then per kind and metric: runs, slower / faster / no difference / not judged, the
share (false positives for A/A, power for A/B) and the measured difference (ratio B/A of pooled medians), and how
many runs the product's A/B verdict called side B slower / faster. ``--rejudge F.json`` measures nothing: it judges
the trials an earlier ``--out`` saved with the rules as they are now.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import DRIVER_CONFIG, ROOT, job

sys.path.insert(0, str(ROOT))  # tests.support.delay_proxy

from brokerbench.ab_verdicts import judge  # noqa: E402
from brokerbench.abtest import FASTER, SLOWER, compare  # noqa: E402
from brokerbench.environments.local import LocalEnvironment  # noqa: E402
from brokerbench.histogram import LogHistogram  # noqa: E402
from brokerbench.metrics import METRICS as RULES  # noqa: E402
from brokerbench.metrics import Judgement  # noqa: E402
from tests.support.delay_proxy import DelayProxy, deploy_behind  # noqa: E402

#: metric -> (the worker's histogram field, percentile)
METRICS = {"publish_latency_p50_ms": ("publish_latency_us", 50), "publish_latency_p99_ms": ("publish_latency_us", 99),
           "e2e_latency_p50_ms": ("e2e_latency_us", 50), "e2e_latency_p99_ms": ("e2e_latency_us", 99)}
#: each metric's A/B rule (threshold and floor) as the product judges it
RULE = {m.column: m for m in RULES if m.column in METRICS}
LIBRARY = {"kafka": "confluent-kafka", "pulsar": "pulsar-client", "rabbitmq": "pika"}


def deploy(broker: str, state_dir: str, pinning: dict[str, str] | None):
    """The broker on a local environment advertising a DelayProxy; (environment, proxy, endpoint)."""
    settings = {"state_dir": state_dir, "disk_baseline_mb": 0, **({"cpu_pinning": pinning} if pinning else {})}
    env = LocalEnvironment(f"bench/ab-injected-{uuid.uuid4().hex[:6]}", settings)
    env.provision()
    proxy, ep = deploy_behind(env, broker)
    return env, proxy, ep


def trial(broker: str, ep: dict, library: str, rate: float, seconds: float, out_dir: Path,
          linger_ms: float | None = None) -> dict | None:
    """One trial, as a run's phase runs: its topic prepared, then one worker process (``python -m brokerbench.worker
    run``, its clients opened and closed with it); every metric's value (ms), or None when the worker called it
    invalid. ``linger_ms``: the Kafka producers' ``linger.ms`` instead of the driver's (1)."""
    driver = None
    if linger_ms is not None:
        driver = {**DRIVER_CONFIG[broker], "producerConfig": DRIVER_CONFIG[broker]["producerConfig"].replace(
            "linger.ms=1\n", f"linger.ms={linger_ms:g}\n")}
    j = job(broker, ep, library, rate=rate, duration_s=seconds, interval_s=1.0, driver=driver)
    name = uuid.uuid4().hex[:8]
    job_file, out = out_dir / f"{name}.json", out_dir / f"{name}.jsonl"
    job_file.write_text(json.dumps(j.to_dict()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), os.environ.get("PYTHONPATH", "")])}
    for command in (["prepare", "--job", str(job_file)], ["run", "--job", str(job_file), "--out", str(out)]):
        subprocess.run([sys.executable, "-m", "brokerbench.worker", *command], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    job_file.unlink()
    out.unlink()
    end = recs[-1]
    if end.get("record") != "end" or (end.get("validity") or {}).get("invalid_reasons"):
        return None
    hist: dict[str, LogHistogram] = {}
    for r in recs:
        if r["record"] == "interval":
            for field in {f for f, _ in METRICS.values()}:
                hist.setdefault(field, LogHistogram()).merge(LogHistogram.from_dict(r[field]))
    return {m: hist[f].percentile(p) / 1e3 for m, (f, p) in METRICS.items()}


def abba(trials: int) -> list[str]:
    """A B B A A B B A ...: ``trials`` of each side."""
    order = []
    while len(order) < 2 * trials:
        order += ["A", "B", "B", "A"]
    return order[:2 * trials]


def one_run(kind: str, delay_s: float, args, ep: dict, proxy: DelayProxy, out_dir: Path,
            linger_ms: float | None = None) -> dict:
    """One A/B (or A/A) run; side B differs by the proxy's ``delay_s`` or by its producers' ``linger_ms``."""
    sides: dict[str, list[dict]] = {"A": [], "B": []}
    invalid = 0
    for side in abba(args.trials):
        proxy.delay_s = delay_s if side == "B" else 0.0
        t = trial(args.broker, ep, args.library, args.rate, args.seconds, out_dir,
                  linger_ms if side == "B" else None)
        if t is None:
            invalid += 1
        else:
            sides[side].append(t)
    proxy.delay_s = 0.0
    values = {s: [{m: round(t[m], 4) for m in METRICS} for t in v] for s, v in sides.items()}
    return {"kind": kind, "delay_ms": round(delay_s * 1e3, 4), "linger_ms_b": linger_ms, "invalid_trials": invalid,
            "values": values, "verdicts": judge_run(values)}


def judge_run(values: dict[str, list[dict]]) -> dict:
    """Per metric, the rank test's verdict and the product's (ab_verdicts.judge: the interval and the metric's
    threshold) from each side's trials (``values``: side -> one {metric: ms} per trial)."""
    verdicts = {}
    for m in METRICS:
        a, b = [t[m] for t in values["A"]], [t[m] for t in values["B"]]
        c = compare(a, b, higher_is_better=False) if a and b else None
        product = judge(RULE[m], a, b)[0]
        verdicts[m] = {"verdict": c.verdict if c else "too few trials", "ratio": c and c.ratio,
                       "ci_low": c and c.ci_low, "ci_high": c and c.ci_high,
                       "product": {Judgement.REGRESSED: SLOWER, Judgement.IMPROVED: FASTER}.get(product, product)}
    return verdicts


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for kind in dict.fromkeys(r["kind"] for r in runs):
        mine = [r for r in runs if r["kind"] == kind]
        for m in METRICS:
            verdicts = [r["verdicts"][m]["verdict"] for r in mine]
            a = [t[m] for r in mine for t in r["values"]["A"]]
            b = [t[m] for r in mine for t in r["values"]["B"]]
            judged = [v for v in verdicts if v in (SLOWER, FASTER, "no difference at this power")]
            hits = sum(v == SLOWER for v in verdicts) + (sum(v == FASTER for v in verdicts) if kind == "A/A" else 0)
            product = [r["verdicts"][m].get("product") for r in mine]
            rows.append({"kind": kind, "delay_ms": mine[0]["delay_ms"], "metric": m, "runs": len(mine),
                         "product_slower": product.count(SLOWER), "product_faster": product.count(FASTER),
                         "judged": len(judged), "slower": verdicts.count(SLOWER), "faster": verdicts.count(FASTER),
                         ("false_positive_percent" if kind == "A/A" else "power_percent"):
                             round(100 * hits / len(judged), 1) if judged else None,
                         "pooled_ratio_b_a": round(statistics.median(b) / statistics.median(a), 4) if a and b
                         else None})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--broker", default="kafka", choices=sorted(LIBRARY))
    p.add_argument("--library", default=None, help="the client library (default: confluent-kafka / pulsar-client / pika)")
    p.add_argument("--runs", type=int, default=8, help="runs of each kind (A/A and every target)")
    p.add_argument("--trials", type=int, default=5, help="trials per side of a run (an A/B run's default: 5)")
    p.add_argument("--seconds", type=float, default=3.0, help="each trial's measured seconds")
    p.add_argument("--rate", type=float, default=1000.0, help="msg/s of each trial (100-byte messages)")
    p.add_argument("--targets", default="publish_latency_p99_ms=0.10,publish_latency_p50_ms=0.05",
                   help="metric=fraction,...: side B's delay is the fraction of side A's calibrated median")
    p.add_argument("--linger-ms", default=None, metavar="1.5,2",
                   help="more A/B kinds (Kafka): side B's producers linger this long (ms) instead of 1, no delay")
    p.add_argument("--calibrate", type=int, default=6, help="trials without delay that set the delays")
    p.add_argument("--pin", default=None, metavar="broker=1,client=0",
                   help="the broker's CPUs (cpu_pinning) and this process's (the clients'), taskset's syntax")
    p.add_argument("--out", default=None, help="write every run and the summary as JSON here")
    p.add_argument("--rejudge", default=None, metavar="F.json",
                   help="measure nothing: judge the trials an earlier --out file saved with today's rules")
    args = p.parse_args()
    if args.rejudge:
        return rejudge(args.rejudge)
    args.library = args.library or LIBRARY[args.broker]
    targets = {}
    for kv in filter(None, args.targets.split(",")):
        metric, _, frac = kv.partition("=")
        if metric not in METRICS:
            raise SystemExit(f"--targets: {metric!r} is not one of {', '.join(METRICS)}")
        targets[metric] = float(frac)
    lingers = [float(x) for x in args.linger_ms.split(",") if x] if args.linger_ms else []
    if lingers and args.broker != "kafka":
        raise SystemExit("--linger-ms: Kafka's producer setting; --broker kafka")
    pinning = dict(kv.split("=", 1) for kv in args.pin.split(",")) if args.pin else None
    if pinning and "client" in pinning:
        os.sched_setaffinity(0, {int(c) for c in pinning["client"].split(":")})

    started = time.time()
    state = tempfile.mkdtemp(prefix="bb-ab-injected-")
    env, proxy, ep = deploy(args.broker, state, pinning)
    out_dir = Path(state) / "trials"
    out_dir.mkdir()
    try:
        trial(args.broker, ep, args.library, args.rate, 5.0, out_dir)  # warm-up: a JVM broker compiles its paths
        calib = [t for t in (trial(args.broker, ep, args.library, args.rate, args.seconds, out_dir)
                             for _ in range(args.calibrate)) if t]
        if not calib:
            raise SystemExit("every calibration trial was invalid: lower --rate")
        level = {m: statistics.median(t[m] for t in calib) for m in METRICS}
        delays = {f"A/B {m} +{frac:.0%}": frac * level[m] / 1e3 for m, frac in targets.items()}
        print(json.dumps({"calibration_ms": {m: round(v, 4) for m, v in level.items()},
                          "delays_ms": {k: round(v * 1e3, 4) for k, v in delays.items()}}), flush=True)
        kinds = [("A/A", 0.0, None)] + [(k, d, None) for k, d in delays.items()] + \
            [(f"A/B linger.ms={x:g}", 0.0, x) for x in lingers]
        runs = []
        for i in range(args.runs):
            for kind, delay, linger in kinds:
                r = one_run(kind, delay, args, ep, proxy, out_dir, linger)
                r["run"] = i + 1
                runs.append(r)
                print(json.dumps({k: r[k] for k in ("run", "kind", "delay_ms", "invalid_trials")}
                                 | {m: v["verdict"] for m, v in r["verdicts"].items()}), flush=True)
    finally:
        proxy.close()
        env.teardown()
    rows = summarise(runs)
    print(f"\n{args.broker} ({args.library}), {args.runs} runs of each kind, {args.trials} trials a side of "
          f"{args.seconds:g} s at {args.rate:g} msg/s, pinned {pinning or 'no'}; {time.time() - started:.0f} s")
    print_summary(rows)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "calibration_ms": level, "runs": runs,
                                              "summary": rows}, indent=1))
    return 0


def rejudge(path: str) -> int:
    """Judge the trials an earlier ``--out`` file saved with the rules as they are now, and print the summary."""
    saved = json.loads(Path(path).read_text())
    runs = [{**r, "verdicts": judge_run(r["values"])} for r in saved["runs"]]
    a = saved["args"]
    print(f"{path}: {a['broker']} ({a['library']}), {a['runs']} runs of each kind, {a['trials']} trials a side of "
          f"{a['seconds']:g} s at {a['rate']:g} msg/s, pinned {a.get('pin') or 'no'}; judged again")
    print_summary(summarise(runs))
    return 0


def print_summary(rows: list[dict]) -> None:
    print(f"{'kind':<36} {'delay_ms':>8} {'metric':<24} {'judged':>6} {'slower':>6} {'faster':>6} "
          f"{'share_%':>8} {'pooled_B/A':>10} {'product_slower':>14} {'product_faster':>14}")
    for r in rows:
        share = r.get("false_positive_percent", r.get("power_percent"))
        print(f"{r['kind']:<36} {r['delay_ms']:>8} {r['metric']:<24} {r['judged']:>6} {r['slower']:>6} "
              f"{r['faster']:>6} {share if share is not None else '-':>8} {r['pooled_ratio_b_a'] or '-':>10} "
              f"{r['product_slower']:>14} {r['product_faster']:>14}")
    print("slower / faster / share_%: the rank test's verdict (abtest.compare at 95 %): false positives (A/A: slower "
          "or faster) or power (A/B: slower), of the runs judged; product_*: runs whose A/B verdict "
          "(ab_verdicts.judge, which also wants the interval to reach the metric's threshold) called side B "
          "slower / faster")


if __name__ == "__main__":
    sys.exit(main())
