"""brokerbench.delivery: the ledgers of acknowledged and received sequence numbers, folded batch by batch as the
interval writer folds them, serialised as the worker files hold them, and reconciled across workers into each
subscription's lost, duplicated, out-of-order and unacknowledged counts."""

from __future__ import annotations

import json

import pytest
from pyroaring import BitMap

from brokerbench.delivery import (
    MAX_ID,
    ProducerLedger,
    SubscriptionLedger,
    decode,
    encode,
    message_id,
    reconcile,
)


def ids(pid: int, seqs) -> list[int]:
    return [message_id(pid, s) for s in seqs]


def roundtrip(ledger):
    """Through a worker file's JSON and back."""
    return type(ledger).from_record(json.loads(json.dumps(ledger.to_record())))


def test_a_message_id_is_its_producer_and_sequence_number_and_refuses_what_does_not_fit():
    assert message_id(3, 7) == 3 << 32 | 7
    assert message_id(MAX_ID, MAX_ID) == 2**64 - 1
    for pid, seq in ((-1, 0), (0, -1), (MAX_ID + 1, 0), (0, MAX_ID + 1)):
        with pytest.raises(ValueError, match="must be in 0..4294967295"):
            message_id(pid, seq)


def test_a_bitmap_survives_the_text_form_and_a_million_in_a_row_take_a_few_hundred_bytes():
    bm = BitMap(range(1_000_000))
    text = encode(bm)
    assert decode(text) == bm and len(text) < 1000
    gappy = BitMap(range(0, 1_000_000, 3))
    assert decode(encode(gappy)) == gappy


def test_everything_acknowledged_and_received_once_in_order_is_all_zero():
    producers = ProducerLedger()
    producers.fold(0, range(1000))
    producers.fold(1, range(500))
    sub = SubscriptionLedger()
    # two partitions, interleaved; each batch the interval writer folds
    arrivals = [(p, s, s % 2) for p, n in ((0, 1000), (1, 500)) for s in range(n)]
    for start in range(0, len(arrivals), 333):
        batch = arrivals[start:start + 333]
        sub.fold([message_id(p, s) for p, s, _ in batch], [part for _, _, part in batch])
    (d,) = reconcile([roundtrip(producers)], {"sub-0": [roundtrip(sub)]})
    assert (d.lost, d.duplicated, d.out_of_order, d.received_not_acknowledged) == (0, 0, 0, 0)
    assert (d.subscription, d.acknowledged, d.received) == ("sub-0", 1500, 1500)


def test_an_acknowledged_message_never_received_is_lost_and_a_redelivery_a_duplicate_not_a_receipt():
    producers = ProducerLedger()
    producers.fold(0, range(100))
    sub = SubscriptionLedger()
    # 90 received; then 5 of them again (a consumer rewound) in a later batch, and one twice within a batch
    sub.fold(ids(0, range(90)), [0] * 90)
    sub.fold(ids(0, [10, 11, 12, 13, 14, 89, 89]), [0] * 7)
    (d,) = reconcile([producers], {"s": [roundtrip(sub)]})
    # a duplicate cannot hide a loss: 97 arrivals, 90 distinct messages, 10 acknowledged ones missing
    assert (d.lost, d.duplicated, d.received) == (10, 7, 90)
    assert d.out_of_order == 0  # a duplicate is counted as one, never as out of order


def test_a_first_arrival_after_a_later_message_of_its_producer_on_its_partition_is_out_of_order():
    sub = SubscriptionLedger()
    # partition 0: 0 1 2 5 3 4 6 -> 3 and 4 arrive after 5; partition 1 has an order of its own: 100, then 7
    sub.fold(ids(0, [0, 1, 2, 5]), [0] * 4)
    sub.fold(ids(0, [3, 4, 6]) + ids(0, [100]) + ids(0, [7]), [0, 0, 0, 1, 1])
    assert sub.out_of_order == 3  # 3, 4 (after 5) on partition 0; 7 after 100 on partition 1
    other = SubscriptionLedger()
    other.fold(ids(0, [5, 6]) + ids(1, [0, 1]), [0, 0, 0, 0])  # another producer's numbers are its own
    assert other.out_of_order == 0


def test_received_but_never_acknowledged_is_counted_apart_from_the_acknowledged():
    producers = ProducerLedger()
    producers.fold(0, range(10), failed=[10, 11])  # 10 and 11 failed, 12 unconfirmed when the phase ended
    sub = SubscriptionLedger()
    sub.fold(ids(0, range(13)), [0] * 13)
    (d,) = reconcile([roundtrip(producers)], {"s": [sub]})
    assert (d.lost, d.received_not_acknowledged, d.acknowledged, d.received) == (0, 3, 10, 13)
    assert roundtrip(producers).failed == {0: BitMap([10, 11])}


def test_reconcile_joins_workers_and_hosts_per_subscription():
    # two producer processes (ids 0-1 and 2-3), two subscriptions: "a" split over two consumer processes
    # (partitions shared out), "b" in one process that missed producer 3's last message
    p1, p2 = ProducerLedger(), ProducerLedger()
    for pid, ledger in ((0, p1), (1, p1), (2, p2), (3, p2)):
        ledger.fold(pid, range(50))
    a1, a2, b = SubscriptionLedger(), SubscriptionLedger(), SubscriptionLedger()
    for pid in range(4):
        a1.fold(ids(pid, range(0, 50, 2)), [0] * 25)
        a2.fold(ids(pid, range(1, 50, 2)), [1] * 25)
        b.fold(ids(pid, range(49 if pid == 3 else 50)), [0] * (49 if pid == 3 else 50))
    # a message that both of "a"'s processes received (a rebalance moved its partition) is a duplicate
    a2.fold(ids(0, [0]), [0])
    da, db = reconcile([p1, p2], {"b": [b], "a": [a1, a2]})
    assert (da.subscription, da.lost, da.duplicated, da.received) == ("a", 0, 1, 200)
    assert (db.subscription, db.lost, db.duplicated, db.received, db.acknowledged) == ("b", 1, 0, 199, 200)


def test_a_fold_of_mismatched_lists_is_refused():
    with pytest.raises(ValueError, match="3 message ids but 2 partitions"):
        SubscriptionLedger().fold(ids(0, [0, 1, 2]), [0, 0])
