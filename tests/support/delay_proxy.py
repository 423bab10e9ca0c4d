"""A TCP proxy on loopback that delays every broker-to-client byte by a set time: the known, injected difference
of the latency tests (tests/integration) and of bench/ab_injected.py's A/B runs.

The delay is kept by a thread of its own waiting on a condition (a delay of d adds d and up to about 0.2 ms:
bench/proxy_delay.py), not by the event loop's timers, whose epoll wait asyncio rounds up to a whole
millisecond: with those, any delay below a millisecond cost about a millisecond, a step rather than a dial.
Every chunk takes the same path whatever the delay (0 included), so two sides that differ by their delay
differ by it alone."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import threading
import time
import urllib.parse


class DelayProxy:
    """TCP proxy on 127.0.0.1 that delays every broker-to-client byte by ``delay_s``.

    ``target_port``: the broker's port, or a function that gives it at each connection (a broker that
    advertises the proxy gets its own port only when it starts)."""

    def __init__(self, target_port, delay_s: float):
        self.target_port, self.delay_s = target_port, delay_s
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        #: chunks waiting for their time: (due on time.monotonic(), sequence, client writer, bytes or None = close)
        self._due: list[tuple[float, int, asyncio.StreamWriter, bytes | None]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._closed = False
        self.timer = threading.Thread(target=self._deliver, daemon=True)
        self.timer.start()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _schedule(self, due: float, writer: asyncio.StreamWriter, data: bytes | None) -> None:
        with self._wake:
            heapq.heappush(self._due, (due, next(self._seq), writer, data))
            self._wake.notify()

    def _deliver(self) -> None:
        """Hands each chunk to the event loop at its time, in order (a connection's due times never decrease)."""
        while True:
            with self._wake:
                while not self._due and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                due, _, writer, data = self._due[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)  # or an earlier chunk arrived: look again
                    continue
                heapq.heappop(self._due)
            try:
                if data is None:
                    self.loop.call_soon_threadsafe(writer.close)
                else:
                    self.loop.call_soon_threadsafe(writer.write, data)
            except RuntimeError:  # the loop is closed: the proxy is shutting down
                return

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, creader, cwriter):
        try:
            await self._relay(creader, cwriter)
        except asyncio.CancelledError:
            # close() with the connection still open: end quietly. Python 3.11's start_server calls exception() on
            # a handler's task that ended cancelled and logs the CancelledError as "Exception in callback"
            cwriter.close()

    async def _relay(self, creader, cwriter):
        port = self.target_port() if callable(self.target_port) else self.target_port
        sreader, swriter = await asyncio.open_connection("127.0.0.1", port)

        async def up():
            while data := await creader.read(65536):
                swriter.write(data)
                await swriter.drain()
            swriter.close()

        async def down():
            due = 0.0
            while data := await sreader.read(65536):
                due = max(due, time.monotonic() + self.delay_s)  # a lowered delay never overtakes earlier bytes
                self._schedule(due, cwriter, data)
            self._schedule(due, cwriter, None)

        try:
            await asyncio.gather(up(), down(), return_exceptions=True)
        finally:
            swriter.close()

    def close(self):
        async def shutdown():  # the connections' tasks end before their loop does
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        with self._wake:
            self._closed = True
            self._wake.notify()
        self.timer.join(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def deploy_behind(env, broker: str) -> tuple[DelayProxy, dict]:
    """Deploy Kafka, Pulsar or RabbitMQ (fsync-off) on the local environment ``env`` so that every client reaches
    the broker through a DelayProxy (delay 0 until set). Returns (proxy, endpoint dict)."""
    if broker == "rabbitmq":  # clients connect where the URI says: the proxy's port in the broker's URI
        ep = env.deploy("rabbitmq", {}, "fsync-off", {}).to_dict()
        parts = urllib.parse.urlsplit(ep["amqp_uris"][0])
        proxy = DelayProxy(parts.port, 0.0)
        netloc = parts.netloc.rsplit(":", 1)[0] + f":{proxy.port}"
        ep["amqp_uris"] = [urllib.parse.urlunsplit(parts._replace(netloc=netloc))]
        return proxy, ep
    state = env.state_dir / broker / "broker.json"  # the broker's own port, once it has started
    proxy = DelayProxy(lambda: json.loads(state.read_text())["ports"][broker], 0.0)
    if broker == "kafka":  # clients find the broker through its advertised listener: the proxy
        ep = env.deploy("kafka", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}, "fsync-off",
                        {}).to_dict()
    else:  # lookups answer with the advertised listener, so clients reach the broker through the proxy
        ep = env.deploy("pulsar", {"journalSyncData": False, "internalListenerName": "internal",
                                   "advertisedListeners": f"internal:pulsar://127.0.0.1:{proxy.port}"},
                        "fsync-off", {}).to_dict()
        ep["service_url"] = f"pulsar://127.0.0.1:{proxy.port}"  # the lookup too goes through the proxy
    return proxy, ep
