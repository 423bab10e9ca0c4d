"""The Prometheus JMX exporter java agent, the Kafka brokers' metrics endpoint.

``io.prometheus.jmx:jmx_prometheus_javaagent`` is one shaded jar: it is downloaded from Maven Central once
into the broker cache (``<cache>/jmx_prometheus_javaagent/<version>/``), its SHA-1 checked against Maven
Central's, and its SHA-256 goes into the run's provenance. The agent serves the catalog's MBeans only
(``include/metrics/kafka-jmx-exporter.yaml``) on ``http://<address>:<port>/metrics``.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path
from typing import Any

from ...resources import data_dir
from ..base import EnvironmentFailure
from ..processes import locked
from .distributions import cache_root, sha256_file

#: the agent's coordinates on Maven Central (the newest release served to this project's machines)
JMX_EXPORTER = ("io.prometheus.jmx", "jmx_prometheus_javaagent", "1.0.1")


def jmx_exporter_rules() -> Path:
    """The exporter's configuration: the catalog's MBeans only, named as the catalog reads them."""
    return data_dir("metrics") / "kafka-jmx-exporter.yaml"


def jmx_exporter() -> dict[str, Any]:
    """The agent jar in the broker cache (downloaded the first time): {"artifact", "jar", "sha256", "size",
    "rules"}; EnvironmentFailure naming the artifact and the address when it cannot be had."""
    group, artifact, version = JMX_EXPORTER
    d = cache_root() / artifact / version
    jar = d / f"{artifact}-{version}.jar"
    d.mkdir(parents=True, exist_ok=True)
    with locked(d / "resolve.lock"):
        if not jar.exists():
            base = os.environ.get("BROKERBENCH_MAVEN_URL", "https://repo.maven.apache.org/maven2").rstrip("/")
            url = f"{base}/{group.replace('.', '/')}/{artifact}/{version}/{jar.name}"
            tmp = jar.with_suffix(".part")
            try:
                with urllib.request.urlopen(url, timeout=60) as r:
                    tmp.write_bytes(r.read())
                with urllib.request.urlopen(url + ".sha1", timeout=30) as r:
                    want = r.read().decode().split()[0]
            except OSError as e:
                raise EnvironmentFailure(f"{':'.join(JMX_EXPORTER)} cannot be downloaded from {url}: {e}") from None
            got = hashlib.sha1(tmp.read_bytes()).hexdigest()
            if got != want:
                tmp.unlink(missing_ok=True)
                raise EnvironmentFailure(f"{url}: SHA-1 {got} is not Maven Central's {want}")
            os.replace(tmp, jar)
    return {"artifact": ":".join(JMX_EXPORTER), "jar": str(jar), "sha256": sha256_file(jar),
            "size": jar.stat().st_size, "rules": str(jmx_exporter_rules())}


def jmx_exporter_option(address: str, port: int) -> tuple[str, dict[str, Any]]:
    """The broker JVM's ``-javaagent`` option serving the catalog on ``http://<address>:<port>/metrics``, and the
    agent's provenance."""
    agent = jmx_exporter()
    return f"-javaagent:{agent['jar']}={address}:{port}:{agent['rules']}", agent
