"""Pinning a host's broker processes and its clients to separate CPUs (the setting ``cpu_pinning``).

On a machine that runs both the brokers and the load generators, the two compete for the same cores and
the scheduler moves them between cores; both add run-to-run noise. ``cpu_pinning`` gives each side a CPU
list in taskset's syntax (``"0"``, ``"0-1"``, ``"0,2-3"``)::

    {"broker": "0", "client": "1"}

``broker``: every process a broker deployment starts (broker, ZooKeeper, bookie; their threads and children
inherit it); ``client``: the worker processes (and the JVM engine they start). A side not named is not
pinned. The setting is checked for its syntax when the settings are read, and against the CPUs this host
offers by the validate task (:func:`check_on_host`, from the local environment's ``check_plan``), so a CPU
the host does not have is refused naming the setting and the host before the lease and before any broker
starts. What was applied is recorded in ``provenance/hosts.json``
(:func:`describe`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

#: the sides that can be pinned
SIDES = ("broker", "client")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_cpu_list(text: str) -> list[int]:
    """``"0,2-3"`` -> ``[0, 2, 3]``; ValueError naming what is wrong."""
    text = str(text).replace(" ", "")
    if not _CPU_LIST.match(text):
        raise ValueError(f"{text!r} is not a CPU list (taskset's syntax: '0', '0-1', '0,2-3')")
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"{part!r} is a range that ends before it starts")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


class PinningError(ValueError):
    """A CPU list that cannot be applied; ``setting`` is its dotted name (``cpu_pinning.broker``)."""

    def __init__(self, message: str, side: str):
        super().__init__(message)
        self.setting = f"cpu_pinning.{side}"


def check_syntax(pinning: Mapping[str, str]) -> dict[str, str]:
    """The setting's value, each side's list parsed once; ValueError naming the side."""
    for side, text in pinning.items():
        if side not in SIDES:
            raise ValueError(f"{side}: not a side that can be pinned (one of {', '.join(SIDES)})")
        try:
            parse_cpu_list(text)
        except ValueError as e:
            raise ValueError(f"{side}: {e}") from None
    return dict(pinning)


def available() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def check_on_host(pinning: Mapping[str, str], host: str) -> dict[str, list[int]]:
    """Each side's CPUs, every one of them offered to this process on ``host``; :class:`PinningError` naming the
    setting and the host otherwise."""
    offered = set(available())
    out: dict[str, list[int]] = {}
    for side, text in pinning.items():
        cpus = parse_cpu_list(text)
        missing = [c for c in cpus if c not in offered]
        if missing:
            raise PinningError(f"CPU(s) {', '.join(map(str, missing))} not available on host {host} (it offers "
                               f"{', '.join(map(str, sorted(offered)))})", side)
        out[side] = cpus
    return out


def pinned(argv: list[str], pinning: Mapping[str, str], side: str) -> list[str]:
    """``argv`` run on ``side``'s CPUs: ``taskset -c <list> argv...`` (taskset execs the command, so the process
    keeps its pid, and every thread and child inherits the CPUs from its start); ``argv`` itself when the side is
    not pinned."""
    text = pinning.get(side)
    if not text:
        return argv
    return ["taskset", "-c", ",".join(map(str, parse_cpu_list(text))), *argv]


def describe(pinning: Mapping[str, str], host: str) -> dict[str, object]:
    """What a host record in provenance says of the pinning: each side's CPUs and what the host offers."""
    if not pinning:
        return {"pinned": False, "available_cpus": available(),
                "note": "not pinned: brokers and clients share every CPU (setting cpu_pinning)"}
    return {"pinned": True, **check_on_host(pinning, host), "available_cpus": available()}
