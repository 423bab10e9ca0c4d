"""What a fault did to a measured phase, read from the worker's interval records (docs/results-format.md).

A node killed mid-phase shows as intervals in which the producers got no acknowledgement, or got errors:
the *unavailability window*. :func:`unavailability` measures it from the moment of the fault, in seconds of
whole intervals (the records' own resolution), and says when acknowledgements came back without errors.
"""

from __future__ import annotations

from typing import Any, Iterable

#: an interval that sent at least this many messages and got no acknowledgement at all counts as an outage
#: (fewer could all be in flight across the interval's end at a low rate)
OUTAGE_MIN_SENT = 10


def is_outage(sent: int, acked: int, send_errors: int) -> bool:
    """An interval in which the broker did not serve the producers: send errors, or
    :data:`OUTAGE_MIN_SENT` or more messages sent and none acknowledged."""
    return send_errors > 0 or (sent >= OUTAGE_MIN_SENT and acked == 0)


def unavailability(intervals: Iterable[dict[str, Any]], fault_ns: int) -> dict[str, Any]:
    """The intervals that end after ``fault_ns`` (ns since the epoch), up to the last one in which anything was
    sent (the drain after it is no outage): how many seconds of them were an outage (:func:`is_outage`;
    ``unavailable_s``), how long after the fault the last such interval ended (``recovered_after_s``; None
    when the phase ended in an outage or had none), and the acknowledgements, errors and receptions after it."""
    records = list(intervals)
    # the schedule's intervals only: a drain after the last send acknowledges nothing and is no outage
    last_send = max((i for i, r in enumerate(records) if int(r.get("sent", 0)) > 0), default=-1)
    after = [r for r in records[:last_send + 1] if int(r["end_ns"]) > fault_ns]
    bad = [r for r in after if is_outage(int(r.get("sent", 0)), int(r.get("acked", 0)), int(r.get("send_errors", 0)))]
    unavailable_s = sum((int(r["end_ns"]) - max(int(r["start_ns"]), fault_ns)) for r in bad) / 1e9
    recovered = None
    if bad and after and bad[-1] is not after[-1]:
        recovered = round((int(bad[-1]["end_ns"]) - fault_ns) / 1e9, 3)
    return {"fault_ns": fault_ns, "intervals_after": len(after), "unavailable_intervals": len(bad),
            "unavailable_s": round(unavailable_s, 3), "recovered_after_s": recovered,
            "ended_unavailable": bool(bad) and bad[-1] is after[-1],
            "acked_after": sum(int(r.get("acked", 0)) for r in after),
            "send_errors_after": sum(int(r.get("send_errors", 0)) for r in after),
            "received_after": sum(int(r.get("received", 0)) for r in after)}
