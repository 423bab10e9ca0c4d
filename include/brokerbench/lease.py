"""Environment leases: one measurement at a time on the hosts of an environment.

Every entry point that loads benchmark hosts - a scheduled run, a manual
trigger, a backfill, another suite's DAG, ``brokerbench bench`` from the shell
(which runs the same DAG) - takes the lease of its environment before it
provisions and gives it back in teardown. Airflow pools limit how many tasks run
at once; they cannot hold a resource across the tasks of a run (deploy, warm-up,
measure, undeploy), so the lease does that and the pools back it up.

A lease is a small JSON file per scope, changed only under an exclusive
``flock`` on a lock file beside it::

    $BROKERBENCH_LOCK_DIR/<scope>.json     (default $BROKERBENCH_HOME/locks)
    {"holders": {"<run key>": {"since": ..., "expires": ..., "note": ...}}}

Scopes, each environment's own (``lease_scope`` of its class in
``environments.registry``): ``local@<hostname>`` (slots 1: this machine is the one host under
test), ``external@<broker>=<address>+...`` (slots 1: the clusters a run measures on, see
``environments.external.lease_scope``) and ``aws`` (slots = the configured number of concurrent runs; each run
has its own fleet, so one measurement per fleet is already given by the DAG's
order). A holder renews its lease at every step; a lease not renewed before it
expires (the holder's run died without teardown) is dropped with a warning, so
a crashed run never blocks the environment for longer than its time-to-live.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

log = logging.getLogger("brokerbench")
T = TypeVar("T")


def lock_dir() -> Path:
    """``BROKERBENCH_LOCK_DIR``, else ``$BROKERBENCH_HOME/locks``: every entry point of a machine must share it."""
    if os.environ.get("BROKERBENCH_LOCK_DIR"):
        return Path(os.environ["BROKERBENCH_LOCK_DIR"])
    from brokerbench.environments.local import brokerbench_home

    return brokerbench_home() / "locks"


@dataclass
class Busy:
    """The lease is taken: who holds it, for a log line a waiting user can act on."""

    scope: str
    slots: int
    holders: dict[str, dict[str, Any]]

    def __str__(self) -> str:
        now = time.time()
        who = "; ".join(
            f"run {key} (since {_iso(h['since'])}, {h.get('note') or 'no note'}; lease expires in "
            f"{max(0, h['expires'] - now) / 60:.1f} min unless renewed)" for key, h in sorted(self.holders.items()))
        return f"the {self.scope} environment is in use ({len(self.holders)} of {self.slots} slot(s)): {who}"


class LeaseLost(RuntimeError):
    """A step that loads the hosts found that its run does not hold the environment's lease."""


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _safe(scope: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@=-]", "_", scope)


