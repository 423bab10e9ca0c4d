"""How steady this machine's disk is at syncing: the time of one small write made durable (write + fdatasync),
window after window, as a broker's fsync-on variant pays it on every acknowledgement (Kafka's
``flush.messages=1``, a quorum queue's sync).

docs/analytics.md found the nightly suite's fsync-on publish p99 varying by 25 % (Kafka) and 37 % (RabbitMQ) from
trial to trial, against 5 % for Pulsar, whose journal syncs many messages' entries together. If the disk is the
cause, its own sync time varies as much from window to window; this measures that with no broker involved.

    cd bench && ../.venv/bin/python disk_sync.py [--dir DIR] [--windows 5 --seconds 30 --rate 500 --size 4096]

Each window writes ``--size`` bytes and syncs them, at most ``--rate`` times a second (one writer, as a log's
appends are serialised), for ``--seconds``; each sync's time goes into a histogram (µs). Prints one JSON line per
window (syncs, p50 / p99 / max in ms), then per statistic the robust CV over the windows (%, 1.4826 x MAD / median,
what the regression rule sees) and the plain CV (%). ``--dir``: a directory on the disk to test (default: the
local environment's home, where local brokers keep their data).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from statistics import median, pstdev

from _common import ROOT

from brokerbench.histogram import LogHistogram
from brokerbench.regression import robust_spread


def window(path: str, seconds: float, rate: float, size: int) -> LogHistogram:
    """One window's sync times (µs): ``size`` bytes appended and synced, paced to ``rate`` a second."""
    times_us: list[int] = []
    block = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        start = time.monotonic()
        n = 0
        while (now := time.monotonic()) - start < seconds:
            due = start + n / rate
            if now < due:
                time.sleep(due - now)
            t = time.perf_counter_ns()
            os.write(fd, block)
            os.fdatasync(fd)
            times_us.append((time.perf_counter_ns() - t) // 1000)
            n += 1
    finally:
        os.close(fd)
    return LogHistogram.from_values(times_us)


def robust_cv(values: list[float]) -> float:
    """% : the regression rule's robust spread (1.4826 x MAD) over the median."""
    return 100 * robust_spread(values) / median(values)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=os.environ.get("BROKERBENCH_HOME", str(ROOT / ".brokerbench")))
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=500.0, help="syncs a second at most")
    p.add_argument("--size", type=int, default=4096, help="bytes a write")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    stats: dict[str, list[float]] = {"p50_ms": [], "p99_ms": [], "max_ms": []}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="disk-sync-") as d:
        for w in range(args.windows):
            path = os.path.join(d, f"log-{w}")
            h = window(path, args.seconds, args.rate, args.size)
            os.unlink(path)
            row = {"window": w, "syncs": h.count, "sync_rate_per_s": round(h.count / args.seconds, 1),
                   "p50_ms": h.percentile(50) / 1e3, "p99_ms": h.percentile(99) / 1e3, "max_ms": h.max / 1e3}
            for k in stats:
                stats[k].append(row[k])
            print(json.dumps(row), flush=True)
    print(json.dumps({"dir": args.dir, "windows": args.windows, "seconds": args.seconds, "rate": args.rate,
                      "size_bytes": args.size,
                      **{f"{k}_robust_cv_percent": round(robust_cv(v), 1) for k, v in stats.items()},
                      **{f"{k}_cv_percent": round(100 * pstdev(v) / (sum(v) / len(v)), 1) for k, v in stats.items()},
                      **{f"{k}_median": round(median(v), 3) for k, v in stats.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
