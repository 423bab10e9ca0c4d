"""Cross-check: brokerbench's worker next to the broker vendor's own perf tool, on one broker.

Deploys one broker on loopback with the local environment (JVM heaps sized for
a 2-core machine: Kafka 512 MB, Pulsar 768 MB; brokerbench.crosscheck.calibrate_local), then alternates, on that broker
process, the vendor tool (Kafka's ProducerPerformance, Pulsar's
PerformanceProducer, RabbitMQ's PerfTest; brokerbench.crosscheck) and
brokerbench's worker with each driver of the broker: at each fixed rate and
message size, then a producer-only max-rate probe of each side, and for Kafka an
end-to-end phase (EndToEndLatency, one message at a time, then each driver with a
consumer at the rate the tool reached). Prints the
settings, one line per phase, and the agreement table (ratio = brokerbench /
vendor per percentile); stops every JVM it started (the tool runs end with
their phase, the broker with the environment's teardown).

    .venv/bin/python bench/crosscheck.py --broker rabbitmq [--seconds 10] [--warmup 5] [--rates 1000,10000]
                                         [--sizes 100,1024] [--drivers pika] [--no-max] [--no-e2e] [--max-processes N]
                                         [--version V]
                                         [--json out.json]

Each phase runs --warmup seconds more than --seconds, and both sides leave those first seconds out of their
figures where the vendor tool can (Kafka's ProducerPerformance from 4.2, Pulsar's pulsar-perf); where it cannot
(PerfTest, ProducerPerformance before 4.2), both sides keep the whole run and the vendor's rows say "whole run".
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from _common import ROOT  # noqa: F401  (puts include/ on sys.path)

from brokerbench import crosscheck
from brokerbench.environments.base import EnvironmentFailure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", required=True, choices=sorted(crosscheck.TOOLS))
    crosscheck.add_phase_arguments(ap)
    ap.add_argument("--version", help="the broker version to deploy (default: the local environment's)")
    ap.add_argument("--json", default=None, help="also write the result (rows, settings, provenance) here")
    args = ap.parse_args()
    # a SIGTERM (a job's time limit, kill) ends the run as Ctrl-C does: the broker's teardown runs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result, _ = crosscheck.calibrate_local(
            args.broker, None, settings={"broker_versions": {args.broker: args.version}} if args.version else None,
            **crosscheck.phase_kwargs(args))
    except EnvironmentFailure as e:  # e.g. the vendor tool at this version is not in the registry
        raise SystemExit(f"crosscheck: {e}") from None
    print("settings:", json.dumps(result["settings"]))
    print("provenance:", json.dumps(result["provenance"]))
    print(crosscheck.format_table(result["rows"]))
    for r in result["rows"]:
        if r["note"]:
            what = (f"{int(r['rate_msg_s'])} msg/s" if r["rate_msg_s"] else "max rate") + (
                " end-to-end" if r["phase"] == "e2e" else "")
            print(f"note: {r['side']} {r['client']} {what} {r['size_B']} B: {r['note']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
