"""Reports served over HTTP: a small web app for Airflow's api-server, and its URLs.

The Airflow UI draws an extra link only when it is http(s), mailto or
same-origin, so a report on a worker's disk (``file://``) or in S3 gets no
button. This module serves, from a results root (a local directory or
``s3://bucket/prefix``, read through the AWS connection of
:mod:`brokerbench.storage`), what lies under ``runs/`` and ``comparisons/``:

    GET /brokerbench/runs/<dag_id>/<run_id>/report.html    the run's report
    GET /brokerbench/runs/<dag_id>/<run_id>/<file path>    any file of the run (summary/summary.csv, ...)
    GET /brokerbench/runs/<dag_id>/<run_id>/               index of the run's files (?format=json: JSON)
    GET /brokerbench/comparisons/<name>/comparison.html    a comparison report
    GET /brokerbench/comparisons/latest.html               the latest comparison report

``?root=<results root>`` picks another results root than the default
(``BROKERBENCH_RESULTS_ROOT``, else the project's results/); only the default
and the roots listed in ``BROKERBENCH_SERVED_ROOTS`` (comma separated) are
served, any other is refused. Nothing outside ``runs/`` and ``comparisons/``
of a served root is reachable: path segments ``..``, ``.``, empty ones,
backslashes and NUL are refused, and a local file must resolve (symlinks
followed) inside the root's ``runs/`` or ``comparisons/``.

No client input is answered 500: a segment or id over MAX_SEGMENT_LENGTH
characters or a path over MAX_SEGMENTS segments is 404, a URL over
MAX_URL_LENGTH 414, a file-system error 404/403/503 (:func:`os_error`), and an
s3:// root that cannot be reached 503 within seconds (the client's short
timeouts: storage.SERVING_CLIENT_CONFIG).

Inside the api-server (the plugin, ``create_app(auth=True)``) every request needs
an Airflow user: a run's files need read access to the DAG's runs, comparisons an
authenticated user. Pages are sent with a sandboxing Content-Security-Policy: a served
HTML file's inline scripts (the report's charts) run in an opaque origin with no network
access, never on the Airflow origin.

Importing this module is cheap (standard library only): FastAPI, Airflow's
security code and S3 clients are imported when the first request arrives.
"""

# no `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request) at definition

import errno
import html
import mimetypes
import os
import posixpath
import re
import threading
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, urlencode

from brokerbench.spec.roots import default_results_root
from brokerbench.storage import S3Sync, serving_client_config, staging_root

#: Where the plugin mounts the app in Airflow's api-server.
URL_PREFIX = "/brokerbench"

_SAFE_ID = re.compile(r"^[A-Za-z0-9._=-]+$")  # brokerbench.pipeline.safe_name's alphabet

#: The longest path segment served: no common file system holds a longer file name (NAME_MAX), so a longer
#: one names nothing (404) and never reaches the file system
MAX_SEGMENT_LENGTH = 255
#: The most path segments served: a run's deepest file is a few directories down (summary/omb/<file>.json)
MAX_SEGMENTS = 32
#: The longest URL (path and query) read at all: a longer one is answered 414 before any routing
MAX_URL_LENGTH = 8192

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".parquet": "application/vnd.apache.parquet",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
}

#: Headers of every file sent: no sniffing, and served pages run in a sandbox with an opaque
#: origin (``sandbox allow-scripts`` without ``allow-same-origin``): the report's inline scripts
#: (plotly.js and its figures) draw the charts, but they cannot read the Airflow origin's cookies
#: or storage, and ``default-src 'none'`` leaves them no network access (no connect, no frames,
#: no scripts from elsewhere). Inline CSS and data: images are allowed, as reports use.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; sandbox allow-scripts"
    ),
    "Cache-Control": "no-cache",
}


class NotServed(Exception):
    """A request for something this app does not serve; carries the HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# -- roots -----------------------------------------------------------------------

def normalize_root(root: str) -> str:
    """Comparable form of a results root: ``s3://bucket/prefix`` without trailing slash, or a real path."""
    root = str(root).strip()
    if root.startswith("s3://"):
        return root.rstrip("/")
    return os.path.realpath(os.path.expanduser(root))


