"""The unavailability window of a fault, from interval records."""

from brokerbench.faults import unavailability

S = 1_000_000_000


def _iv(i: int, sent: int, acked: int, errors: int = 0, received: int = 0) -> dict:
    return {"record": "interval", "index": i, "start_ns": i * S, "end_ns": (i + 1) * S, "sent": sent,
            "acked": acked, "send_errors": errors, "received": received}


def test_the_window_counts_intervals_without_acks_or_with_errors_from_the_fault_on():
    records = ([_iv(i, 200, 200, received=200) for i in range(10)]
               + [_iv(10, 200, 50), _iv(11, 200, 0), _iv(12, 200, 0), _iv(13, 200, 120, errors=3)]
               + [_iv(i, 200, 600 if i == 14 else 200, received=400) for i in range(14, 20)]
               + [_iv(20, 0, 0), _iv(21, 0, 0)])  # the drain after the last send: no outage
    w = unavailability(records, int(10.5 * S))
    # interval 10 acknowledged something (before the fault); 11, 12 nothing; 13 had errors
    assert w["unavailable_intervals"] == 3 and w["unavailable_s"] == 3.0
    assert w["recovered_after_s"] == 3.5 and not w["ended_unavailable"]
    assert w["intervals_after"] == 10 and w["send_errors_after"] == 3
    assert w["acked_after"] == 50 + 120 + 600 + 5 * 200


def test_a_phase_that_never_recovers_ends_unavailable():
    records = [_iv(i, 100, 100) for i in range(5)] + [_iv(i, 100, 0) for i in range(5, 9)]
    w = unavailability(records, int(4.5 * S))
    assert w["ended_unavailable"] and w["recovered_after_s"] is None
    assert w["unavailable_s"] == 4.0  # intervals 5..8 (interval 4 acknowledged before and after the fault)
