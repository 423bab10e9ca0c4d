"""Where a run's files live: a local directory or ``s3://bucket/prefix``, one code path.

Every pipeline step, the Spark jobs and the report read and write the run's
files through a local directory. When the results root is a local path that
directory *is* the results location. When it is ``s3://bucket/prefix``, the
directory is a **staging copy** under ``$BROKERBENCH_HOME/s3-staging/<bucket>/<prefix>``
with the same layout (docs/results-format.md), kept in step with S3 by the
provider's :class:`S3Hook`:

* before a task: ``pull()`` downloads what S3 has and the staging copy lacks
  (or holds with other content): the run's directory and ``history/``;
* after a task, whatever happened: ``push()`` uploads every new or changed file.

So a task on another Airflow worker (an empty staging copy) sees everything
earlier tasks wrote, the Spark job reads a local path, and S3 holds the
complete results after every task. Credentials come from the Airflow
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
from typing import Iterator

log = logging.getLogger("brokerbench")

SKIP_SUFFIXES = (".tmp", ".attempt")


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
    home = Path(os.environ.get("BROKERBENCH_HOME") or Path(__file__).resolve().parents[2] / ".brokerbench")
    safe = [re.sub(r"[^A-Za-z0-9._=-]", "_", p) for p in [bucket, *prefix.split("/")] if p]
    return home.joinpath("s3-staging", *safe)


def _md5(path: Path) -> str:
    h = hashlib.md5()  # noqa: S324 - S3's ETag of a single-part upload, not security
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class S3Sync:
    """Keeps ``local`` and ``s3://bucket/<prefix>/<rel>`` in step for some relative dirs."""

    def __init__(self, root: str, aws_conn_id: str | None = None):
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        self.root = root
        self.bucket, self.prefix = split_s3(root)
        self.local = staging_root(root)
        self.hook = S3Hook(aws_conn_id=aws_conn_id or os.environ.get("BROKERBENCH_AWS_CONN_ID", "brokerbench_aws"))
        self.client = self.hook.get_conn()

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _listing(self, rel_dir: str) -> dict[str, tuple[int, str]]:
        out = {}
        base = self._key(rel_dir.strip("/")) + "/"
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(self._key("")):].lstrip("/") if self.prefix else obj["Key"]
                out[rel] = (obj["Size"], obj["ETag"].strip('"'))
        return out

    def pull(self, rel_dirs: list[str]) -> int:
        n = 0
        for rel_dir in rel_dirs:
            for rel, (size, etag) in self._listing(rel_dir).items():
                path = self.local / rel
                if path.exists() and path.stat().st_size == size and ("-" in etag or _md5(path) == etag):
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(path.name + ".s3tmp")
                self.client.download_file(self.bucket, self._key(rel), str(tmp))
                tmp.replace(path)
                n += 1
        if n:
            log.info("storage: %d file(s) from %s into the staging copy %s", n, self.root, self.local)
        return n

    def push(self, rel_dirs: list[str]) -> int:
        n = 0
        for rel_dir in rel_dirs:
            base = self.local / rel_dir
            if not base.exists():
                continue
            remote = self._listing(rel_dir)
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                if path.name.endswith(SKIP_SUFFIXES) or path.name.endswith(".s3tmp"):
                    continue
                rel = path.relative_to(self.local).as_posix()
                have = remote.get(rel)
                if have and have[0] == path.stat().st_size and ("-" in have[1] or have[1] == _md5(path)):
                    continue
                self.hook.load_file(str(path), self._key(rel), bucket_name=self.bucket, replace=True)
                n += 1
        if n:
            log.info("storage: %d file(s) uploaded to %s", n, self.root)
        return n


@contextmanager
def synced(results_root: str, rel_dirs: list[str]) -> Iterator[None]:
    """Pull ``rel_dirs`` before the block, push them after it (also when it fails).
    Does nothing for a local results root."""
    if not is_s3(results_root):
        yield
        return
    sync = S3Sync(results_root)
    sync.pull(rel_dirs)
    try:
        yield
    finally:
        sync.push(rel_dirs)