def served_roots() -> list[str]:
    """The default results root, then those of ``BROKERBENCH_SERVED_ROOTS`` (comma separated)."""
    roots = [default_results_root()]
    roots += [r.strip() for r in os.environ.get("BROKERBENCH_SERVED_ROOTS", "").split(",") if r.strip()]
    out: list[str] = []
    for r in roots:
        n = normalize_root(r)
        if n not in out:
            out.append(n)
    return out


def resolve_root(requested: str | None) -> str:
    """The root to serve from: the default one, or ``requested`` when it is on the allow-list."""
    if not requested:
        return served_roots()[0]
    n = normalize_root(requested)
    if n not in served_roots():
        raise NotServed(403, f"results root {requested!r} is not served here; the api-server serves its default "
                             f"results root (BROKERBENCH_RESULTS_ROOT) and the roots listed in "
                             f"BROKERBENCH_SERVED_ROOTS")
    return n


# -- URLs ------------------------------------------------------------------------

def _base_url(base_url: str | None) -> str:
    """``[api] base_url`` of Airflow's configuration (absolute links), else "" (same-origin relative links)."""
    if base_url is None:
        try:
            from airflow.configuration import conf  # Airflow: loaded where this runs under Airflow, not on import

            base_url = conf.get("api", "base_url", fallback="") or ""
        except Exception:  # no Airflow configuration: relative links
            base_url = ""
    return base_url.rstrip("/")


def _url(rel_parts: list[str], results_root: str | None, base_url: str | None) -> str:
    path = "/".join(quote(p, safe="") for p in rel_parts)
    url = f"{_base_url(base_url)}{URL_PREFIX}/{path}"
    if results_root:
        url += "?" + urlencode({"root": str(results_root)})
    return url


def _parts(path_or_key: str) -> list[str]:
    return [p for p in str(path_or_key).replace("\\", "/").split("/") if p]


def report_url(results_root: str | None, run_key_or_path: str, *, base_url: str | None = None) -> str:
    """The URL of a run's report (or of another file of the run).

    ``run_key_or_path``: ``<dag_id>/<run_id>`` (the run key), or a path holding
    ``.../runs/<dag_id>/<run_id>[/<file>]`` (a local or staging path of the run
    directory or of one of its files; default file: report.html).
    ``results_root``: carried as ``?root=``; None leaves it out (the server's default root).
    ``base_url``: None = Airflow's ``[api] base_url`` if set, else a relative
    ``/brokerbench/...`` URL (the UI accepts same-origin links).
    """
    parts = _parts(run_key_or_path)
    if "runs" in parts:
        i = len(parts) - 1 - parts[::-1].index("runs")
        parts = parts[i + 1:]
    if len(parts) < 2:
        raise ValueError(f"{run_key_or_path!r} is neither <dag_id>/<run_id> nor a path under runs/<dag_id>/<run_id>")
    dag_id, run_id, rest = parts[0], parts[1], parts[2:] or ["report.html"]
    return _url(["runs", dag_id, run_id, *rest], results_root, base_url)


def comparison_url(results_root: str | None, name_or_path: str, *, base_url: str | None = None) -> str:
    """The URL of a comparison report: a name (``comparisons/<name>/comparison.html``),
    ``latest`` (``comparisons/latest.html``), or a path under ``.../comparisons/``."""
    parts = _parts(name_or_path)
    if "comparisons" in parts:
        i = len(parts) - 1 - parts[::-1].index("comparisons")
        rel = parts[i + 1:]
    elif parts == ["latest"] or parts == ["latest.html"]:
        rel = ["latest.html"]
    else:
        rel = parts
    if len(rel) == 1 and not rel[0].endswith(".html"):
        rel = [rel[0], "comparison.html"]
    if not rel:
        raise ValueError(f"{name_or_path!r} names no comparison")
    return _url(["comparisons", *rel], results_root, base_url)


# -- reading a root (local or S3) ---------------------------------------------------

