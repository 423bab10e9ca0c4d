"""Where the jobs read from: local paths, or S3 (``s3://bucket/prefix``, also ``s3a://``) read with boto3.

No Hadoop file system is used, so no ``hadoop-aws`` is needed anywhere:

- local paths (or ``file://``) are listed on the driver; the bulk (worker files) is read
  by the executors (workerfiles.py), so with a cluster the executors must see the same
  path (``local[*]``, or a filesystem shared by every host);
- ``s3://`` prefixes are listed with boto3 on the driver; the bulk is fetched by the
  executors with boto3 (workerfiles.file_lines), small files (provenance, run_meta.json,
  summary.parquet) by the driver.

Credentials and endpoint come from the standard environment variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_DEFAULT_REGION``); :func:`executor_env` hands the ones the driver has to the executors.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from typing import Sequence

#: the environment of the driver that executors need to reach S3 (only the ones set are passed)
AWS_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
           "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION")
GLOB_CHARS = set("*?[")


class UnsupportedURI(ValueError):
    """A URI scheme other than a local path, file:// or s3:// / s3a://."""


def is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def check_uri(uri: str) -> str:
    """The URI without a trailing slash; raises UnsupportedURI for other schemes than local and s3."""
    if "://" in uri and not uri.startswith("file://") and not is_s3(uri):
        raise UnsupportedURI(f"{uri}: only local paths, file:// and s3:// (s3a://) URIs are supported")
    return uri.rstrip("/") or uri


def local_path(uri: str) -> str:
    """The local path of a local path or file:// URI (absolute)."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return os.path.abspath(uri)


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key prefix without slashes at the ends)."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def s3_client():
    """A boto3 S3 client from the environment (AWS_ENDPOINT_URL: e.g. moto's server, MinIO)."""
    import boto3  # boto3: only for an s3:// store

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    return boto3.client("s3", endpoint_url=endpoint)


def executor_env() -> dict[str, str]:
    """The driver's AWS settings, for ``spark.executorEnv.*`` (only those set)."""
    return {k: os.environ[k] for k in AWS_ENV if os.environ.get(k)}


def s3_list(uri: str, client=None) -> list[tuple[str, int]]:
    """(key, size) of every object under the prefix ``uri`` (a directory: ``uri/``), sorted."""
    bucket, prefix = split_s3(uri)
    client = client or s3_client()
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else ""):
        out += [(o["Key"], int(o["Size"])) for o in page.get("Contents", [])]
    return sorted(out)


def _match(rel: str, pattern: str) -> bool:
    """fnmatch per path segment (``*`` never crosses a ``/``)."""
    a, b = rel.split("/"), pattern.split("/")
    return len(a) == len(b) and all(fnmatch.fnmatchcase(x, y) for x, y in zip(a, b))


def list_files(base: str, pattern: str, client=None) -> list[tuple[str, int]]:
    """(URI, size) of the files under ``base`` whose path relative to it matches ``pattern``
    (segments of ``*``, ``?``, ``[..]``; hidden names excluded), sorted by URI. Local
    files come back as absolute paths, S3 objects as ``s3://bucket/key``."""
    base = check_uri(base)
    if is_s3(base):
        bucket, prefix = split_s3(base)
        out = []
        for key, size in s3_list(base, client):
            rel = key[len(prefix) + 1:] if prefix else key
            if _match(rel, pattern) and not any(p.startswith((".", "_")) for p in rel.split("/")):
                out.append((s3_uri(bucket, key), size))
        return out
    root = local_path(base)
    return sorted((p, os.path.getsize(p)) for p in glob.glob(os.path.join(root, pattern)) if os.path.isfile(p))


def expand_run_dirs(args: Sequence[str], unique: bool = True, client=None) -> list[str]:
    """The run directories of the command line, in order (``unique``: each once): an argument
    with glob characters (``*?[``) stands for the directories it matches (sorted); one that
    matches nothing is kept as it is (and reported by the job as a run without data)."""
    out: list[str] = []
    for arg in args:
        arg = check_uri(arg)
        if not GLOB_CHARS & set(arg):
            out.append(arg)
            continue
        if is_s3(arg):
            bucket, prefix = split_s3(arg)
            parts = prefix.split("/")
            fixed = []
            for p in parts:
                if GLOB_CHARS & set(p):
                    break
                fixed.append(p)
            depth = len(parts)
            dirs = set()
            for key, _ in s3_list(s3_uri(bucket, "/".join(fixed)), client):
                segs = key.split("/")
                if len(segs) > depth and _match("/".join(segs[:depth]), prefix):
                    dirs.add(s3_uri(bucket, "/".join(segs[:depth])))
            matches = sorted(dirs)
        else:
            prefix = "file://" if arg.startswith("file://") else ""
            matches = sorted(p if not prefix else f"file://{p}"
                             for p in glob.glob(local_path(arg) if prefix else arg) if os.path.isdir(p))
        out.extend(matches or [arg])
    return list(dict.fromkeys(out)) if unique else out


def read_bytes(uri: str, client=None) -> bytes | None:
    """A small file's bytes (None when it does not exist); on the driver."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        client = client or s3_client()
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except client.exceptions.NoSuchKey:
            return None
    path = local_path(uri)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        return fh.read()


def read_text(uri: str, client=None) -> str | None:
    data = read_bytes(uri, client)
    return None if data is None else data.decode("utf-8")
