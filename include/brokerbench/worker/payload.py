"""Message payloads and keys, as OMB's workload fields describe them.

Every message starts with an 8-byte big-endian nanosecond wall-clock send
time (see :data:`STAMP`): end-to-end latency is computed from it with µs
precision, independent of the broker's own (ms or s) timestamps. The rest of
the message is the payload's tail, so the message size is exactly
``messageSize``.
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import time
from collections.abc import Mapping
from typing import Any, Iterator

from brokerbench.worker.job import JobWorkload

STAMP = struct.Struct(">q")
STAMP_SIZE = STAMP.size  # 8 bytes


def payload_pool(workload: JobWorkload | Mapping[str, Any]) -> list[bytes]:
    """The payload tails (messageSize - 8 bytes each) a producer cycles through.

    - payloadFile: one payload read once from the file (before load starts,
      never on the hot path);
    - useRandomizedPayloads: ``randomizedPayloadPoolSize`` payloads, each
      ``randomBytesRatio`` random bytes followed by zeros;
    - otherwise one payload of random bytes.
    """
    w = JobWorkload.parse(workload)
    if w.message_size is None:
        raise ValueError("the workload has no messageSize")
    size = w.message_size
    if size < STAMP_SIZE:
        raise ValueError(f"messageSize {size} is smaller than the {STAMP_SIZE}-byte send timestamp")
    tail = size - STAMP_SIZE
    if w.payload_file:
        with open(w.payload_file, "rb") as f:
            on_disk = os.fstat(f.fileno()).st_size  # before reading: a file of another size is never read
            if on_disk != size:
                raise ValueError(f"payloadFile {w.payload_file} has {on_disk} bytes, messageSize is {size}")
            data = f.read(size + 1)
        if len(data) != size:
            raise ValueError(f"payloadFile {w.payload_file} has {len(data)} bytes, messageSize is {size}")
        return [data[STAMP_SIZE:]]
    if w.use_randomized_payloads:
        rnd = int(tail * w.random_bytes_ratio)
        return [os.urandom(rnd) + bytes(tail - rnd) for _ in range(w.randomized_payload_pool_size)]
    return [os.urandom(tail)]


def key_iterator(distributor: str | None) -> Iterator[bytes | None]:
    """Keys per OMB's keyDistributor: NO_KEY, KEY_ROUND_ROBIN, RANDOM_NANO."""
    d = (distributor or "NO_KEY").upper()
    if d == "NO_KEY":
        return itertools.repeat(None)
    if d == "KEY_ROUND_ROBIN":
        keys = [str(i).encode() for i in range(10_000)]
        return itertools.cycle(keys)
    if d == "RANDOM_NANO":
        rng = random.Random(time.time_ns())
        keys = [str(rng.getrandbits(40)).encode() for _ in range(10_000)]
        return itertools.cycle(keys)
    raise ValueError(f"keyDistributor {distributor!r} is not one of NO_KEY, KEY_ROUND_ROBIN, RANDOM_NANO")