def check_segments(segments: list[str]) -> None:
    """Refuse what no served file is named like: 400 for a segment that could leave the served directories,
    404 for a path deeper or a segment longer than any file (they would name nothing)."""
    if len(segments) > MAX_SEGMENTS:
        raise NotServed(404, f"not found: a path of {len(segments):,} segments (no served file is more than "
                             f"{MAX_SEGMENTS} deep)")
    for s in segments:
        if s in ("", ".", "..") or "\\" in s or "\x00" in s:
            raise NotServed(400, f"path segment {s!r} is not allowed")
        if len(s) > MAX_SEGMENT_LENGTH:
            raise NotServed(404, f"not found: a path segment of {len(s):,} characters (no file name is longer "
                                 f"than {MAX_SEGMENT_LENGTH})")


def os_error(e: OSError | RuntimeError, rel: list[str]) -> NotServed:
    """The answer to a file-system error while reading ``rel``: what the client asked for names nothing (404) or
    may not be read (403); anything else is the server's disk (503). Never a 500 with a traceback."""
    where = "/".join(rel)
    if len(where) > 200:
        where = where[:200] + "..."
    errno_ = getattr(e, "errno", None)
    if isinstance(e, RuntimeError) or errno_ in (errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.ELOOP,
                                                 errno.EINVAL):
        return NotServed(404, f"not found: {where} ({getattr(e, 'strerror', None) or e})")
    if errno_ in (errno.EACCES, errno.EPERM):
        return NotServed(403, f"{where} cannot be read by the server")
    return NotServed(503, f"could not read {where} from the results root: {getattr(e, 'strerror', None) or e}")


def content_type(name: str) -> str:
    ext = posixpath.splitext(name.lower())[1]
    return CONTENT_TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"


class _LocalRoot:
    def __init__(self, root: str):
        self.root = Path(root)

    def _path(self, rel: list[str]) -> Path:
        base = (self.root / rel[0]).resolve()
        path = (self.root.joinpath(*rel)).resolve()
        if path != base and not path.is_relative_to(base):
            raise NotServed(403, f"{'/'.join(rel)} leads outside {rel[0]}/ of the results root")
        return path

    def open(self, rel: list[str]) -> tuple[int, Iterator[bytes]] | None:
        path = self._path(rel)
        if not path.is_file():
            return None

        def chunks():
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 16), b""):
                    yield chunk

        return path.stat().st_size, chunks()

    def listing(self, rel: list[str]) -> list[tuple[str, int]]:
        path = self._path(rel)
        if not path.is_dir():
            return []
        base = (self.root / rel[0]).resolve()
        out = []
        for p in sorted(path.rglob("*")):
            if p.is_file() and p.resolve().is_relative_to(base):
                out.append((p.relative_to(path).as_posix(), p.stat().st_size))
        return out


_S3_CACHE: dict[str, tuple[float, Any]] = {}
_S3_LOCK = threading.Lock()
_S3_TTL_S = 300.0


def cached_s3_sync(root: str):
    """storage.S3Sync of ``root`` (its S3Hook client, through brokerbench's AWS connection), cached a while.

    Its client gives up quickly (storage.SERVING_CLIENT_CONFIG: short timeouts, one retry): an unreachable
    endpoint is answered 503 in seconds, not after botocore's default minute of retries.
    """
    with _S3_LOCK:
        hit = _S3_CACHE.get(root)
        if hit and time.monotonic() - hit[0] < _S3_TTL_S:
            return hit[1]
    sync = S3Sync(root, client_config=serving_client_config())
    with _S3_LOCK:
        _S3_CACHE[root] = (time.monotonic(), sync)
    return sync


