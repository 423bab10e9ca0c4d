"""Per-interval recording of a worker's measurements.

The hot path (send loop, ack callback, receive callback) does one thing per
message: append an integer nanosecond difference to a plain Python list held
by :class:`Samples`. Once per interval the :class:`IntervalWriter` swaps in
fresh lists, turns the old ones into histograms (numpy, vectorised), and
appends one ``interval`` line to the result file (docs/results-format.md).
Counters are derived from the sample counts: sent = delay samples, acked =
publish-latency samples, received = end-to-end samples. Nothing else is
counted per message.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Callable, TextIO

import numpy as np

from brokerbench.histogram import LogHistogram

#: A probe message carries send time 0; its "latency" is then the wall clock
#: itself (> 1e17 ns). Such values are probes, never measurements.
PROBE_THRESHOLD_NS = 10**17


class Samples:
    """The lists the hot path appends to. Swapped as a whole per interval."""

    __slots__ = ("publish_ns", "delay_ns", "e2e_ns", "send_errors")

    def __init__(self) -> None:
        self.publish_ns: list[int] = []  # ack time - send time
        self.delay_ns: list[int] = []  # actual send time - intended send time
        self.e2e_ns: list[int] = []  # receive time - send time carried in the message
        self.send_errors = 0


class Recorder:
    """Holds the current :class:`Samples`; hot-path code reads ``recorder.s``."""

    def __init__(self) -> None:
        self.s = Samples()
        self.last_error: str | None = None

    def swap(self) -> Samples:
        old, self.s = self.s, Samples()
        return old

    def error(self, exc: Any) -> None:
        """Count a failed send (called from client-library callbacks)."""
        self.s.send_errors += 1
        self.last_error = str(exc)


def _histogram_us(values_ns: list[int]) -> LogHistogram:
    arr = np.fromiter(values_ns, dtype=np.int64, count=len(values_ns))
    # round to whole microseconds; floor division keeps negative values negative
    return LogHistogram.from_values((arr + 500) // 1000)


class IntervalWriter:
    """Writes the meta, interval and end records of one worker result file."""

    def __init__(self, path: str, meta: dict[str, Any], recorder: Recorder,
                 subscriptions: int, progress: Callable[[str], None] = print):
        self.path = path
        self.recorder = recorder
        self.subscriptions = subscriptions
        self.progress = progress
        self.interval_s = float(meta["interval_s"])
        self.phase = meta.get("phase", "")
        self.worker = meta.get("worker", socket.gethostname())
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._f: TextIO = open(path, "w", encoding="utf-8")
        self._write({"record": "meta", **meta})
        self.index = 0
        self.totals = {"sent": 0, "acked": 0, "send_errors": 0, "received": 0}
        self._interval_start_ns: int | None = None
        self._phase_start_ns: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._f.flush()

    def start(self, start_ns: int, duration_s: float) -> None:
        """Begin intervals at ``start_ns``; a thread closes one every interval_s."""
        self._interval_start_ns = start_ns
        self._phase_start_ns = start_ns
        self._duration_s = duration_s
        self.recorder.swap()  # anything before the start (probes) is not measured
        self._thread = threading.Thread(target=self._loop, name="interval-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        period_ns = int(self.interval_s * 1e9)
        next_end = self._interval_start_ns + period_ns
        while not self._stop.is_set():
            wait = (next_end - time.time_ns()) / 1e9
            if wait > 0 and self._stop.wait(wait):
                break
            self.close_interval(next_end)
            next_end += period_ns

    def close_interval(self, end_ns: int | None = None) -> dict[str, Any]:
        """Swap the samples and write one interval record ending at ``end_ns``."""
        with self._lock:
            samples = self.recorder.swap()
            # a callback that fetched the old list just before the swap may
            # still be appending: give it a moment before reading the lists
            time.sleep(0.002)
            end_ns = end_ns or time.time_ns()
            e2e = [v for v in samples.e2e_ns if v < PROBE_THRESHOLD_NS] \
                if samples.e2e_ns and max(samples.e2e_ns) >= PROBE_THRESHOLD_NS else samples.e2e_ns
            pub = _histogram_us(samples.publish_ns)
            delay = _histogram_us(samples.delay_ns)
            e2e_h = _histogram_us(e2e)
            counts = {
                "sent": len(samples.delay_ns),
                "acked": len(samples.publish_ns),
                "send_errors": samples.send_errors,
                "received": len(e2e),
            }
            for k, v in counts.items():
                self.totals[k] += v
            backlog = (max(0, self.totals["acked"] * self.subscriptions - self.totals["received"])
                       if self.subscriptions else 0)
            record = {
                "record": "interval",
                "index": self.index,
                "start_ns": self._interval_start_ns,
                "end_ns": end_ns,
                **counts,
                "backlog": backlog,
                "publish_latency_us": pub.to_dict(),
                "publish_delay_us": delay.to_dict(),
                "e2e_latency_us": e2e_h.to_dict(),
            }
            self._write(record)
            self._log_progress(record, pub, e2e_h, delay)
            self.index += 1
            self._interval_start_ns = end_ns
            return record

    def _log_progress(self, r: dict, pub: LogHistogram, e2e: LogHistogram, delay: LogHistogram) -> None:
        secs = max((r["end_ns"] - r["start_ns"]) / 1e9, 1e-9)
        elapsed = (r["end_ns"] - self._phase_start_ns) / 1e9

        def ms(h: LogHistogram, p: float) -> str:
            v = h.percentile(p)
            return "-" if v is None else f"{v / 1000:.2f}"

        self.progress(
            f"[{self.worker}] {self.phase} {elapsed:6.1f}/{self._duration_s:.0f} s | "
            f"sent {r['sent']} acked {r['acked']} recv {r['received']} err {r['send_errors']} | "
            f"publish {r['acked'] / secs:,.0f} msg/s consume {r['received'] / secs:,.0f} msg/s | "
            f"publish p99 {ms(pub, 99)} ms e2e p99 {ms(e2e, 99)} ms "
            f"delay p99 {ms(delay, 99)} ms | backlog {r['backlog']}"
        )

    def finish(self, status: str = "ok", error: str | None = None, **extra: Any) -> None:
        """Close the last (partial) interval and write the end record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.close_interval()
        self._write({"record": "end", "end_ns": time.time_ns(), "status": status,
                     "error": error, "totals": self.totals, **extra})
        self._f.close()
