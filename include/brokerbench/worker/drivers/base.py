"""What a broker driver provides to the worker.

A driver wraps one client library. Its producer's ``send`` is the hottest
code in brokerbench: it hands the message to the library and arranges that
the acknowledgement appends ``time_ns() - send_ns`` to
``recorder.s.publish_ns`` (or calls ``recorder.error``). A consumer calls its
``on_payload(bytes)`` for every message received. Nothing else per message.
"""

from __future__ import annotations

import os
import re
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Callable

from brokerbench.worker.job import JobDriver, JobEndpoint
from brokerbench.worker.recorder import Recorder

PayloadHandler = Callable[[bytes], None]


def parse_properties(value: Any) -> dict[str, str]:
    """OMB's Java-properties text blocks ("acks=all\\nlinger.ms=1") or a mapping -> dict."""
    if not value:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out: dict[str, str] = {}
    for line in str(value).splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            out[line] = ""
        else:
            out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


_SECRET_REF = re.compile(r"\$\{env:(BROKERBENCH_SECRET_[A-Z0-9_]+)\}")


def expand_secrets(value: str) -> str:
    """``value`` with each ``${env:BROKERBENCH_SECRET_...}`` replaced by that environment variable: how an
    endpoint names a secret (an external cluster's password or token) without carrying it. A variable that is
    not set is an error naming it."""
    def one(m: re.Match) -> str:
        if m.group(1) not in os.environ:
            raise RuntimeError(f"the endpoint names the secret {m.group(1)}, which is not in this process's "
                               "environment (the environment that started the worker gives it)")
        return os.environ[m.group(1)]

    return _SECRET_REF.sub(one, value)


class Producer(ABC):
    #: optional ``fast_send(payload, key)`` for libraries that time the
    #: acknowledgement themselves (no send time needs to travel with the call)
    fast_send: Callable[[bytes, bytes | None], None] | None = None

    @abstractmethod
    def send(self, payload: bytes, key: bytes | None, send_ns: int) -> None:
        """Hand one message to the client library, asynchronously."""

    def idle(self, seconds: float) -> None:
        """The producer is ahead of its schedule: wait (a library may serve its events meanwhile)."""
        time.sleep(seconds)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until every message sent so far is acknowledged or failed."""

    @abstractmethod
    def close(self) -> None: ...


class Consumer(ABC):
    on_payload: PayloadHandler

    def pause(self) -> None:
        """Stop delivering messages (they stay on the broker: a backlog builds)."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause")

    def resume(self) -> None:
        """Deliver again, from where the consumer stopped."""
        raise NotImplementedError(f"{type(self).__name__} cannot resume")

    def ready(self) -> bool:
        """Whether every message sent from now on reaches this consumer: it has joined its subscription and knows
        where it reads from. A Kafka group member is ready once it holds its partitions in the group's current
        generation with their positions resolved (until then a rebalance may move a partition whose position is
        resolved to `latest` after messages were sent to it); subscribing is enough elsewhere."""
        return True

    @abstractmethod
    def close(self) -> None: ...


class FlagPausedConsumer(Consumer):
    """A consumer whose own polling thread applies pause / resume requests.

    ``pause`` and ``resume`` only set ``_want_paused``; the consumer's thread
    acts on it between polls (client libraries are not thread-safe). Subclasses
    start the thread with :meth:`_start_polling`, its loop polling until
    ``_stop`` is set; :meth:`close` stops the thread, then closes the library's
    consumer ``_c``.
    """

    _want_paused = False
    _c: Any  # the client library's consumer

    def pause(self) -> None:
        self._want_paused = True

    def resume(self) -> None:
        self._want_paused = False

    def _start_polling(self, loop: Callable[[], None], name: str) -> None:
        """Run ``loop`` (it polls, and applies ``_want_paused``, until ``_stop`` is set) on the consumer's thread."""
        self._stop = threading.Event()
        self._t = threading.Thread(target=loop, name=name, daemon=True)
        self._t.start()

    def close(self) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self._c.close()


class Driver(ABC):
    """One broker client library, configured from the job's OMB driver and endpoint (dicts are parsed)."""

    client_library: str = ""
    client_library_version: str = ""

    def __init__(self, endpoint: JobEndpoint | dict[str, Any], driver: JobDriver | dict[str, Any], recorder: Recorder):
        self.endpoint = JobEndpoint.parse(endpoint)
        self.driver = JobDriver.parse(driver)
        self.recorder = recorder
        #: the endpoint's client properties (an external cluster's security settings), secrets expanded
        self.client_config = {str(k): expand_secrets(str(v)) for k, v in self.endpoint.client_config.items()}

    @abstractmethod
    def prepare(self, topics: list[str], partitions: int, subscriptions: list[str]) -> None:
        """Create the topics (and queues / subscriptions where the broker needs them)."""

    @abstractmethod
    def create_producer(self, topic: str, partitions: int) -> Producer: ...

    @abstractmethod
    def create_consumer(self, topic: str, subscription: str, partitions: int,
                        on_payload: PayloadHandler, consumer_index: int = 0,
                        consumers_in_subscription: int = 1, start: str = "latest",
                        paused: bool = False) -> Consumer:
        """A consumer of ``subscription`` on ``topic``.

        ``start``: where a subscription without a committed position begins:
        ``latest`` (only messages of this phase) or ``earliest`` (everything
        the broker retains: catch-up reads, consumer-only). ``paused``: created
        without delivering until :meth:`Consumer.resume`.
        """

    def close(self) -> None:
        pass
