"""The scraper's cost per scrape: prometheus_client's parser on a broker's whole /metrics text against the same
parser on the catalog's lines alone (brokermetrics.only), and whether both give the same values.

Save an endpoint's text first (a broker deployed by a run, or any of yours), then:

    curl -s http://127.0.0.1:PORT/metrics > /tmp/rabbitmq.txt
    .venv/bin/python bench/scrape_parse.py --broker rabbitmq --role node --text /tmp/rabbitmq.txt [--rounds 50]

Prints the text's size and, per scrape (mean of the rounds, ms), the whole text's parse and the filtered one's.
"""

from __future__ import annotations

import argparse
import sys
import time

from brokerbench.environments.brokermetrics import _samples, catalog, extract, only, sample_names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", required=True, choices=["kafka", "pulsar", "rabbitmq"])
    ap.add_argument("--role", default="broker", help="the targets' role: broker, bookie (Pulsar), node (RabbitMQ)")
    ap.add_argument("--text", required=True, help="a saved /metrics text of that broker")
    ap.add_argument("--rounds", type=int, default=50)
    a = ap.parse_args()
    text = open(a.text).read()
    metrics = catalog(a.broker).for_role(a.role)
    names = sample_names(metrics)
    t0 = time.perf_counter()
    for _ in range(a.rounds):
        whole = extract(text, metrics)
    t1 = time.perf_counter()
    for _ in range(a.rounds):
        filtered = extract(_samples(only(text, names)), metrics)
    t2 = time.perf_counter()
    print(f"{a.broker} ({a.role}): {len(text):,} bytes, {text.count(chr(10)):,} lines; {len(whole)} catalog values")
    print(f"  whole text: {(t1 - t0) / a.rounds * 1000:.2f} ms per scrape; the catalog's lines alone: "
          f"{(t2 - t1) / a.rounds * 1000:.2f} ms; same values: {whole == filtered}")
    return 0 if whole == filtered else 1


if __name__ == "__main__":
    sys.exit(main())
