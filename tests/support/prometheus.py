"""A real Prometheus server (Debian's ``prometheus`` package, installed by include/infra/local/bootstrap.sh) on a
loopback port, scraping the given targets every second: the "cluster's own Prometheus" of the external tests."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from brokerbench.environments.machine.broker import free_port

PROMETHEUS = "/usr/bin/prometheus"


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read().decode())


@contextlib.contextmanager
def prometheus(workdir: Path, jobs: dict[str, list[str]], interval_s: float = 1.0) -> Iterator[dict]:
    """Prometheus scraping ``jobs`` (job name -> ``host:port`` targets, path /metrics) until the block ends;
    yields {"url", "port", "pid", "log"} once every target has been scraped up. Stopped (SIGTERM, then SIGKILL)
    on the way out."""
    assert Path(PROMETHEUS).exists() or shutil.which("prometheus"), (
        "prometheus missing: make setup installs the Debian package (include/infra/local/bootstrap.sh)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": f"{interval_s:g}s", "scrape_timeout": f"{interval_s:g}s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                           for job, targets in jobs.items()]}))
    port = free_port()
    log = workdir / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([PROMETHEUS if Path(PROMETHEUS).exists() else "prometheus",
                                 f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wanted = sum(len(t) for t in jobs.values())
        deadline = time.monotonic() + 60
        while True:
            try:
                up = _get(f"{url}/api/v1/query?query=up")["data"]["result"]
                if len([s for s in up if s["value"][1] == "1"]) >= wanted:
                    break
            except OSError:
                pass
            assert proc.poll() is None, f"prometheus exited {proc.returncode}: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"prometheus did not scrape {jobs} in 60 s: {log.read_text()[-2000:]}"
            time.sleep(0.5)
        yield {"url": url, "port": port, "pid": proc.pid, "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
