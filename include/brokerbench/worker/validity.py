"""The worker's validity rules: what a phase's end record says about the measurement (docs/worker.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from brokerbench.faults import OUTAGE_MIN_SENT
from brokerbench.histogram import LogHistogram
from brokerbench.worker.job import DELAY_P99_BOUND_MS

#: Validity thresholds (documented in docs/worker.md).
ACHIEVED_MIN_RATIO = 0.99
CLIENT_CPU_BOUND_PERCENT = 85.0  # one Python process runs on about one core (the GIL)
CLOCK_OFFSET_WARN_MS = 1.0
HOST_CPU_BOUND_PERCENT = 90.0


@dataclass
class SweepOutcome:
    """A throughput sweep's result: its highest stable step, what that step achieved and its publish-delay p99."""

    target: float | None = None
    achieved: float | None = None
    delay_p99_us: Any = None


@dataclass
class PhaseFacts:
    """What the rules read of a phase that ran."""

    kind: str
    #: this process's total rate, msg/s (inf: unthrottled)
    rate: float
    #: whether this process ran producers
    producers: bool
    #: the seconds the load ran
    load_s: float
    #: the interval writer's totals (sent, acked, send_errors, received)
    totals: dict[str, int]
    #: publish delay over the whole phase
    phase_delay: LogHistogram
    clock_offset_ms: float | None = None
    drain_timeout_s: float = 10.0
    #: what the phase noted as it ran (a missed start, a backlog not built)
    reasons: list[str] = field(default_factory=list)
    #: the interval writer's outage record (intervals, seconds, first, last)
    outage: dict[str, Any] = field(default_factory=dict)
    #: acknowledged messages its subscriptions had not received when the drain ended
    undrained: int = 0
    sweep: SweepOutcome | None = None
    sweep_steps: list[dict[str, Any]] = field(default_factory=list)


def validity(f: PhaseFacts, cpu_percent: float | None, host_cpu: float | None) -> dict[str, Any]:
    """The end record's ``validity``: the rates and delay it judged, the reasons noted, and the subset of them that
    makes the measurement invalid."""
    if f.kind == "throughput-sweep":
        sweep = f.sweep or SweepOutcome()
        target, achieved = sweep.target, sweep.achieved
        delay_p99: Any = sweep.delay_p99_us
    else:
        t = f.totals
        target = None if math.isinf(f.rate) else (f.rate if f.producers else 0)
        achieved = round(t["acked"] / f.load_s, 1) if f.producers and f.load_s else (
            round(t["received"] / f.load_s, 1) if f.load_s else None)
        delay_p99 = f.phase_delay.percentile(99) if f.producers else None
    reasons = list(f.reasons)
    off = f.clock_offset_ms
    behind = target and achieved is not None and achieved < ACHIEVED_MIN_RATIO * target
    late = delay_p99 is not None and delay_p99 > DELAY_P99_BOUND_MS * 1000 and not math.isinf(f.rate)
    busy = cpu_percent is not None and cpu_percent >= CLIENT_CPU_BOUND_PERCENT
    host_busy = host_cpu is not None and host_cpu >= HOST_CPU_BOUND_PERCENT
    if behind:
        reasons.append(f"achieved {achieved:,.0f} msg/s < {ACHIEVED_MIN_RATIO:.0%} of the target {target:,.0f}")
    if late:
        reasons.append(f"publish-delay p99 {delay_p99 / 1000:.1f} ms > {DELAY_P99_BOUND_MS:g} ms")
    if busy:
        reasons.append(f"client process CPU {cpu_percent:.0f} % (>= {CLIENT_CPU_BOUND_PERCENT:g} %: "
                       "about one core is the ceiling of one Python process)")
    if host_busy:
        reasons.append(f"client host CPU {host_cpu:.0f} % of all cores")
    if off is not None and abs(float(off)) > CLOCK_OFFSET_WARN_MS:
        reasons.append(f"clock offset {float(off):.2f} ms (> {CLOCK_OFFSET_WARN_MS:g} ms): "
                       "end-to-end latency across hosts is suspect")
    # the generator limited the result: it fell behind (rate or schedule)
    # while its own process (or host) was saturated, or ran unthrottled
    client_bound = bool((behind or late or math.isinf(f.rate)) and (busy or host_busy))
    if f.kind == "throughput-sweep" and f.sweep_steps:
        client_bound = bool(not f.sweep_steps[-1]["stable"] and (busy or host_busy))
    # the subset of the rules above that makes the measurement invalid (the
    # aggregation turns these into the summary row's status "invalid: ...";
    # the achieved-rate rule is applied there, to the merged row, see
    # docs/results-format.md): the schedule was not kept, the clocks disagree,
    # or the load generator limited the result
    invalid = []
    if client_bound:
        cpu_why = [r for r in reasons if r.startswith(("client process CPU", "client host CPU"))]
        invalid.append("client-bound: " + ("; ".join(cpu_why) if cpu_why else "the load generator was saturated"))
    if late:
        invalid.append(f"publish-delay p99 {delay_p99 / 1000:,.1f} ms > {DELAY_P99_BOUND_MS:g} ms: "
                       "the producers did not keep their send schedule")
    if off is not None and abs(float(off)) > CLOCK_OFFSET_WARN_MS:
        invalid.append(f"clock offset {float(off):.2f} ms > {CLOCK_OFFSET_WARN_MS:g} ms between hosts: "
                       "end-to-end latency across hosts is suspect")
    outage = f.outage or {}
    if outage.get("intervals"):
        # a fault during the phase: its latencies and rates are not those of a serving cluster
        why = (f"unavailable: {outage['intervals']} interval(s), {outage['seconds']:,.1f} s (intervals "
               f"{outage['first']} to {outage['last']}), with send errors or {OUTAGE_MIN_SENT}+ messages sent "
               "and none acknowledged: a fault during the phase, not a clean measurement")
        reasons.append(why)
        invalid.append(why)
    if f.undrained > 0:
        # the messages still in the backlog are the slowest ones: without them the end-to-end
        # percentiles understate the tail
        why = (f"consumers did not catch up: {f.undrained:,} acknowledged messages not received when the drain "
               f"ended ({f.drain_timeout_s:g} s after the last send); end-to-end latency covers the "
               "received ones only")
        reasons.append(why)
        invalid.append(why)
    return {"target_rate_msg_s": target, "achieved_rate_msg_s": achieved,
            "publish_delay_p99_us": delay_p99, "cpu_percent": None if cpu_percent is None else round(cpu_percent, 1),
            "host_cpu_percent": None if host_cpu is None else round(host_cpu, 1),
            "clock_offset_ms": off, "client_bound": client_bound, "reasons": reasons,
            "invalid_reasons": invalid}
