"""A phase's clients: the driver with its consumers and producers as the layout wants them, and OMB's readiness
probe before the load."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from brokerbench.worker.drivers.base import Consumer, Driver, PayloadHandler, Producer
from brokerbench.worker.job import Job, WorkerError
from brokerbench.worker.layout import ClientLayout
from brokerbench.worker.payload import STAMP
from brokerbench.worker.recorder import IntervalWriter, Recorder

log = logging.getLogger("brokerbench.worker")


class Clients:
    """The driver, then the consumers (the catch-up subscription's paused) and the producers of one process."""

    def __init__(self) -> None:
        self.driver: Driver | None = None
        self.consumers: list[Consumer] = []
        self.catchup_consumers: list[Consumer] = []
        self.producers: list[Producer] = []

    def connect(self, cls: type[Driver], job: Job, layout: ClientLayout, recorder: Recorder,
                probe_handler: Callable[[str, str], PayloadHandler]) -> None:
        """Consumers first, each with the probe's handler of its topic and subscription, then the producers."""
        self.driver = cls(job.endpoint, job.driver, recorder)
        offset = layout.consumer_index_offset
        total_in_sub = layout.consumers_per_subscription_total
        start = "earliest" if layout.kind == "consumer-only" else "latest"
        paused = False  # backlog: consumers take part in the probe, then pause
        for t in layout.topics:
            for s in layout.subs:
                for c in range(layout.cps):
                    self.consumers.append(self.driver.create_consumer(
                        t, s, layout.partitions, probe_handler(t, s), consumer_index=offset + c,
                        consumers_in_subscription=total_in_sub, start=start, paused=paused))
            if layout.catchup_sub:
                for c in range(layout.cps):
                    self.catchup_consumers.append(self.driver.create_consumer(
                        t, layout.catchup_sub, layout.partitions, lambda _b: None, consumer_index=offset + c,
                        consumers_in_subscription=total_in_sub, start="earliest", paused=True))
        for t in layout.topics:
            for _ in range(layout.ppt):
                self.producers.append(self.driver.create_producer(t, layout.partitions))

    def measure(self, recorder: Recorder) -> None:
        """From now on every message received is measured (end-to-end latency from its send stamp)."""
        tns = time.time_ns
        unpack = STAMP.unpack_from
        rec = recorder

        def on_payload(b: bytes) -> None:
            rec.s.e2e_ns.append(tns() - unpack(b)[0])

        def on_catchup(b: bytes) -> None:
            rec.s.catchup_e2e_ns.append(tns() - unpack(b)[0])

        for c in self.consumers:
            c.on_payload = on_payload
        for c in self.catchup_consumers:
            c.on_payload = on_catchup

    def dead(self) -> list[Any]:
        """The errors of consumers that died."""
        errors = [getattr(c, "error", None) for c in self.consumers + self.catchup_consumers]
        return [e for e in errors if e]

    def close(self) -> None:
        for c in self.consumers + self.catchup_consumers:
            _quietly(c.close)
        for p in self.producers:
            _quietly(p.close)
        if self.driver is not None:
            _quietly(self.driver.close)


class ReadinessProbe:
    """OMB's readiness check: a probe message (send stamp 0) per producer until every subscription of every topic
    received one, every producer has an acknowledgement and every consumer is in place; bounded."""

    def __init__(self, layout: ClientLayout, timeout_s: float) -> None:
        self.layout = layout
        self.timeout_s = timeout_s
        self.seen: set[tuple[str, str]] = set()

    def handler(self, topic: str, sub: str) -> PayloadHandler:
        """The consumers' handler until the load starts: notes which subscription received a probe."""
        unpack = STAMP.unpack_from
        seen = self.seen

        def on_payload(b: bytes) -> None:
            if unpack(b)[0] == 0:
                seen.add((topic, sub))
        return on_payload

    def run(self, clients: Clients, writer: IntervalWriter, recorder: Recorder, errors: list[str],
            payload: Callable[[], bytes], say: Callable[[str], None]) -> None:
        """Probe until ready (``payload``: the tail of the probe messages); WorkerError names what never arrived."""
        if not clients.producers:
            return
        timeout = self.timeout_s
        deadline = time.monotonic() + timeout
        probe = STAMP.pack(0) + payload()
        rounds = 0
        wanted = {(t, s) for t in self.layout.topics for s in self.layout.subs}
        target_acks = len(clients.producers)  # at least one acknowledged probe per producer
        while True:
            acked = writer.live()[1]
            # every consumer too: a Kafka subscription's first member receives the probe while the others are
            # still joining, and their rebalance under load would skip messages (Consumer.ready)
            joining = sum(not c.ready() for c in clients.consumers)
            if wanted <= self.seen and acked >= target_acks and not joining:
                break
            if errors or recorder.s.send_errors:
                raise WorkerError(f"readiness probe: sending failed: {recorder.last_error or errors}")
            if time.monotonic() > deadline:
                missing = [f"subscription {s} of topic {t}" for t, s in sorted(wanted - self.seen)]
                if acked < target_acks:
                    missing.append(f"an acknowledgement for {target_acks - acked} of {target_acks} producers")
                problems = [f"nothing arrived on {', '.join(missing)}"] if missing else []
                if joining:
                    problems.append(f"{joining} of {len(clients.consumers)} consumers still joining their "
                                    "subscription (their partitions not yet held at fixed positions)")
                raise WorkerError(f"readiness probe: {'; '.join(problems)} within {timeout:g} s")
            if rounds == 0 or not wanted <= self.seen:
                for i, p in enumerate(clients.producers):
                    p.send(probe, str(rounds * 31 + i).encode() if self.layout.partitions > 1 else None,
                           time.time_ns())
                    p.flush(1.0)
            rounds += 1
            time.sleep(0.3)
        say(f"ready: every subscription received a probe, every producer an acknowledgement, every consumer "
            f"its place ({rounds} probe rounds, {time.monotonic() - deadline + timeout:.1f} s)")


def _quietly(fn) -> None:
    try:
        fn()
    except Exception as e:
        log.debug("close: %s", e)
