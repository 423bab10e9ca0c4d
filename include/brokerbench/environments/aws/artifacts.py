"""Broker artifacts for fleet hosts: resolved once by the controller, shipped over SSH.

A fleet in a VPC without internet egress cannot download a broker, and each
host downloading the same tarball is slow and unchecked. So with
``artifact_source: controller`` (the default) the controller resolves the
broker version exactly as the local environment does (Maven Central, the
cache and its checksums: :mod:`brokerbench.environments.machine.distributions`),
packs the distribution's ``lib/`` and ``manifest.json`` into one tar file in
the cache, and copies it to every host that runs a process of that broker.
The host script checks the tar's SHA-256 before it unpacks it; a host that
already holds a file with that digest gets nothing new (a retried deploy is
quick). ``artifact_source: apache-archive`` keeps the old road: each host
downloads Apache's binary tarball and checks its sha512.

RabbitMQ is not on Maven Central: it comes from the hosts' package manager
(``rabbitmq_source: package``) or RabbitMQ's generic-unix release tarball
(``rabbitmq_source: tarball``, needs egress).
"""

from __future__ import annotations

import logging
import os
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import EnvironmentFailure
from ..machine import distributions
from ..processes import locked

log = logging.getLogger("brokerbench")

#: where a broker's artifacts may come from (setting ``artifact_source``)
SOURCES = ("controller", "apache-archive")


@dataclass(frozen=True)
class BrokerArtifact:
    """One broker version packed for the hosts."""

    broker: str
    version: str
    tar: Path
    sha256: str
    bytes: int
    logging_api: str
    manifest: dict[str, Any]

    def remote_name(self) -> str:
        return f"{self.broker}-{self.version}-{self.sha256[:16]}.tar"

    def provenance(self) -> dict[str, Any]:
        return {"source": "controller (Maven Central, shipped over SSH)", "artifact": self.manifest.get("artifact"),
                "version": self.version, "tar_sha256": self.sha256, "tar_bytes": self.bytes,
                "jars": len(self.manifest.get("jars") or []), "logging_api": self.logging_api}


def packed(broker: str, version: str) -> BrokerArtifact:
    """``broker`` ``version`` resolved (cache or Maven Central) and packed into ``<cache entry>/artifact.tar``.

    The tar holds ``lib/*.jar`` and ``manifest.json`` with fixed owners and times, so one version always packs
    to the same bytes; it is made once per cache entry, under the entry's lock."""
    dist = distributions.resolve(broker, version)
    entry = dist.lib.parent
    tar, digest = entry / "artifact.tar", entry / "artifact.tar.sha256"
    with locked(entry / ".artifact.lock"):
        if not (tar.exists() and digest.exists()):
            t0 = time.monotonic()
            tmp = entry / ".artifact.tar.tmp"

            def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo:
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                return info

            with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:
                t.add(entry / "manifest.json", "manifest.json", filter=fixed)
                t.add(dist.lib, "lib", recursive=False, filter=fixed)
                for jar in sorted(dist.lib.iterdir()):
                    t.add(jar, f"lib/{jar.name}", filter=fixed)
            digest.write_text(distributions.sha256_file(tmp) + "\n")
            os.replace(tmp, tar)
            log.info("%s %s packed for the hosts in %.1f s: %s (%.0f MB)", broker, version,
                     time.monotonic() - t0, tar, tar.stat().st_size / 1e6)
    return BrokerArtifact(broker, dist.version, tar, digest.read_text().strip(), tar.stat().st_size,
                          dist.logging_api, dist.manifest)


