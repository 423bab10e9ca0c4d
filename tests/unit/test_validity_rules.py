"""The worker's validity rules that make a measurement invalid (worker/validity.py ``validity``),
and how the status of a summary row is read back (regression.split_status / validity_rules).

The summary status itself is computed by Spark (tests/integration/test_aggregate_spark.py).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from brokerbench.histogram import LogHistogram
from brokerbench.regression import is_valid, split_status, validity_rules
from brokerbench.worker.layout import ClientLayout
from brokerbench.worker.modes import Load
from brokerbench.worker.validity import PhaseFacts
from brokerbench.worker.validity import validity as judge


def phase(rate: float = 5000.0, acked: int = 150_000, load_s: float = 30.0, delay_us: list[int] | None = None,
          clock_offset_ms: float | None = 0.0, kind: str = "latency") -> PhaseFacts:
    """What validity() reads of a phase: a fixed-rate producer that acked ``acked`` in ``load_s``."""
    delay = LogHistogram.from_values(np.asarray(delay_us if delay_us is not None else [100] * 1000, dtype=np.int64))
    return PhaseFacts(kind=kind, rate=rate, producers=True, load_s=load_s,
                      totals={"sent": acked, "acked": acked, "send_errors": 0, "received": acked}, phase_delay=delay,
                      clock_offset_ms=clock_offset_ms, drain_timeout_s=10.0)


def validity(p: PhaseFacts, cpu: float | None = 40.0, host_cpu: float | None = 30.0) -> dict:
    return judge(p, cpu, host_cpu)


def test_a_clean_phase_has_no_invalid_reason():
    v = validity(phase())
    assert v["client_bound"] is False and v["invalid_reasons"] == [] and v["reasons"] == []


def test_overlapping_run_case_client_bound_and_late():
    # the case seen in a real deployment: 4,849 of 5,000 msg/s, publish delay p99 1.458 s, a saturated client
    v = validity(phase(acked=4849 * 30, delay_us=[200] * 900 + [1_458_000] * 100), cpu=97.0)
    assert v["client_bound"] is True
    assert v["invalid_reasons"] == [
        "client-bound: client process CPU 97 % (>= 85 %: about one core is the ceiling of one Python process)",
        "publish-delay p99 1,458.0 ms > 50 ms: the producers did not keep their send schedule",
    ]


def test_late_schedule_alone_is_invalid_but_not_client_bound():
    v = validity(phase(delay_us=[60_000] * 100))
    assert v["client_bound"] is False
    assert v["invalid_reasons"] == ["publish-delay p99 60.0 ms > 50 ms: the producers did not keep their send schedule"]


def test_rate_below_target_alone_is_a_note_for_the_worker():
    # the worker notes a rate below 99 %; the summary row's 95 % rule decides (aggregate.py)
    v = validity(phase(acked=4700 * 30))
    assert any(r.startswith("achieved 4,700 msg/s < 99%") for r in v["reasons"])
    assert v["invalid_reasons"] == []


class _Live:
    """A phase's live counters: ``acked`` by its producers, ``received`` by its consumers."""

    def __init__(self, acked: int, received: int):
        self.acked, self.received = acked, received

    def live(self) -> tuple[int, int, int]:
        return self.acked, self.acked, self.received


def drained(acked: int, received: int, consumers_in_subscription: int | None = None) -> Load:
    """A phase's load after flush_and_drain: one subscription with one consumer in this process."""
    layout = ClientLayout(kind="latency", topics=["t"], partitions=1, message_size=100, duration_s=1.0,
                          interval_s=1.0, ppt=0, cps=1, rate=0.0, subs=["s"], catchup_sub=None, sweep_rates=[],
                          consumer_index_offset=0, consumers_in_subscription=consumers_in_subscription)
    load = Load(SimpleNamespace(drain_timeout_s=0.2), layout,  # type: ignore[arg-type]
                SimpleNamespace(producers=[], consumers=[object()]), _Live(acked, received),  # type: ignore[arg-type]
                None, lambda _line: None)  # type: ignore[arg-type]
    load.flush_and_drain()
    return load


def test_messages_left_in_the_backlog_after_the_drain_make_the_phase_invalid():
    assert drained(acked=15_000, received=15_000).undrained == 0
    p = drained(acked=15_000, received=11_101)
    assert p.undrained == 3_899
    v = validity(phase(), cpu=40.0)
    assert v["invalid_reasons"] == []
    left = phase()
    left.undrained = p.undrained
    v = validity(left)
    why = ("consumers did not catch up: 3,899 acknowledged messages not received when the drain ended (10 s after "
           "the last send); end-to-end latency covers the received ones only")
    assert v["invalid_reasons"] == [why] and why in v["reasons"] and v["client_bound"] is False