class _S3Root:
    def __init__(self, root: str):
        try:
            self.sync = cached_s3_sync(root)
        except Exception as e:  # a missing or malformed AWS connection, botocore's own checks: say so, not 500
            raise NotServed(503, f"results root {root} cannot be opened: {_one_line(e)}") from None

    def open(self, rel: list[str]) -> tuple[int, Iterator[bytes]] | None:
        # botocore loads only where an s3:// root is served
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            obj = self.sync.client.get_object(Bucket=self.sync.bucket, Key=self.sync.key("/".join(rel)))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self._error(e) from None
        except BotoCoreError as e:  # no answer: endpoint unreachable, timeouts, no credentials
            raise self._unavailable(e) from None
        body = obj["Body"]

        def chunks():
            try:
                yield from body.iter_chunks(1 << 16)
            finally:
                body.close()

        return int(obj.get("ContentLength") or 0), chunks()

    def listing(self, rel: list[str]) -> list[tuple[str, int]]:
        from botocore.exceptions import BotoCoreError, ClientError  # as above: only for s3:// roots

        prefix = self.sync.key("/".join(rel)) + "/"
        out = []
        try:
            for page in self.sync.client.get_paginator("list_objects_v2").paginate(Bucket=self.sync.bucket,
                                                                                  Prefix=prefix):
                for obj in page.get("Contents", []):
                    out.append((obj["Key"][len(prefix):], obj["Size"]))
        except ClientError as e:
            raise self._error(e) from None
        except BotoCoreError as e:
            raise self._unavailable(e) from None
        return sorted(out)

    def _error(self, e) -> NotServed:
        code = e.response.get("Error", {}).get("Code")
        if code == "NoSuchBucket":
            return NotServed(404, f"bucket {self.sync.bucket!r} of results root {self.sync.root} does not exist")
        return NotServed(502, f"could not read results root {self.sync.root}: {code}: {_one_line(e)}")

    def _unavailable(self, e) -> NotServed:
        return NotServed(503, f"results root {self.sync.root} cannot be reached: {_one_line(e)}")


def _one_line(e: BaseException) -> str:
    """An exception as one line of at most 300 characters (for a response's detail)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def store(root: str):
    return _S3Root(root) if root.startswith("s3://") else _LocalRoot(root)


# -- the app ---------------------------------------------------------------------

def _index_html(title: str, files: list[tuple[str, int]], query: str) -> str:
    rows = "".join(
        f'<tr><td><a href="{html.escape(quote(name) + query)}">{html.escape(name)}</a></td>'
        f'<td style="text-align:right">{size:,}</td></tr>' for name, size in files)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif;margin:2em}}td{{padding:2px 12px}}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><table><tr><th>file</th><th>bytes</th></tr>{rows}</table>"
            f"</body></html>")


def _auth_dependencies():
    """FastAPI dependencies of Airflow's own authentication (imported only inside the api-server):
    (any authenticated user, a user allowed to read the runs of the path's DAG)."""
    # Airflow's api-server parts: present only when the app runs inside it (the plugin), not in tests of the app
    from airflow.api_fastapi.app import get_auth_manager

    # Airflow: loaded where this runs under Airflow, not on import
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    # Airflow: loaded where this runs under Airflow, not on import
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, HTTPException, Request  # FastAPI: only when the app is built

    def authenticated(_user=Depends(get_user)) -> None:
        return None

    def can_read_runs(request: Request, user=Depends(get_user)) -> None:
        dag_id = request.path_params.get("dag_id")
        if not get_auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                                    details=DagDetails(id=dag_id), user=user):
            raise HTTPException(403, f"not allowed to read runs of DAG {dag_id!r}")

    return [Depends(authenticated)], [Depends(can_read_runs)]