def ship(host: Any, artifact: BrokerArtifact, remote_dir: str) -> dict[str, Any]:
    """Copy ``artifact`` to ``<remote_dir>/artifacts/`` on ``host`` unless a file with its digest is there."""
    remote = f"{remote_dir}/artifacts/{artifact.remote_name()}"
    have = host.run(f"sha256sum {shlex.quote(remote)} 2>/dev/null | cut -d' ' -f1", timeout=120).stdout.strip()
    if have == artifact.sha256:
        return {"host": host.name, "remote": remote, "shipped": False, "reason": "already on the host"}
    t0 = time.monotonic()
    try:
        part = f"{remote}.{host.name}.part"  # hosts that share a file system each write their own
        host.put_file(str(artifact.tar), part)
        res = host.run(f"mv -f {shlex.quote(part)} {shlex.quote(remote)}", timeout=60)
    except Exception as e:  # noqa: BLE001 - named with the host
        raise EnvironmentFailure(f"copying {artifact.tar.name} to {remote} failed: {e}", host.name) from e
    if not res.ok:
        raise EnvironmentFailure(f"copying {artifact.tar.name} to {remote} failed: {res.stderr.strip()}", host.name)
    seconds = time.monotonic() - t0
    log.info("[%s] %s %s shipped (%.0f MB in %.1f s)", host.name, artifact.broker, artifact.version,
             artifact.bytes / 1e6, seconds)
    return {"host": host.name, "remote": remote, "shipped": True, "seconds": round(seconds, 1),
            "bytes": artifact.bytes}


def jmx_exporter_for_hosts() -> dict[str, Any]:
    """Kafka's metrics endpoint for the broker hosts: the Prometheus JMX exporter agent jar (resolved by the
    controller from Maven Central into the broker cache, :func:`..machine.exporters.jmx_exporter`) and its rules
    (``include/metrics/kafka-jmx-exporter.yaml``), each with its SHA-256; EnvironmentFailure when it cannot be
    had."""
    from ..machine.distributions import sha256_file
    from ..machine.exporters import jmx_exporter

    agent = jmx_exporter()
    rules = Path(agent["rules"])
    return {"artifact": agent["artifact"], "jar": agent["jar"], "jar_sha256": agent["sha256"],
            "rules": str(rules), "rules_sha256": sha256_file(rules)}


def ship_file(host: Any, local: str, sha256: str, remote: str) -> dict[str, Any]:
    """Copy the file ``local`` (of digest ``sha256``) to ``remote`` on ``host`` unless a file with that digest is
    there (the same check as :func:`ship`'s)."""
    have = host.run(f"sha256sum {shlex.quote(remote)} 2>/dev/null | cut -d' ' -f1", timeout=120).stdout.strip()
    if have == sha256:
        return {"host": host.name, "remote": remote, "shipped": False, "reason": "already on the host"}
    part = f"{remote}.{host.name}.part"
    try:
        host.put_file(local, part)
        res = host.run(f"mv -f {shlex.quote(part)} {shlex.quote(remote)}", timeout=60)
    except Exception as e:  # noqa: BLE001 - named with the host
        raise EnvironmentFailure(f"copying {Path(local).name} to {remote} failed: {e}", host.name) from e
    if not res.ok:
        raise EnvironmentFailure(f"copying {Path(local).name} to {remote} failed: {res.stderr.strip()}", host.name)
    return {"host": host.name, "remote": remote, "shipped": True}


def ship_jmx_exporter(host: Any, exporter: dict[str, Any], remote_dir: str) -> dict[str, str]:
    """The JMX exporter's jar and rules on ``host`` under ``<remote_dir>/artifacts/`` (names carry their digests,
    so versions and edited rules never collide): {"jar", "rules"} as the host sees them."""
    jar = f"{remote_dir}/artifacts/{Path(exporter['jar']).stem}-{exporter['jar_sha256'][:16]}.jar"
    rules = f"{remote_dir}/artifacts/kafka-jmx-exporter-{exporter['rules_sha256'][:16]}.yaml"
    ship_file(host, exporter["jar"], exporter["jar_sha256"], jar)
    ship_file(host, exporter["rules"], exporter["rules_sha256"], rules)
    return {"jar": jar, "rules": rules}
