"""Counting every message: which were acknowledged, which each subscription received, and which it lost, received
twice or out of order.

Every message names its producer and its place in that producer's sequence. A producer has an id unique within
its phase (across the phase's worker processes and hosts) and numbers its messages 0, 1, 2, ...; a message's
*id* is ``producer_id << 32 | seq`` (:func:`message_id`), both unsigned 32-bit numbers.

The hot path appends integers to lists and nothing else: a producer's acknowledged and failed sequence numbers, a
consumer's message ids in arrival order with the partition each came from. Off the hot path (the interval writer,
once an interval) those lists are folded into compressed bitmaps, Roaring bitmaps (pyroaring; the portable
serialised format is the one Java's ``org.roaringbitmap`` reads too, for the JVM engine), one per producer:

- :class:`ProducerLedger`: the sequence numbers acknowledged and those whose send failed, per producer id;
- :class:`SubscriptionLedger`: per producer id the sequence numbers received, plus the arrivals of a sequence
  number already received (duplicates) and the first arrivals below the highest one already received from the
  same producer on the same partition (out of order, where the broker promises order: a partition, a queue with
  one active consumer).

:meth:`ProducerLedger.to_record` and :meth:`SubscriptionLedger.to_record` give their JSON form for a worker
file; :func:`reconcile` joins the ledgers of all of a row's workers per subscription into its delivery figures
(:class:`Delivery`): lost (acknowledged, never received), duplicated, out of order and received but not
acknowledged. A contiguous run of a million sequence numbers serialises to a few hundred bytes.

Not yet used: the workers do not number their messages nor write ledgers, and the aggregation reads none (issue
50). Until they do, no row carries these figures.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap

#: the largest producer id and sequence number (unsigned 32-bit each)
MAX_ID = 2**32 - 1


def message_id(producer_id: int, seq: int) -> int:
    """The 64-bit id of the ``seq``-th message of producer ``producer_id``."""
    if not (0 <= producer_id <= MAX_ID and 0 <= seq <= MAX_ID):
        raise ValueError(f"producer id {producer_id} and sequence number {seq} must be in 0..{MAX_ID}")
    return producer_id << 32 | seq


def encode(bitmap: BitMap) -> str:
    """A bitmap as text (Roaring's portable serialised format, base64): what the worker files hold."""
    bitmap.run_optimize()
    return base64.b64encode(bitmap.serialize()).decode("ascii")


def decode(text: str) -> BitMap:
    return BitMap.deserialize(base64.b64decode(text))


def _bitmaps(record: Mapping[str, str] | None) -> dict[int, BitMap]:
    return {int(pid): decode(text) for pid, text in (record or {}).items()}


def _encoded(bitmaps: Mapping[int, BitMap]) -> dict[str, str]:
    return {str(pid): encode(bm) for pid, bm in sorted(bitmaps.items())}


class ProducerLedger:
    """The sequence numbers a process's producers had acknowledged, and those whose send failed, per producer."""

    def __init__(self) -> None:
        self.acked: dict[int, BitMap] = {}
        self.failed: dict[int, BitMap] = {}

    def fold(self, producer_id: int, acked: Iterable[int], failed: Iterable[int] = ()) -> None:
        """Add one producer's acknowledged and failed sequence numbers (the lists its callbacks appended to)."""
        for seqs, into in ((acked, self.acked), (failed, self.failed)):
            values = np.fromiter(seqs, dtype=np.uint32)
            if values.size:
                into.setdefault(producer_id, BitMap()).update(values)

    def to_record(self) -> dict[str, dict[str, str]]:
        return {"acked": _encoded(self.acked), "failed": _encoded(self.failed)}

    @classmethod
    def from_record(cls, record: Mapping[str, Mapping[str, str]] | None) -> ProducerLedger:
        ledger = cls()
        ledger.acked = _bitmaps((record or {}).get("acked"))
        ledger.failed = _bitmaps((record or {}).get("failed"))
        return ledger


class SubscriptionLedger:
    """What one subscription's consumers in one process received: per producer the sequence numbers, and the
    duplicate and out-of-order arrivals."""

    def __init__(self) -> None:
        self.received: dict[int, BitMap] = {}
        self.duplicated = 0
        self.out_of_order = 0
        #: (producer id, partition) -> the highest sequence number received so far
        self._highest: dict[tuple[int, int], int] = {}

    def fold(self, ids: Iterable[int], partitions: Iterable[int]) -> None:
        """Add arrivals in the order they came: message ids (:func:`message_id`) and the partition of each."""
        ids_a = np.fromiter(ids, dtype=np.uint64)
        parts = np.fromiter(partitions, dtype=np.int64)
        if ids_a.size != parts.size:
            raise ValueError(f"{ids_a.size} message ids but {parts.size} partitions")
        if not ids_a.size:
            return
        producers = (ids_a >> np.uint64(32)).astype(np.int64)
        seqs = (ids_a & np.uint64(MAX_ID)).astype(np.int64)
        for pid in np.unique(producers).tolist():
            mine = producers == pid
            self._fold_producer(pid, seqs[mine], parts[mine])

    def _fold_producer(self, pid: int, seqs: np.ndarray, parts: np.ndarray) -> None:
        bm = self.received.setdefault(pid, BitMap())
        # a first arrival: not received before this batch, and its first occurrence in the batch
        _, first_index = np.unique(seqs, return_index=True)
        first = np.zeros(seqs.size, dtype=bool)
        first[first_index] = True
        if len(bm):  # those received before: few, unless the broker redelivers (no scan of all received)
            before = BitMap(seqs.astype(np.uint32)) & bm
            if len(before):
                first &= ~np.isin(seqs, np.asarray(before.to_array(), dtype=np.int64))
        self.duplicated += int(seqs.size - first.sum())
        new, new_parts = seqs[first], parts[first]
        for part in np.unique(new_parts).tolist():
            run = new[new_parts == part]
            highest = self._highest.get((pid, part), -1)
            running = np.maximum.accumulate(np.concatenate(([highest], run)))[:-1]
            self.out_of_order += int((run < running).sum())
            self._highest[(pid, part)] = int(max(highest, int(run.max())))
        bm.update(new.astype(np.uint32))

    def to_record(self) -> dict[str, object]:
        return {"received": _encoded(self.received), "duplicated": self.duplicated,
                "out_of_order": self.out_of_order}

    @classmethod
    def from_record(cls, record: Mapping[str, object] | None) -> SubscriptionLedger:
        record = record or {}
        ledger = cls()
        ledger.received = _bitmaps(record.get("received"))  # type: ignore[arg-type]
        ledger.duplicated = int(record.get("duplicated") or 0)  # type: ignore[call-overload]
        ledger.out_of_order = int(record.get("out_of_order") or 0)  # type: ignore[call-overload]
        return ledger


@dataclass(frozen=True)
class Delivery:
    """One subscription's delivery figures over all of a row's workers, in messages."""

    subscription: str
    #: acknowledged to a producer, never received by the subscription
    lost: int
    #: arrivals of a message the subscription had already received
    duplicated: int
    #: first arrivals after a later message of the same producer on the same partition
    out_of_order: int
    #: received, but never acknowledged to its producer (its send failed or was unconfirmed when the phase ended)
    received_not_acknowledged: int
    acknowledged: int
    received: int


def _union(ledgers: Iterable[Mapping[int, BitMap]]) -> dict[int, BitMap]:
    out: dict[int, BitMap] = {}
    for bitmaps in ledgers:
        for pid, bm in bitmaps.items():
            out[pid] = out[pid] | bm if pid in out else bm.copy()
    return out


def reconcile(producers: Iterable[ProducerLedger],
              subscriptions: Mapping[str, Iterable[SubscriptionLedger]]) -> list[Delivery]:
    """The delivery figures of each subscription: every producer ledger of the row's workers against the
    subscription's ledgers of its consumers' workers (the consumers of one subscription share its messages)."""
    acked = _union(p.acked for p in producers)
    total_acked = sum(len(bm) for bm in acked.values())
    out = []
    for sub, ledgers in sorted(subscriptions.items()):
        ledgers = list(ledgers)
        received = _union(s.received for s in ledgers)
        # a message two processes of the subscription each received once is a duplicate too
        overlap = sum(len(s.received[pid]) for s in ledgers for pid in s.received) - \
            sum(len(bm) for bm in received.values())
        lost = sum(acked[pid].difference_cardinality(received.get(pid, BitMap())) for pid in acked)
        unacked = sum(bm.difference_cardinality(acked.get(pid, BitMap())) for pid, bm in received.items())
        out.append(Delivery(subscription=sub, lost=lost,
                            duplicated=sum(s.duplicated for s in ledgers) + overlap,
                            out_of_order=sum(s.out_of_order for s in ledgers),
                            received_not_acknowledged=unacked, acknowledged=total_acked,
                            received=sum(len(bm) for bm in received.values())))
    return out
