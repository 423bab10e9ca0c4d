"""Airflow triggers of brokerbench (they run in the triggerer, not in a worker slot).

:class:`LeaseFreeTrigger` lets a run that waits for its environment's lease
(brokerbench.lease) wait deferred: no task process is started and no worker
slot is taken while another run measures, so waiting runs add no load to the
hosts under test. It fires when a slot of the lease is free; the task then
tries to take the lease, and defers again if another run was quicker.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class LeaseFreeTrigger(BaseTrigger):
    def __init__(self, scope: str, slots: int, store: str, poll_s: float = 5.0):
        super().__init__()
        self.scope = scope
        self.slots = slots
        self.store = store  # str() of a brokerbench.lease store: a directory or an s3:// URI
        self.poll_s = poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("brokerbench.triggers.LeaseFreeTrigger",
                {"scope": self.scope, "slots": self.slots, "store": self.store, "poll_s": self.poll_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from brokerbench import lease

        store = lease.store_at(self.store)
        said = None
        while True:
            held = await asyncio.to_thread(lease.holders, self.scope, store)
            if len(held) < max(1, self.slots):
                yield TriggerEvent({"scope": self.scope, "free": True})
                return
            if sorted(held) != said:  # a line when the holders change, not every poll
                said = sorted(held)
                self.log.info("waiting for the %s environment: held by %s", self.scope, ", ".join(said))
            await asyncio.sleep(self.poll_s)
