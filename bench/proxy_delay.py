"""How exactly the loopback DelayProxy (tests/support/delay_proxy.py) keeps its delay: the round trip of one byte to an
echo server through the proxy at each delay, against the same at delay 0 (same process, rounds alternating).

The A/B benchmark (ab_injected.py) injects a known difference with this proxy; the added round trip is what a
delay costs a client, so it says whether a delay of d ms adds d ms.

    cd bench && ../.venv/bin/python proxy_delay.py [--delays-ms 0.1,0.3,1 --pings 1500 --rounds 2]

Prints one JSON line per delay and round: round-trip p50 / p99 (µs) through the proxy at the delay and at 0, and
the difference of the p50s (µs).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

from _common import ROOT

sys.path.insert(0, str(ROOT))  # tests.support.delay_proxy

from tests.support.delay_proxy import DelayProxy  # noqa: E402


def echo_server() -> int:
    """A loopback echo server on a thread; its port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()

    def serve() -> None:
        while True:
            c, _ = s.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def one(c: socket.socket = c) -> None:
                while d := c.recv(64):
                    c.sendall(d)
                c.close()

            threading.Thread(target=one, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]


def round_trips_us(port: int, pings: int) -> list[float]:
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(pings):
        t = time.perf_counter_ns()
        c.sendall(b"x")
        c.recv(1)
        out.append((time.perf_counter_ns() - t) / 1e3)
        time.sleep(0.0005)
    c.close()
    return sorted(out)


def pct(values: list[float], p: float) -> float:
    return round(values[min(len(values) - 1, int(len(values) * p / 100))], 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delays-ms", default="0.1,0.3,1")
    p.add_argument("--pings", type=int, default=1500)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    port = echo_server()
    proxy = DelayProxy(port, 0.0)
    try:
        for r in range(args.rounds):
            for d in [float(x) for x in args.delays_ms.split(",")]:
                proxy.delay_s = 0.0
                base = round_trips_us(proxy.port, args.pings)
                proxy.delay_s = d / 1e3
                delayed = round_trips_us(proxy.port, args.pings)
                print(json.dumps({"round": r + 1, "delay_ms": d, "rtt_p50_us": pct(delayed, 50),
                                  "rtt_p99_us": pct(delayed, 99), "rtt_p50_us_at_0": pct(base, 50),
                                  "rtt_p99_us_at_0": pct(base, 99),
                                  "added_p50_us": round(pct(delayed, 50) - pct(base, 50), 1)}), flush=True)
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