def test_a_subscription_shared_with_other_processes_is_not_judged_by_one_of_them():
    # two processes' consumers share the subscription: this one's acknowledgements are partly read by the other
    assert drained(acked=15_000, received=7_400, consumers_in_subscription=2).undrained == 0


def test_clock_offset_over_one_ms_is_invalid():
    v = validity(phase(clock_offset_ms=-3.2))
    assert v["invalid_reasons"] == [
        "clock offset -3.20 ms > 1 ms between hosts: end-to-end latency across hosts is suspect"]
    assert validity(phase(clock_offset_ms=0.9))["invalid_reasons"] == []


def test_unthrottled_producers_are_never_late_but_client_bound_when_saturated():
    p = phase(rate=math.inf, delay_us=[900_000] * 10, kind="producer-only")
    assert validity(p, cpu=20.0)["invalid_reasons"] == []
    assert validity(p, cpu=99.0)["invalid_reasons"][0].startswith("client-bound: client process CPU 99 %")


def test_host_saturation_counts_as_client_bound():
    v = validity(phase(delay_us=[80_000] * 10), cpu=40.0, host_cpu=95.0)
    assert v["client_bound"] is True
    assert v["invalid_reasons"][0] == "client-bound: client host CPU 95 % of all cores"


@pytest.mark.parametrize("status, kind, rest", [
    ("ok", "ok", ""),
    ("invalid: publish rate 10 msg/s is 1.0 %", "invalid", "publish rate 10 msg/s is 1.0 %"),
    ("partial: worker w has no end record | invalid: client-bound: x", "partial",
     "worker w has no end record | invalid: client-bound: x"),
    (None, "unknown", ""),
])
def test_split_status(status, kind, rest):
    assert split_status(status) == (kind, rest)


def test_rules_named_from_reasons_and_only_ok_is_valid():
    reasons = ("worker client1-0: client-bound: client process CPU 97 %; worker client2-0: clock offset 3.20 ms > 1 ms; "
               "contended: another brokerbench run (/other) on localhost during the phase")
    assert validity_rules(reasons) == ["client-bound (the load generator limited the result)",
                                       "clock offset between hosts", "another brokerbench run on a host"]
    assert is_valid({"status": "ok"})
    assert not is_valid({"status": "invalid: client-bound: x"}) and not is_valid({"status": "partial: y"})
    assert not is_valid({})


def test_an_outage_during_the_phase_makes_it_invalid():
    # intervals with send errors, or 10+ messages sent and none acknowledged: a node lost mid-phase
    p = phase()
    p.outage = {"intervals": 3, "seconds": 3.0, "first": 12, "last": 14}
    v = validity(p)
    why = ("unavailable: 3 interval(s), 3.0 s (intervals 12 to 14), with send errors or 10+ messages sent and none "
           "acknowledged: a fault during the phase, not a clean measurement")
    assert v["invalid_reasons"] == [why] and why in v["reasons"]
    p.outage = {"intervals": 0, "seconds": 0.0, "first": None, "last": None}
    assert validity(p)["invalid_reasons"] == []


def test_the_interval_writer_counts_outage_intervals(tmp_path):
    from brokerbench.worker.recorder import IntervalWriter, Recorder

    rec = Recorder()
    w = IntervalWriter(str(tmp_path / "w.jsonl"), {"record": "meta", "interval_s": 1, "worker": "w"}, rec, 1,
                       progress=lambda line: None)
    w._interval_start_ns = w._phase_start_ns = 0
    w._duration_s = 5
    # (sent, acked, send errors) per 1-s interval: served; nothing acknowledged; too few sent to tell;
    # errors; the drain after the last send
    for i, (sent, acked, errors) in enumerate(((20, 20, 0), (20, 0, 0), (5, 0, 0), (20, 15, 2), (0, 0, 0))):
        rec.s.delay_ns.extend([100] * sent)
        rec.s.publish_ns.extend([1_000_000] * acked)
        rec.s.send_errors += errors
        w.close_interval((i + 1) * 1_000_000_000)
    assert w.outage == {"intervals": 2, "seconds": 2.0, "first": 1, "last": 3}
