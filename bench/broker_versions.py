"""Resolution and start-up time of Apache Kafka and Apache Pulsar versions on this machine.

For each broker version: the first resolution from Maven Central (into a new
broker cache and, with --cold-maven, a new Maven local repository too, so no
jar is on the machine yet), the resolution again (the cache answers: no
Maven), then the time from `deploy` to a broker that serves a client, and the
time to stop it. Every figure in seconds, measured in this one invocation.

    .venv/bin/python bench/broker_versions.py --kafka 3.9.1 4.1.1 --pulsar 4.0.7 [--cold-maven]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.environments.local import LocalEnvironment  # noqa: E402
from brokerbench.environments.machine import distributions  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kafka", nargs="*", default=["3.9.1", "4.1.1"])
    ap.add_argument("--pulsar", nargs="*", default=["4.0.7"])
    ap.add_argument("--cold-maven", action="store_true", help="a new Maven local repository as well (downloads "
                                                              "every jar)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bb-versions-"))
    os.environ["BROKERBENCH_BROKER_CACHE"] = str(work / "cache")
    if args.cold_maven:
        os.environ["BROKERBENCH_MAVEN_REPO"] = str(work / "m2")
    print(f"broker cache {work / 'cache'}; Maven repository "
          f"{os.environ.get('BROKERBENCH_MAVEN_REPO', '~/.m2/repository (as it is)')}")
    print(f"{'broker':<7} {'version':<8} {'resolve first (s)':>17} {'resolve cached (s)':>18} {'jars':>5} "
          f"{'MB':>5} {'start to serving (s)':>20} {'stop (s)':>8}")
    for broker, versions in (("kafka", args.kafka), ("pulsar", args.pulsar)):
        for version in versions:
            t0 = time.monotonic()
            try:
                dist = distributions.resolve(broker, version)
            except distributions.DistributionError as e:
                print(f"{broker:<7} {version:<8} refused: {e.reason}")
                continue
            first = time.monotonic() - t0
            t0 = time.monotonic()
            distributions.resolve(broker, version)
            again = time.monotonic() - t0
            env = LocalEnvironment("bench/versions", {"state_dir": str(work / f"{broker}-{version}"),
                                                      "broker_versions": {broker: version}})
            settings = {"journalSyncData": False} if broker == "pulsar" else {}
            t0 = time.monotonic()
            try:
                env.deploy(broker, settings, "fsync-off", {})
                start = time.monotonic() - t0
            finally:
                t0 = time.monotonic()
                env.teardown()
                stop = time.monotonic() - t0
            mb = sum(j["bytes"] for j in dist.manifest["jars"]) / 1e6
            print(f"{broker:<7} {version:<8} {first:>17.1f} {again:>18.2f} {len(dist.manifest['jars']):>5} "
                  f"{mb:>5.0f} {start:>20.1f} {stop:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
