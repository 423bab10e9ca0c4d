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

from brokerbench.faults import is_outage
from brokerbench.histogram import LogHistogram

#: A probe message carries send time 0; its "latency" is then the wall clock
#: itself (> 1e17 ns). Such values are probes, never measurements.
PROBE_THRESHOLD_NS = 10**17


class Samples:
    """The lists the hot path appends to. Swapped as a whole per interval."""

    __slots__ = ("publish_ns", "publish_s", "delay_ns", "e2e_ns", "catchup_e2e_ns", "send_errors")

    def __init__(self) -> None:
        self.publish_ns: list[int] = []  # ack time - send time
        #: ack time - send time as float seconds, for libraries that measure it
        #: themselves (confluent-kafka's Message.latency()); same histogram
        self.publish_s: list[float] = []
        self.delay_ns: list[int] = []  # actual send time - intended send time
        self.e2e_ns: list[int] = []  # receive time - send time carried in the message
        #: the catch-up subscription of a ``mixed`` workload (reads from the start)
        self.catchup_e2e_ns: list[int] = []
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


def _histogram_us(values_ns: list[int], values_s: list[float] | None = None) -> LogHistogram:
    arr = np.fromiter(values_ns, dtype=np.int64, count=len(values_ns))
    if values_s:
        secs = np.fromiter(values_s, dtype=np.float64, count=len(values_s))
        arr = np.concatenate([arr, np.rint(secs * 1e9).astype(np.int64)])
    # round to whole microseconds; floor division keeps negative values negative
    return LogHistogram.from_values((arr + 500) // 1000)


def _drop_probes(values: list[int]) -> list[int]:
    if values and max(values) >= PROBE_THRESHOLD_NS:
        return [v for v in values if v < PROBE_THRESHOLD_NS]
    return values


class IntervalWriter:
    """Writes the meta, interval and end records of one worker result file."""

    def __init__(self, path: str, meta: dict[str, Any], recorder: Recorder,
                 subscriptions: int, progress: Callable[[str], None] = print, catchup: bool = False):
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
        #: intervals in which the broker did not serve the producers (brokerbench.faults.is_outage): a node
        #: lost, a partition without a leader
        self.outage: dict[str, Any] = {"intervals": 0, "seconds": 0.0, "first": None, "last": None}
        #: extra fields written into every interval record (e.g. a sweep's step)
        self.extra: dict[str, Any] = {}
        #: merged over the whole phase, for the validity flags of the end record
        self.phase_delay = LogHistogram()
        self.phase_publish = LogHistogram()
        self.catchup_received = 0
        #: a mixed workload: every interval carries the catch-up subscription's fields
        self.catchup = catchup
        #: merged over the current segment (a sweep step): its stability checks
        self.segment_delay = LogHistogram()
        self.segment_publish = LogHistogram()
        self._interval_start_ns: int | None = None
        self._phase_start_ns: int | None = None
        #: messages sent before the first interval (a measured phase's lead-in), not recorded
        self.lead_in_sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._f.flush()

    def start(self, start_ns: int, duration_s: float) -> None:
        """Begin intervals at ``start_ns``; a thread closes one every interval_s."""
        self._interval_start_ns = start_ns
        self._duration_s = duration_s
        self.segment_delay = LogHistogram()
        self.segment_publish = LogHistogram()
        if self._phase_start_ns is None:
            self._phase_start_ns = start_ns
            # anything before the start (probes, the lead-in) is not measured
            # (no producer is sending yet: a lead-in's have finished)
            self.lead_in_sent = len(self.recorder.swap().delay_ns)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="interval-writer", daemon=True)
        self._thread.start()

    def stop_segment(self) -> None:
        """Stop the interval clock and close the (partial) interval now; start() resumes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self.close_interval()

    def live(self) -> tuple[int, int, int]:
        """(sent, acked, received) so far, including the open interval (approximate)."""
        s = self.recorder.s
        return (self.totals["sent"] + len(s.delay_ns),
                self.totals["acked"] + len(s.publish_ns) + len(s.publish_s),
                self.totals["received"] + len(s.e2e_ns))

    def _loop(self) -> None:
        period_ns = int(self.interval_s * 1e9)
        assert self._interval_start_ns is not None, "start() sets the first interval's start"
        next_end = self._interval_start_ns + period_ns
        stop = self._stop
        while not stop.is_set():
            wait = (next_end - time.time_ns()) / 1e9
            if wait > 0 and stop.wait(wait):
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
            e2e = _drop_probes(samples.e2e_ns)
            pub = _histogram_us(samples.publish_ns, samples.publish_s)
            delay = _histogram_us(samples.delay_ns)
            e2e_h = _histogram_us(e2e)
            self.phase_delay.merge(delay)
            self.segment_delay.merge(delay)
            self.segment_publish.merge(pub)
            self.phase_publish.merge(pub)
            counts = {
                "sent": len(samples.delay_ns),
                "acked": pub.count + pub.overflow + pub.negative,
                "send_errors": samples.send_errors,
                "received": len(e2e),
            }
            for k, v in counts.items():
                self.totals[k] += v
            if is_outage(counts["sent"], counts["acked"], counts["send_errors"]):
                o = self.outage
                o["intervals"] += 1
                o["seconds"] += (end_ns - (self._interval_start_ns or end_ns)) / 1e9
                o["first"] = self.index if o["first"] is None else o["first"]
                o["last"] = self.index
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
                **self.extra,
            }
            if self.catchup:  # a mixed workload: every interval carries the catch-up fields
                catchup = _drop_probes(samples.catchup_e2e_ns)
                self.catchup_received += len(catchup)
                record["catchup_received"] = len(catchup)
                record["catchup_e2e_latency_us"] = _histogram_us(catchup).to_dict()
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
        self.stop_segment()
        self._write({"record": "end", "end_ns": time.time_ns(), "status": status,
                     "error": error, "totals": self.totals, **extra})
        self._f.close()
