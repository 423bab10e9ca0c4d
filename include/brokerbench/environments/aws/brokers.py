"""Broker deployment on EC2 hosts from the scripts in ``include/infra/aws`` (deploy_mode install).

Per broker and version:

* Kafka: KRaft (combined broker+controller on every broker host) from 3.3,
  ZooKeeper mode before (ZooKeeper from the Kafka distribution on the metadata
  hosts), or as ``kafka_mode`` says. Flush settings (fsync-on) are topic
  config given by the driver, so they need no restart; broker-side settings of
  a variant go into the properties file and restart the broker.
* Pulsar: ZooKeeper (from the Pulsar distribution) on the metadata hosts,
  cluster metadata initialised once, a bookie and a broker on every broker
  host. Variant settings ``journalSyncData``, ``journalWriteData``,
  ``journalPageCacheFlushIntervalMSec`` go into bookkeeper.conf; the bookies
  restart.
* RabbitMQ: one node per broker host sharing an Erlang cookie, joined to the
  first; queue type is client-side (driver); a mirroring policy
  (``ha_mode`` setting) for classic mirrored queues before 4.0.

:func:`render_scripts` renders every script for one broker, version and
fleet; the tests render all supported versions and run shellcheck on them.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shlex
import time
from typing import Any

from ..base import BrokerEndpoint, EnvironmentFailure
from .templates import profile, render

log = logging.getLogger("brokerbench")

BOOKIE_KEYS = ("journalSyncData", "journalWriteData", "journalPageCacheFlushIntervalMSec",
               "journalMaxGroupWaitMSec", "journalAdaptiveGroupWrites")

#: the broker versions deploy_mode install knows how to install
VERSIONS = {
    "kafka": ["2.3.1", "2.8.2", "3.6.2", "3.9.1", "4.1.0"],
    "pulsar": ["2.4.2", "2.10.6", "3.3.7", "4.0.6"],
    "rabbitmq": ["3.8.5", "3.13.7", "4.1.4"],
}

#: the host script that installs, configures, starts, stops and checks each broker
SCRIPTS = {"kafka": "kafka.sh", "pulsar": "pulsar.sh", "rabbitmq": "rabbitmq.sh"}

#: what BrokerEndpoint.implementation says for an installed broker
IMPLEMENTATIONS = {"kafka": "apache-kafka", "pulsar": "apache-pulsar", "rabbitmq": "rabbitmq"}


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())


def kafka_mode(version: str, forced: str | None = None) -> str:
    """KRaft from 3.3 (production-ready), only KRaft from 4.0; ZooKeeper before."""
    v = _vtuple(version)
    if forced == "zookeeper" and v >= (4, 0):
        raise EnvironmentFailure(f"Kafka {version} has no ZooKeeper mode (removed in 4.0)")
    if forced == "kraft" and v < (2, 8):
        raise EnvironmentFailure(f"Kafka {version} has no KRaft mode")
    if forced:
        return forced
    return "kraft" if v >= (3, 3) else "zookeeper"


def _short(name: str) -> str:
    return name.replace(".", "-")


def render_scripts(broker: str, version: str, hosts: list[dict[str, Any]], metadata: list[dict[str, Any]],
                   broker_settings: dict[str, Any], *, mode: str = "kraft", tuning: str = "default",
                   run_key: str = "run", data_dir: str = "/data") -> list[tuple[str, str, str]]:
    """[(host name, script name, text)] for every host that takes part."""
    prof = profile(tuning, broker)
    settings = {**prof, **{str(k): str(v).lower() if isinstance(v, bool) else str(v)
                           for k, v in broker_settings.items() if k != "nodes"}}
    out = []
    if broker == "kafka":
        scala = "2.12" if tuple(int(x) for x in version.split(".")[:2]) < (2, 4) else "2.13"
        zk = ",".join(f"{m['address']}:2181" for m in metadata)
        voters = ",".join(f"{i + 1}@{h['address']}:9093" for i, h in enumerate(hosts))
        cluster_id = hashlib.sha1(run_key.encode()).digest()[:16]
        cid = base64.urlsafe_b64encode(cluster_id).decode().rstrip("=")
        for i, h in enumerate(hosts):
            out.append((h["name"], "kafka.sh", render(
                "kafka.sh.j2", version=version, scala=scala, mode=mode, host_name=h["name"], node_id=i + 1,
                address=h["address"], voters=voters, zookeeper=zk, cluster_id=cid, data_dir=data_dir,
                replication=min(3, len(hosts)), settings=settings, heap="6g")))
        if mode == "zookeeper":
            out += _zookeeper(metadata, f"/opt/kafka-{version}", "Kafka", "Kafka " + version,
                              f"/opt/kafka-{version}/bin/zookeeper-server-start.sh", data_dir)
    elif broker == "pulsar":
        zk = ",".join(f"{m['address']}:2181" for m in metadata)
        bookie = {k: v for k, v in settings.items() if k in BOOKIE_KEYS}
        brk = {k: v for k, v in settings.items() if k not in BOOKIE_KEYS}
        ens = min(3, len(hosts))
        brk.setdefault("managedLedgerDefaultEnsembleSize", str(ens))
        brk.setdefault("managedLedgerDefaultWriteQuorum", str(ens))
        brk.setdefault("managedLedgerDefaultAckQuorum", str(max(1, ens - 1)))
        for h in hosts:
            out.append((h["name"], "pulsar.sh", render(
                "pulsar.sh.j2", version=version, host_name=h["name"], role="bookie + broker",
                address=h["address"], zookeeper=zk, zookeeper_path=zk.replace(",", ";"), data_dir=data_dir,
                bookie=bookie, broker=brk, heap="4g")))
        for m in metadata:
            out.append((m["name"], "pulsar.sh", render(
                "pulsar.sh.j2", version=version, host_name=m["name"], role="metadata (install only)",
                address=m["address"], zookeeper=zk, zookeeper_path=zk.replace(",", ";"), data_dir=data_dir,
                bookie={}, broker={}, heap="1g")))
        out += _zookeeper(metadata, f"/opt/pulsar-{version}", "Pulsar metadata store", "Pulsar " + version,
                          f"/opt/pulsar-{version}/bin/pulsar zookeeper --config", data_dir)
    elif broker == "rabbitmq":
        mirroring = settings.pop("ha_mode", None)
        if mirroring and tuple(int(x) for x in version.split(".")[:1]) >= (4,):
            raise EnvironmentFailure(f"RabbitMQ {version} has no classic queue mirroring (removed in 4.0): "
                                    "use quorum queues (driver queueType QUORUM)")
        policy = None
        if mirroring:
            policy = '{"ha-mode":"all"}' if mirroring == "all" else \
                f'{{"ha-mode":"exactly","ha-params":{int(mirroring)},"ha-sync-mode":"automatic"}}'
        nodes = [{"short_name": _short(h["name"]), "address": h["address"]} for h in hosts]
        cookie = hashlib.sha256(("cookie:" + run_key).encode()).hexdigest()[:32]
        for i, h in enumerate(hosts):
            out.append((h["name"], "rabbitmq.sh", render(
                "rabbitmq.sh.j2", version=version, host_name=h["name"], node_id=i, nodes=nodes,
                short_name=_short(h["name"]), address=h["address"], data_dir=data_dir, cookie=cookie,
                settings=settings, mirroring=policy)))
    else:
        raise EnvironmentFailure(f"unknown broker {broker!r}")
    return out


def _zookeeper(metadata, home, purpose, distribution, start_command, data_dir):
    servers = [f"server.{i + 1}={m['address']}:2888:3888" for i, m in enumerate(metadata)]
    return [(m["name"], "zookeeper.sh", render(
        "zookeeper.sh.j2", host_name=m["name"], node_id=i + 1, home=home, purpose=purpose,
        distribution=distribution, data_dir=data_dir, servers=servers, start_command=start_command))
        for i, m in enumerate(metadata)]


# -- deploy / health / undeploy on the fleet ------------------------------------------

def _fleet_hosts(env, role: str) -> list[dict[str, Any]]:
    return [h for h in env.fleet()["hosts"] if h["role"] == role]


def _step(env, host_name: str, script: str, action: str, timeout: float = 900) -> None:
    host = next(h for h in env.hosts() if h.name == host_name)
    path = f"{env.host_dir(host)}/scripts/{script}"
    res = host.sudo(f"bash {shlex.quote(path)} {action}", timeout=timeout)
    if not res.ok:
        raise EnvironmentFailure(f"{script} {action} failed (exit {res.returncode}): "
                                f"{(res.stderr or res.stdout).strip()[-800:]}", host_name)


def deploy_installed(env, broker: str, broker_settings: dict[str, Any], variant: str,
                     driver_overrides: dict[str, Any]) -> BrokerEndpoint:
    version = env.version(broker)
    mode = kafka_mode(version, env.settings.get("kafka_mode")) if broker == "kafka" else ""
    hosts, metadata = _fleet_hosts(env, "broker"), _fleet_hosts(env, "metadata")
    scripts = render_scripts(broker, version, hosts, metadata, broker_settings, mode=mode or "kraft",
                             tuning=env.settings.get("tuning_profile") or "default", run_key=env.run_key)
    by_host = {h.name: h for h in env.hosts()}
    for name, script, text in scripts:
        by_host[name].put_text(text, f"{env.host_dir(by_host[name])}/scripts/{script}", 0o755)
    for name, script, _ in scripts:
        if script != "zookeeper.sh":
            _step(env, name, script, "install")
    for name, script, _ in scripts:
        if script == "zookeeper.sh":
            _step(env, name, script, "configure")
            _step(env, name, script, "start")
    broker_hosts = [h["name"] for h in hosts]
    main = SCRIPTS[broker]
    for name in broker_hosts:
        _step(env, name, main, "stop")  # a variant's settings need a restart
        _step(env, name, main, "configure")
    if broker == "pulsar":
        _step(env, broker_hosts[0], main, "init-cluster")
    for name in broker_hosts:
        _step(env, name, main, "start")
    if broker == "rabbitmq":
        for name in broker_hosts[1:]:
            _step(env, name, main, "join")
        _step(env, broker_hosts[0], main, "policy")
    _wait(env, broker, float(env.settings.get("start_timeout_s") or 300))
    addrs = [h["address"] for h in hosts]
    ep = BrokerEndpoint(broker=broker, implementation=IMPLEMENTATIONS[broker],
                        version=version + (f" ({mode})" if mode else ""), nodes=len(hosts))
    if broker == "kafka":
        ep.bootstrap_servers = ",".join(f"{a}:9092" for a in addrs)
    elif broker == "pulsar":
        ep.service_url = "pulsar://" + ",".join(f"{a}:6650" for a in addrs)
        ep.http_url = f"http://{addrs[0]}:8080"
    else:
        ep.amqp_uris = [f"amqp://guest:guest@{a}:5672/%2F" for a in addrs]
    ep.durability = {"variant": variant, "honoured": True, "settings": {**broker_settings, **driver_overrides},
                     "note": f"{broker} {version} on {len(hosts)} EC2 host(s); broker-side settings written to its "
                             "configuration and the broker restarted; client-side settings applied by the driver"}
    return ep


def _wait(env, broker: str, timeout_s: float) -> None:
    script = SCRIPTS[broker]
    deadline = time.monotonic() + timeout_s
    pending = [h["name"] for h in _fleet_hosts(env, "broker")]
    while pending:
        host_by = {h.name: h for h in env.hosts()}
        pending = [n for n in pending if not host_by[n].sudo(
            f"bash {shlex.quote(env.host_dir(host_by[n]) + '/scripts/' + script)} status", timeout=30).ok]
        if pending and time.monotonic() > deadline:
            raise EnvironmentFailure(f"{broker} not serving after {timeout_s:.0f} s on {', '.join(pending)}")
        if pending:
            time.sleep(3)


def health_installed(env, broker: str) -> dict[str, Any]:
    script = SCRIPTS[broker]
    for h in env.hosts("broker"):
        res = h.sudo(f"bash {shlex.quote(env.host_dir(h) + '/scripts/' + script)} status", timeout=30)
        if not res.ok:
            raise EnvironmentFailure(f"{broker}: not serving on {h.name}: {(res.stderr or res.stdout).strip()[-300:]}")
    return {"broker": broker, "status": "serving"}


def undeploy_installed(env, broker: str) -> None:
    script = SCRIPTS[broker]
    for h in env.hosts("broker"):
        h.sudo(f"[ -f {shlex.quote(env.host_dir(h) + '/scripts/' + script)} ] && "
               f"bash {shlex.quote(env.host_dir(h) + '/scripts/' + script)} stop || true", timeout=300)
