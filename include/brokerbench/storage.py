"""Where a run's files live: a local directory or ``s3://bucket/prefix``, one code path.

Every pipeline step, the Spark jobs and the report read and write the run's
files through a local directory. When the results root is a local path that
directory *is* the results location. When it is ``s3://bucket/prefix``, the
directory is a **staging copy** under ``$BROKERBENCH_HOME/s3-staging/<bucket>/<prefix>``
with the same layout (docs/results-format.md), kept in step with S3 by the
provider's :class:`S3Hook`:

* before a task: ``pull()`` downloads what the task reads and the staging copy
  lacks (or holds with other content): the run's small files (plan,
  provenance, summary), not its bulky ``raw/`` and ``hostmetrics/`` unless the
  task reads them, and only the history partitions of the run's brokers for the
  steps that compare with history (the comparison DAG pulls all of it);
* after a task, whatever happened: ``push()`` uploads every file the task
  wrote or changed.

So a task on another Airflow worker (an empty staging copy) sees everything
earlier tasks wrote that it needs, the Spark jobs read the run from S3
themselves (spark_jobs/, executors on any host), and S3 holds the complete
results after every task. Nothing a later task needs stays on one worker's
disk. Credentials come from the Airflow
connection ``BROKERBENCH_AWS_CONN_ID`` (default ``brokerbench_aws``), never from
params. Temporary files (``*.tmp``, ``*.attempt``) are not uploaded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

log = logging.getLogger("brokerbench")

SKIP_SUFFIXES = (".tmp", ".attempt")

#: the results store's S3 calls: a few seconds to connect, four tries (botocore's standard retry mode with its
#: backoff), so an unreachable store fails a task in well under a minute instead of hanging
STORE_CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 4, "mode": "standard"}}


class StoreUnreachable(RuntimeError):
    """The results store could not be read or written; what the task wrote stays in the staging copy."""


def is_s3(root: str) -> bool:
    return str(root).startswith("s3://")


def split_s3(root: str) -> tuple[str, str]:
    rest = str(root)[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def staging_root(root: str) -> Path:
    """The local directory standing for ``root`` (itself when ``root`` is local)."""
    if not is_s3(root):
        return Path(root)
    bucket, prefix = split_s3(root)
    from brokerbench.resources import brokerbench_home

    home = brokerbench_home()
    safe = [re.sub(r"[^A-Za-z0-9._=-]", "_", p) for p in [bucket, *prefix.split("/")] if p]
    return home.joinpath("s3-staging", *safe)


def _md5(path: Path) -> str:
    h = hashlib.md5()  # noqa: S324 - S3's ETag of a single-part upload, not security
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def aws_conn_id() -> str:
    """The Airflow connection of the results store's account: ``BROKERBENCH_AWS_CONN_ID``, else ``brokerbench_aws``
    (read on every call, so a changed environment takes effect)."""
    return os.environ.get("BROKERBENCH_AWS_CONN_ID", "brokerbench_aws")


#: botocore settings of the client that serves reports (brokerbench.web): an endpoint that does not accept the
#: connection within 2 s, or does not answer within 3 s, is tried once more and then answered 503 with the
#: reason (within ~7 s), rather than holding the page for botocore's defaults (60 s timeouts, 5 attempts with
#: back-off). S3 answers in well under a second; 3 s is between two reads, not for a whole file.
SERVING_CLIENT_CONFIG = {"connect_timeout": 2, "read_timeout": 3,
                         "retries": {"total_max_attempts": 2, "mode": "standard"}}


def serving_client_config():
    """:data:`SERVING_CLIENT_CONFIG` as a botocore ``Config``."""
    from botocore.config import Config  # botocore loads only where an s3:// root is served

    return Config(**SERVING_CLIENT_CONFIG)


def s3_client(conn_id: str | None = None, config=None):
    """A boto3 S3 client from the Airflow connection ``aws_conn_id`` (default ``BROKERBENCH_AWS_CONN_ID``, else
    ``brokerbench_aws``): its credentials and endpoint (``extra.endpoint_url``, e.g. a MinIO or moto server).
    ``config``: a botocore ``Config`` (timeouts, retries), else :data:`STORE_CLIENT_CONFIG`."""
    # Airflow and botocore: loaded where this runs under Airflow, not on import
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from botocore.config import Config

    return S3Hook(aws_conn_id=conn_id or aws_conn_id(), config=config or Config(**STORE_CLIENT_CONFIG)).get_conn()


def _local_state(base: Path) -> dict[str, tuple[int, int]]:
    if not base.exists():
        return {}
    return {p.as_posix(): (st.st_size, st.st_mtime_ns) for p in base.rglob("*")
            if p.is_file() and (st := p.stat())}


def _skipped(name: str) -> bool:
    return name.endswith(SKIP_SUFFIXES) or name.endswith(".s3tmp")


class S3Sync:
    """Keeps the staging copy and ``s3://bucket/<prefix>/<rel>`` in step, for chosen relative prefixes.

    Prefixes are relative to the results root (``runs/<dag>/<run>/``, ``history/broker=kafka/``); ``exclude``
    names prefixes not to download (a run's bulky ``raw/`` when the task does not read it)."""

    def __init__(self, root: str, conn_id: str | None = None, client_config=None):
        self.root = root
        self.bucket, self.prefix = split_s3(root)
        self.local = staging_root(root)
        self.client = s3_client(conn_id, config=client_config)
        self.uploaded: list[str] = []

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def listing(self, rel_prefix: str) -> dict[str, tuple[int, str]]:
        """Relative path -> (size, ETag) of every object under ``rel_prefix``."""
        out = {}
        base = self.key(rel_prefix)
        strip = len(self.key("")) if self.prefix else 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                out[obj["Key"][strip:].lstrip("/") if self.prefix else obj["Key"]] = (obj["Size"],
                                                                                        obj["ETag"].strip('"'))
        return out

    def pull(self, prefixes: list[str], exclude: tuple[str, ...] = ()) -> int:
        n = 0
        for prefix in prefixes:
            for rel, (size, etag) in self.listing(prefix).items():
                if any(rel.startswith(x) and x != prefix for x in exclude):
                    continue
                path = self.local / rel
                if path.exists() and path.stat().st_size == size and ("-" in etag or _md5(path) == etag):
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(path.name + ".s3tmp")
                self.client.download_file(self.bucket, self.key(rel), str(tmp))
                tmp.replace(path)
                n += 1
        if n:
            log.info("storage: %d file(s) from %s into the staging copy %s", n, self.root, self.local)
        return n

    def snapshot(self, prefixes: list[str]) -> dict[str, tuple[int, int]]:
        state: dict[str, tuple[int, int]] = {}
        for prefix in prefixes:
            state.update(_local_state(self.local / prefix))
        return state

    def push(self, prefixes: list[str], before: dict[str, tuple[int, int]] | None = None) -> int:
        """Upload the files under ``prefixes`` that changed since ``before`` (a :meth:`snapshot`) or that S3
        lacks or holds with other content."""
        n = 0
        for prefix in prefixes:
            remote = self.listing(prefix)
            for key, st in sorted(_local_state(self.local / prefix).items()):
                path = Path(key)
                if _skipped(path.name):
                    continue
                rel = path.relative_to(self.local).as_posix()
                have = remote.get(rel)
                if have and before is not None and before.get(key) == st:
                    continue  # unchanged here, and S3 has it
                if have and have[0] == st[0] and ("-" in have[1] or have[1] == _md5(path)):
                    continue
                self.client.upload_file(str(path), self.bucket, self.key(rel))
                self.uploaded.append(rel)
                n += 1
        if n:
            log.info("storage: %d file(s) uploaded to %s", n, self.root)
        return n

    def delete(self, rels: list[str]) -> int:
        for i in range(0, len(rels), 1000):
            self.client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": self.key(r)} for r in rels[i:i + 1000]], "Quiet": True})
        return len(rels)


@contextmanager
def synced(results_root: str, pull: list[str], push: list[str] | None = None, exclude: tuple[str, ...] = (),
           more: Callable[[], list[str]] | None = None) -> Iterator[S3Sync | None]:
    """Pull ``pull`` (minus ``exclude``) before the block, then the prefixes ``more()`` names (it may read what
    came with the first pull); push what changed under ``push`` (default: the same prefixes) after it, also
    when it fails. Yields the :class:`S3Sync`, or None for a local root."""
    if not is_s3(results_root):
        yield None
        return
    from botocore.exceptions import BotoCoreError, ClientError  # botocore: only for an s3:// root

    sync = S3Sync(results_root)
    try:
        sync.pull(pull, exclude)
        if more is not None:
            sync.pull(more())
    except (BotoCoreError, ClientError) as e:
        raise StoreUnreachable(f"the results store {results_root} could not be read: {type(e).__name__}: {e}") from e
    push = pull if push is None else push
    before = sync.snapshot(push)
    try:
        yield sync
    except BaseException:
        try:  # what the failed block wrote is uploaded too; its own failure is the one raised
            sync.push(push, before)
        except (BotoCoreError, ClientError) as e:
            log.error("storage: %s", _not_uploaded(results_root, sync, e))
        raise
    try:
        sync.push(push, before)
    except (BotoCoreError, ClientError) as e:
        raise StoreUnreachable(_not_uploaded(results_root, sync, e)) from e


def _not_uploaded(results_root: str, sync: S3Sync, e: Exception) -> str:
    return (f"the results store {results_root} could not be written ({type(e).__name__}: {e}); nothing is lost: "
            f"the files stay in the staging copy {sync.local}, and the next push (the task's retry) uploads them")