class FileStore:
    """Leases as JSON files in a directory, each changed under an exclusive ``flock`` on a lock file beside it
    (every process that shares the directory - one machine, or workers on a shared filesystem)."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    def __str__(self) -> str:
        return str(self.directory)

    def update(self, scope: str, change: Callable[[dict[str, Any]], T]) -> T:
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{_safe(scope)}.json"
        with open(d / f"{_safe(scope)}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                try:
                    doc = json.loads(path.read_text())
                except (OSError, ValueError):
                    doc = {}
                doc.setdefault("holders", {})
                result = change(doc)
                tmp = path.with_suffix(".json.tmp")
                tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
                tmp.replace(path)
                return result
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


class S3Store:
    """Leases as JSON objects under ``s3://bucket/prefix/``, changed by compare-and-swap: S3's conditional
    writes (``If-None-Match: *`` to create, ``If-Match: <etag>`` to replace). Workers that share nothing but
    the results bucket still see one lease; a writer that lost the race reads again and retries."""

    def __init__(self, uri: str, aws_conn_id: str | None = None, client: Any = None):
        from brokerbench.storage import s3_client, split_s3

        self.uri = uri.rstrip("/")
        self.bucket, self.prefix = split_s3(self.uri)
        self.client = client or s3_client(aws_conn_id)

    def __str__(self) -> str:
        return self.uri

    def update(self, scope: str, change: Callable[[dict[str, Any]], T], attempts: int = 50) -> T:

        from botocore.exceptions import ClientError  # botocore: only for an s3:// store

        key = f"{self.prefix}/{_safe(scope)}.json" if self.prefix else f"{_safe(scope)}.json"
        for attempt in range(attempts):
            try:
                obj = self.client.get_object(Bucket=self.bucket, Key=key)
                doc, etag = json.loads(obj["Body"].read() or b"{}"), obj["ETag"]
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                    raise
                doc, etag = {}, None
            doc.setdefault("holders", {})
            result = change(doc)
            body = json.dumps(doc, indent=2, sort_keys=True).encode()
            cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json",
                                       **cond)
                return result
            except ClientError as e:
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status not in (409, 412):  # 412: changed since we read it; 409: a concurrent write
                    raise
                time.sleep(random.uniform(0.05, 0.2) * (1 + attempt % 5))
        raise RuntimeError(f"could not update the lease {self.uri}/{_safe(scope)}.json: {attempts} conflicting "
                           f"writes in a row")


Store = FileStore | S3Store


def store_for(location: str | Path | None = None) -> Store:
    """Where leases live. ``BROKERBENCH_LOCK_DIR`` when set; else the results store's ``locks/``
    (``s3://bucket/prefix/locks`` or ``<results root>/locks``), the one place every worker of a deployment
    shares; else (no results root given) ``$BROKERBENCH_HOME/locks``."""
    if os.environ.get("BROKERBENCH_LOCK_DIR"):
        return FileStore(os.environ["BROKERBENCH_LOCK_DIR"])
    if location is None:
        return FileStore(lock_dir())
    location = str(location)
    if location.startswith("s3://"):
        return S3Store(location.rstrip("/") + "/locks")
    return FileStore(Path(location) / "locks")


def store_at(location: str) -> Store:
    """The store named by :func:`str` of a store (a directory or an ``s3://`` URI), e.g. in a trigger's kwargs."""
    return S3Store(location) if str(location).startswith("s3://") else FileStore(location)


def _bound_process_gone(h: dict[str, Any]) -> bool:
    """A lease bound to a process (``airflow dags test`` runs every task in one) whose process is gone."""
    pid = h.get("bound_pid")
    if not pid or h.get("host") != socket.gethostname():
        return False
    try:
        import psutil

        p = psutil.Process(int(pid))
        return abs(p.create_time() - float(h.get("bound_pid_created", p.create_time()))) > 0.01 or \
            p.status() == psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 - no such process
        return True


def _drop_expired(scope: str, doc: dict[str, Any], now: float) -> None:
    """Drop the holders whose lease expired or whose bound process is gone, and remember them under ``dead``
    until a run takes them (:func:`take_dead`) to stop what they left running."""
    for key, h in list(doc["holders"].items()):
        if h.get("expires", 0) < now:
            why = f"its lease expired at {_iso(h.get('expires', 0))} without being released"
            log.warning("lease of %s held by run %s expired at %s without being released (its run died before "
                        "teardown?): dropped", scope, key, _iso(h.get("expires", 0)))
        elif _bound_process_gone(h):
            why = f"the process running it (pid {h.get('bound_pid')}) is gone"
            log.warning("lease of %s held by run %s dropped: the process running that run (pid %s) is gone",
                        scope, key, h.get("bound_pid"))
        else:
            continue
        doc["holders"].pop(key)
        doc.setdefault("dead", {})[key] = {"why": why, "dropped_at": now, "note": h.get("note", "")}


def take_dead(scope: str, store: Store | None = None) -> dict[str, dict[str, Any]]:
    """The runs of ``scope`` that died holding its lease and whose leftovers nobody has stopped yet (run key ->
    why it was found dead); removed from the store as they are returned, so one run recovers each."""

    def change(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
        _drop_expired(scope, doc, time.time())
        return doc.pop("dead", {})

    return (store or store_for()).update(scope, change)


def acquire(scope: str, holder: str, *, slots: int = 1, ttl_s: float = 3600.0, note: str = "",
            bound_pid: int | None = None, store: Store | None = None) -> Busy | None:
    """Take (or renew) ``holder``'s lease of ``scope``. None when held now; :class:`Busy` when all slots are taken.

    ``bound_pid``: the process that runs the whole run (``airflow dags test``); when it is gone, the lease is
    dropped at once rather than at its expiry (a stopped ``make bench`` does not block the next one)."""
    now = time.time()
    bound = {}
    if bound_pid:
        import psutil

        bound = {"bound_pid": bound_pid, "bound_pid_created": psutil.Process(bound_pid).create_time()}

    def change(doc: dict[str, Any]) -> tuple[Busy | None, bool]:
        _drop_expired(scope, doc, now)
        holders = doc["holders"]
        if holder in holders:
            holders[holder]["expires"] = now + ttl_s
            return None, False
        if len(holders) >= max(1, slots):
            return Busy(scope, slots, dict(holders)), False
        holders[holder] = {"since": now, "expires": now + ttl_s, "ttl_s": ttl_s, "note": note,
                           "pid": os.getpid(), "host": socket.gethostname(), **bound}
        return None, True

    busy, taken = (store or store_for()).update(scope, change)
    if taken:
        log.info("lease of %s taken by run %s (of %d slot(s); expires in %.0f min unless renewed; store %s)",
                 scope, holder, slots, ttl_s / 60, store or store_for())
    return busy


def renew(scope: str, holder: str, store: Store | None = None) -> None:
    """Extend ``holder``'s lease by its time-to-live; :class:`LeaseLost` when it does not hold it."""
    now = time.time()

    def change(doc: dict[str, Any]) -> str | None:
        _drop_expired(scope, doc, now)
        h = doc["holders"].get(holder)
        if h is None:
            return ", ".join(sorted(doc["holders"])) or "nobody"
        h["expires"] = now + float(h.get("ttl_s", 3600.0))
        return None

    others = (store or store_for()).update(scope, change)
    if others is not None:
        raise LeaseLost(f"run {holder} does not hold the lease of the {scope} environment (held by {others}); "
                        f"it must not load the hosts. Was the run's lease released or did it expire?")


def release(scope: str, holder: str, store: Store | None = None) -> bool:
    """Give the lease back; True when ``holder`` held it."""
    held = (store or store_for()).update(scope, lambda doc: doc["holders"].pop(holder, None) is not None)
    if held:
        log.info("lease of %s released by run %s", scope, holder)
    return held


def holders(scope: str, store: Store | Path | str | None = None) -> dict[str, dict[str, Any]]:
    if isinstance(store, (str, Path)):
        store = store_at(str(store))

    def change(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
        _drop_expired(scope, doc, time.time())
        return dict(doc["holders"])

    return (store or store_for()).update(scope, change)


@contextlib.contextmanager
def held(scope: str, holder: str, *, slots: int = 1, ttl_s: float = 3600.0, note: str = "",
         wait_s: float = 0.0, poll_s: float = 5.0, store: Store | None = None) -> Iterator[None]:
    """For entry points outside Airflow (bench scripts): wait up to ``wait_s`` for the lease, hold it, release it."""
    deadline = time.monotonic() + wait_s
    while True:
        busy = acquire(scope, holder, slots=slots, ttl_s=ttl_s, note=note, store=store)
        if busy is None:
            break
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gave up waiting after {wait_s:.0f} s: {busy}")
        log.info("waiting: %s", busy)
        time.sleep(poll_s)
    try:
        yield
    finally:
        release(scope, holder, store)
