"""A TCP proxy on loopback that delays every broker-to-client byte by a set time: the known, injected difference
of the latency tests (tests/integration) and of bench/ab_injected.py's A/B runs."""

from __future__ import annotations

import asyncio
import json
import threading


class DelayProxy:
    """TCP proxy on 127.0.0.1 that delays every broker-to-client byte by ``delay_s``.

    ``target_port``: the broker's port, or a function that gives it at each connection (a broker that
    advertises the proxy gets its own port only when it starts)."""

    def __init__(self, target_port, delay_s: float):
        self.target_port, self.delay_s = target_port, delay_s
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, creader, cwriter):
        port = self.target_port() if callable(self.target_port) else self.target_port
        sreader, swriter = await asyncio.open_connection("127.0.0.1", port)

        async def up():
            while data := await creader.read(65536):
                swriter.write(data)
                await swriter.drain()
            swriter.close()

        async def down():
            queue: asyncio.Queue = asyncio.Queue()

            async def writer():
                while True:
                    due, data = await queue.get()
                    if data is None:
                        cwriter.close()
                        return
                    await asyncio.sleep(max(0.0, due - self.loop.time()))
                    cwriter.write(data)
                    await cwriter.drain()

            w = asyncio.ensure_future(writer())
            while data := await sreader.read(65536):
                queue.put_nowait((self.loop.time() + self.delay_s, data))
            queue.put_nowait((0, None))
            await w

        await asyncio.gather(up(), down(), return_exceptions=True)

    def close(self):
        async def shutdown():  # the connections' tasks end before their loop does
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def deploy_behind(env, broker: str) -> tuple[DelayProxy, dict]:
    """Deploy Kafka or Pulsar (fsync-off) on the local environment ``env`` so that it advertises a DelayProxy
    (delay 0 until set): every client reaches the broker through the proxy. Returns (proxy, endpoint dict)."""
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