def create_app(*, auth: bool = False):
    """The FastAPI app (mounted at ``/brokerbench`` by the plugin).

    ``auth``: require an Airflow user (inside the api-server); False for a
    stand-alone app (tests, or behind another gate).
    """
    # FastAPI loads only when the app is built (the api-server, the report server), not for the URL helpers
    from fastapi import FastAPI, HTTPException, Request

    # FastAPI: only when the app is built
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse

    app = FastAPI(title="brokerbench reports", docs_url=None, redoc_url=None, openapi_url=None)
    any_user, run_reader = _auth_dependencies() if auth else ([], [])

    @app.middleware("http")
    async def refuse_long_urls(request: Request, call_next):
        """414 for a URL longer than MAX_URL_LENGTH, before routing, authentication or the file system."""
        length = len(request.scope.get("raw_path") or request.url.path.encode()) + len(request.url.query)
        if length > MAX_URL_LENGTH:
            return JSONResponse({"detail": f"URL of {length:,} characters: longer than the {MAX_URL_LENGTH:,} "
                                           f"this server reads"}, status_code=414)
        return await call_next(request)

    def serve(request: Request, top: str, segments: list[str], what: str):
        try:
            check_segments(segments)
            root = resolve_root(request.query_params.get("root"))
        except NotServed as e:
            raise HTTPException(e.status, e.message) from None
        query = "?" + urlencode({"root": request.query_params["root"]}) if request.query_params.get("root") else ""
        rel = [top, *segments]
        try:
            st = store(root)
            if segments and not request.url.path.endswith("/"):
                opened = st.open(rel)
                if opened is not None:
                    size, chunks = opened
                    headers = dict(SECURITY_HEADERS)
                    if size:
                        headers["Content-Length"] = str(size)
                    return StreamingResponse(chunks, media_type=content_type(segments[-1]), headers=headers)
            files = st.listing(rel)
        except NotServed as e:
            raise HTTPException(e.status, e.message) from None
        except (OSError, RuntimeError) as e:  # RuntimeError: Path.resolve's symlink loop (Python < 3.13)
            err = os_error(e, rel)
            raise HTTPException(err.status, err.message) from None
        if not files:
            raise HTTPException(404, f"{what}: {'/'.join(rel)} not found under results root {root} (not written "
                                     f"(yet), or the run used another results root: add ?root=<its root>)")
        if not request.url.path.endswith("/"):
            return RedirectResponse(request.url.path + "/" + query, status_code=307)
        if request.query_params.get("format") == "json":
            return JSONResponse({"root": root, "path": "/".join(rel), "files": [
                {"path": n, "bytes": s, "content_type": content_type(n)} for n, s in files]})
        return HTMLResponse(_index_html(f"{'/'.join(rel)}/", files, query), headers=SECURITY_HEADERS)

    @app.get("/runs/{dag_id}/{run_id}/{file_path:path}", dependencies=run_reader)
    def run_file(request: Request, dag_id: str, run_id: str, file_path: str = ""):
        """A file of a run (report.html, summary/summary.csv, ...), or the index of a directory of it."""
        for s in (dag_id, run_id):
            if len(s) > MAX_SEGMENT_LENGTH:
                raise HTTPException(404, f"not found: a run path segment of {len(s):,} characters (no DAG or run "
                                         f"id is longer than {MAX_SEGMENT_LENGTH})")
            if not _SAFE_ID.match(s):
                raise HTTPException(400, f"{s!r} is not a brokerbench run path segment")
        segments = [dag_id, run_id, *file_path.split("/")]
        if segments[-1] == "":
            segments.pop()
        return serve(request, "runs", segments, f"run {dag_id}/{run_id}")

    @app.get("/runs/{dag_id}/{run_id}", dependencies=run_reader)
    def run_index_redirect(request: Request, dag_id: str, run_id: str):
        return run_file(request, dag_id, run_id, "")

    @app.get("/comparisons/{file_path:path}", dependencies=any_user)
    def comparison_file(request: Request, file_path: str = ""):
        """comparisons/<name>/comparison.html, comparisons/latest.html, or an index."""
        segments = file_path.split("/")
        if segments and segments[-1] == "":
            segments = segments[:-1]
        return serve(request, "comparisons", segments, "comparison")

    return app


class LazyApp:
    """An ASGI app that builds :func:`create_app` on its first request (keeps plugin imports cheap)."""

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs
        self._app = None
        self._lock = threading.Lock()

    @property
    def app(self):
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = create_app(**self.kwargs)
        return self._app

    async def __call__(self, scope, receive, send):
        await self.app(scope, receive, send)


# -- links of the Airflow tasks ----------------------------------------------------

def root_of_path(path: str) -> str | None:
    """The served results root whose directory (or, for s3://, staging copy) holds ``path``; None if none does."""
    real = os.path.realpath(str(path))
    for root in served_roots():
        base = os.path.realpath(staging_root(root))
        if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
            return root
    return None


def task_results_root(ti: Any, path: str | None = None) -> str | None:
    """The results root of a task instance's run.

    On the worker (Airflow computes a task's extra links there when the task
    ends, and stores them in XCom) ``ti`` has its template context: the
    ``results_root`` param, else the default root. Otherwise the served root
    holding ``path`` (the task's local or staging path), else None.
    """
    get_context = getattr(ti, "get_template_context", None)
    if get_context is not None:
        try:
            params = get_context().get("params") or {}
            return params.get("results_root") or default_results_root()
        except Exception:  # no context: fall back on the path
            pass
    return root_of_path(path) if path else None
