"""What brokerbench asks of an existing cluster through its admin APIs: what it says about itself (version,
durability configuration), which of its objects carry a run's prefix, and deleting exactly those.

Client libraries are imported inside the functions (they are the worker's dependencies, installed with
brokerbench): confluent-kafka's AdminClient for Kafka (kafka-python's for the API versions each broker
supports, which librdkafka does not expose), Pulsar's admin REST API over urllib, pika (AMQP) and optionally the
management HTTP API for RabbitMQ.

The version each cluster tells (:func:`cluster_version`): Pulsar's admin API and RabbitMQ's AMQP handshake
give the release (``4.0.7``, ``3.10.8``); Kafka's protocol carries no release number, so what can be known is
the release line whose API versions each broker supports (``4.1``; ``4.1+`` when a broker supports more than
that release does: a newer one, or a vendor's additions), with KRaft's ``metadata.version`` levels beside it.
The connection's ``extra.broker_version`` stands in when the cluster cannot be asked, and refines Kafka's
release line into a release when it agrees with it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator

from ..base import EnvironmentFailure
from .connections import Cluster, redact_uri

log = logging.getLogger("brokerbench")

#: the broker configs of a Kafka cluster that say how durable it is
KAFKA_DURABILITY_CONFIGS = ("log.flush.interval.messages", "log.flush.interval.ms", "default.replication.factor",
                            "min.insync.replicas", "unclean.leader.election.enable", "num.partitions")
#: the Pulsar broker settings that say how many bookies hold an entry
PULSAR_DURABILITY_CONFIGS = ("managedLedgerDefaultEnsembleSize", "managedLedgerDefaultWriteQuorum",
                             "managedLedgerDefaultAckQuorum")
TIMEOUT_S = 30.0


def owned(name: str, prefix: str) -> bool:
    """Whether ``name`` is a run's object: it starts with ``prefix`` followed by ``-`` (never a bare match, so
    ``bb-1234abcd`` never selects ``bb-1234abcdef-...``). The one rule teardown deletes by."""
    return bool(prefix) and name.startswith(prefix + "-")


# -- kafka ---------------------------------------------------------------------------------------------------
def kafka_conf(c: Cluster) -> dict[str, Any]:
    """librdkafka configuration of the cluster's connection (secrets included: for this process only)."""
    return {"bootstrap.servers": c.bootstrap_servers, **c.client_config}


#: what librdkafka reported through error_cb, per admin client (its exceptions alone say "transport failure"
#: where the cause was a refused login)
_said: dict[int, list[str]] = {}


def _kafka_admin(c: Cluster):
    from confluent_kafka.admin import AdminClient

    said: list[str] = []
    conf: dict[str, Any] = {**kafka_conf(c), "socket.timeout.ms": int(TIMEOUT_S * 1000),
                            "error_cb": lambda err: said.append(str(err))}
    admin = AdminClient(conf)
    _said[id(admin)] = said
    return admin


@contextlib.contextmanager
def _explained(c: Cluster, admin, what: str) -> Iterator[None]:
    """A failure of ``what`` as an EnvironmentFailure naming the cluster and what the client reported (an
    authentication error, a TLS failure)."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised with the client's own reports
        with contextlib.suppress(Exception):
            admin.poll(0.1)  # error_cb is served from poll
        said = list(dict.fromkeys(_said.get(id(admin), [])))[-3:]
        raise EnvironmentFailure(f"{what} on {c.address()}: {e}" + (f"; the client reported: {'; '.join(said)}"
                                                                   if said else ""), "kafka") from None


def kafka_objects(c: Cluster) -> dict[str, list[str]]:
    """Every topic and consumer group of the cluster (internal topics included), sorted."""
    admin = _kafka_admin(c)
    with _explained(c, admin, "listing topics and consumer groups"):
        topics = sorted(admin.list_topics(timeout=TIMEOUT_S).topics)
        groups = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
    return {"topics": topics, "consumer_groups": sorted(g.group_id for g in groups.valid)}


def kafka_describe(c: Cluster) -> dict[str, Any]:
    """What the cluster says about itself: brokers, cluster id, and the durability configs of one broker."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = _kafka_admin(c)
    with _explained(c, admin, "reading the cluster's metadata"):
        md = admin.list_topics(timeout=TIMEOUT_S)
    ids = sorted(md.brokers)
    out: dict[str, Any] = {"cluster_id": md.cluster_id, "brokers": len(ids), "controller_id": md.controller_id}
    try:
        res = ConfigResource(ResourceType.BROKER, str(ids[0]))
        entries = admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result()
        out["broker_configs"] = {k: entries[k].value for k in KAFKA_DURABILITY_CONFIGS if k in entries}
        out["broker_configs_of"] = f"broker {ids[0]}"
    except Exception as e:  # noqa: BLE001 - a managed service may not let its users describe brokers
        out["broker_configs"] = None
        out["broker_configs_error"] = f"{type(e).__name__}: {e}"
    try:
        out.update(kafka_version(c))
    except Exception as e:  # noqa: BLE001 - recorded; the connection's broker_version may stand in
        out["version"] = None
        out["version_error"] = f"{type(e).__name__}: {e}"
    return out


#: the connection's security properties (librdkafka names) as kafka-python's keywords; the same mapping as the
#: worker's kafka-python driver (worker/drivers/kafka_python.security_kwargs; tests keep them the same)
_KAFKA_PYTHON_SECURITY = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
                          "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
                          "ssl.ca.location": "ssl_cafile"}


def kafka_python_security(client_config: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {_KAFKA_PYTHON_SECURITY[k]: v for k, v in client_config.items()
                           if k in _KAFKA_PYTHON_SECURITY}
    if client_config.get("ssl.endpoint.identification.algorithm", "https").lower() in ("none", ""):
        out["ssl_check_hostname"] = False
    return out


def kafka_release(broker_version: tuple[int, ...], api_versions: dict[int, tuple[int, int]]) -> str:
    """The Kafka release line a broker's ApiVersions answer says: kafka-python's inference (the newest release
    in its table whose telltale API version the broker supports), ``+`` when the broker supports an API or an
    API version that release does not (a newer release than kafka-python knows, or a vendor's additions)."""
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    release = ".".join(map(str, broker_version))
    known = BROKER_API_VERSIONS.get(tuple(broker_version))
    if known is None:
        return release
    beyond = any(int(k) not in known or hi > known[int(k)][1] for k, (_lo, hi) in api_versions.items())
    return release + ("+" if beyond else "")


def kafka_version(c: Cluster) -> dict[str, Any]:
    """The release line of every broker of the cluster, from the API versions it answers (ApiVersions, asked
    with kafka-python), and the cluster's ``metadata.version`` feature (KRaft; absent with ZooKeeper)."""
    from kafka import KafkaAdminClient

    servers = [s.strip() for s in str(c.bootstrap_servers).split(",") if s.strip()]
    admin = KafkaAdminClient(bootstrap_servers=servers, client_id="brokerbench-version",
                             request_timeout_ms=int(TIMEOUT_S * 1000), bootstrap_timeout_ms=int(TIMEOUT_S * 1000),
                             **kafka_python_security(c.client_config))
    try:
        brokers = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced"))
        releases = {}
        for b in brokers:
            data = admin.get_broker_version_data(b)
            releases[str(b)] = kafka_release(data.broker_version, data.api_versions)
        out: dict[str, Any] = {"releases": releases}
        try:
            features = admin.describe_features()
            mv = features.get("metadata.version") or {}
            if mv:
                out["metadata_version"] = {"supported": list(mv.get("supported") or []),
                                           "finalized": list(mv.get("finalized") or [])}
        except Exception as e:  # noqa: BLE001 - an older broker, or no right to describe features
            out["metadata_version_error"] = f"{type(e).__name__}: {e}"
    finally:
        admin.close()
    lines = sorted(set(releases.values()))
    # brokers of different release lines (a rolling upgrade): each named, in a value fit for a path
    out["version"] = lines[0] if len(lines) == 1 else (f"mixed({','.join(lines)})" if lines else None)
    out["version_source"] = ("Kafka's ApiVersions answer of each broker, mapped to the release line whose API "
                             "versions it supports (kafka-python's table); the protocol tells no patch release")
    return out


def kafka_delete(c: Cluster, prefix: str) -> dict[str, list[str]]:
    """Delete the run's topics and consumer groups (those :func:`owned` by ``prefix``); returns what was."""
    admin = _kafka_admin(c)
    found = kafka_objects(c)
    topics = [t for t in found["topics"] if owned(t, prefix)]
    groups = [g for g in found["consumer_groups"] if owned(g, prefix)]
    errors = []
    if groups:
        for g, fut in admin.delete_consumer_groups(groups, request_timeout=TIMEOUT_S).items():
            try:
                fut.result()
            except Exception as e:  # noqa: BLE001 - every object is tried; the errors are reported together
                errors.append(f"consumer group {g}: {e}")
    if topics:
        for t, fut in admin.delete_topics(topics, operation_timeout=TIMEOUT_S).items():
            try:
                fut.result()
            except Exception as e:  # noqa: BLE001
                errors.append(f"topic {t}: {e}")
    return {"topics": topics, "consumer_groups": groups, "errors": errors}


# -- pulsar ----------------------------------------------------------------------------------------------------
def pulsar_request(c: Cluster, method: str, path: str, body: Any = None) -> Any:
    """A call of the cluster's admin REST API (``path`` under ``/admin/v2``) with its token; the parsed JSON
    answer, or None for an empty one."""
    if not c.admin_url:
        raise EnvironmentFailure(f"connection {c.conn_id!r}: Pulsar's admin_url is needed for this")
    headers = {"Accept": "application/json"}
    if c.client_config.get("token"):
        headers["Authorization"] = f"Bearer {c.client_config['token']}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(f"{c.admin_url}/admin/v2/{path.lstrip('/')}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        said = " ".join(e.read().decode(errors="replace").split())[:300]
        raise EnvironmentFailure(f"admin API {method} {c.admin_url}/admin/v2/{path.lstrip('/')}: HTTP {e.code} "
                                 f"{e.reason}" + (f": {said}" if said else "")
                                 + (" (the connection's token was refused)" if e.code in (401, 403) else ""),
                                 "pulsar") from None
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def pulsar_objects(c: Cluster) -> dict[str, list[str]]:
    """The namespace's topics (short names; partitions of a partitioned topic as ``<t>-partition-<n>``) and its
    partitioned topics."""
    ns = c.namespace
    topics = pulsar_request(c, "GET", f"persistent/{ns}") or []
    parted = pulsar_request(c, "GET", f"persistent/{ns}/partitioned") or []
    short = lambda t: t.rsplit("/", 1)[-1]  # noqa: E731
    return {"topics": sorted(map(short, topics)), "partitioned_topics": sorted(map(short, parted))}


def pulsar_describe(c: Cluster) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, path in (("version", "brokers/version"),
                      ("namespace_persistence", f"namespaces/{c.namespace}/persistence"),
                      ("broker_configs", "brokers/configuration/runtime")):
        try:
            out[key] = pulsar_request(c, "GET", path)
        except Exception as e:  # noqa: BLE001 - a tenant token may not read broker settings
            out[key] = None
            out[f"{key}_error"] = f"{type(e).__name__}: {e}"
    if isinstance(out.get("broker_configs"), dict):
        out["broker_configs"] = {k: out["broker_configs"][k] for k in PULSAR_DURABILITY_CONFIGS
                                 if k in out["broker_configs"]}
    if out.get("version") is not None:
        out["version"] = str(out["version"])
        out["version_source"] = f"Pulsar's admin REST API: GET {c.admin_url}/admin/v2/brokers/version"
    return out


def pulsar_delete(c: Cluster, prefix: str) -> dict[str, list[str]]:
    """Delete the run's topics (with their subscriptions), partitioned ones with their partitions."""
    found = pulsar_objects(c)
    parted = [t for t in found["partitioned_topics"] if owned(t, prefix)]
    topics = [t for t in found["topics"] if owned(t, prefix) and not any(
        t.startswith(p + "-partition-") for p in parted)]
    errors = []
    for t in parted:
        try:
            pulsar_request(c, "DELETE", f"persistent/{c.namespace}/{urllib.parse.quote(t)}/partitions?force=true")
        except Exception as e:  # noqa: BLE001
            errors.append(f"partitioned topic {t}: {e}")
    for t in topics:
        try:
            pulsar_request(c, "DELETE", f"persistent/{c.namespace}/{urllib.parse.quote(t)}?force=true")
        except Exception as e:  # noqa: BLE001
            errors.append(f"topic {t}: {e}")
    return {"topics": topics, "partitioned_topics": parted, "errors": errors}


# -- rabbitmq ---------------------------------------------------------------------------------------------------
def _amqp(c: Cluster):
    import pika

    params = pika.URLParameters(str(c.amqp_uri))
    params.socket_timeout = TIMEOUT_S
    params.blocked_connection_timeout = TIMEOUT_S
    return pika.BlockingConnection(params)


def _management(c: Cluster, path: str) -> Any:
    parts = urllib.parse.urlsplit(str(c.amqp_uri))
    auth = base64.b64encode(f"{urllib.parse.unquote(parts.username or 'guest')}:"
                            f"{urllib.parse.unquote(parts.password or 'guest')}".encode()).decode()
    req = urllib.request.Request(f"{c.management_url}/api/{path}", headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
        return json.loads(r.read().decode())


def _vhost(c: Cluster) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(str(c.amqp_uri)).path.lstrip("/")) or "/"


def rabbitmq_objects(c: Cluster) -> dict[str, list[str]] | None:
    """The virtual host's queues and exchanges, from the management API; None without one (AMQP cannot list)."""
    if not c.management_url:
        return None
    vh = urllib.parse.quote(_vhost(c), safe="")
    return {"queues": sorted(q["name"] for q in _management(c, f"queues/{vh}")),
            "exchanges": sorted(x["name"] for x in _management(c, f"exchanges/{vh}") if x["name"])}


def rabbitmq_describe(c: Cluster) -> dict[str, Any]:
    conn = _amqp(c)
    try:
        props = dict(conn._impl.server_properties or {})  # what the broker sent in connection.start
    finally:
        conn.close()
    text = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in props.items() if k != "capabilities"}
    out: dict[str, Any] = {"product": text.get("product"), "version": text.get("version"),
                           "cluster_name": text.get("cluster_name"), "platform": text.get("platform")}
    if out["version"]:
        out["version_source"] = ("RabbitMQ's AMQP handshake: the server properties of connection.start "
                                 "(server_properties['version'])")
    if c.management_url:
        try:
            ov = _management(c, "overview")
            out.update({"management_version": ov.get("management_version"),
                        "rabbitmq_version": ov.get("rabbitmq_version")})
        except Exception as e:  # noqa: BLE001
            out["management_error"] = f"{type(e).__name__}: {e}"
    return out


def rabbitmq_delete(c: Cluster, prefix: str, recorded: list[str]) -> dict[str, list[str]]:
    """Delete the run's queues and exchanges: each name among the ``recorded`` ones (what the run's prepare step
    said it would create) and, with a management API, the listing's - every one checked against the prefix
    first - that exists as a queue or an exchange (a passive declare asks). Returns what was deleted."""
    import pika.exceptions

    listed = rabbitmq_objects(c) or {"queues": [], "exchanges": []}
    names = sorted(n for n in set(recorded) | set(listed["queues"]) | set(listed["exchanges"]) if owned(n, prefix))
    deleted: dict[str, list[str]] = {"queues": [], "exchanges": []}
    errors = []
    conn = _amqp(c)
    try:
        ch = conn.channel()
        for n in names:
            for kind in ("queue", "exchange"):
                try:
                    if kind == "queue":
                        ch.queue_declare(n, passive=True)
                        ch.queue_delete(n)
                    else:
                        ch.exchange_declare(n, passive=True)
                        ch.exchange_delete(n)
                    deleted[kind + "s"].append(n)
                except pika.exceptions.ChannelClosedByBroker as e:
                    if e.reply_code != 404:  # 404: there is no such queue / exchange
                        errors.append(f"{kind} {n}: {e}")
                    ch = conn.channel()
    finally:
        conn.close()
    return {**deleted, "errors": errors}


# -- any broker ---------------------------------------------------------------------------------------------------
def describe(c: Cluster) -> dict[str, Any]:
    return {"kafka": kafka_describe, "pulsar": pulsar_describe, "rabbitmq": rabbitmq_describe}[c.broker](c)


def cluster_version(c: Cluster, said: dict[str, Any]) -> tuple[str, str]:
    """The version to record for the cluster and how it was learnt, from what it said (:func:`describe`) and
    the connection's ``extra.broker_version``: the cluster's answer; for Kafka, whose answer is a release line,
    the connection's release when it is of that line; the connection's when the cluster told none; else
    ``unknown``."""
    told = str(said.get("version") or "").strip() or None
    how = str(said.get("version_source") or "asked of the cluster")
    stated = c.broker_version
    conn = f"the connection {c.conn_id!r} (extra.broker_version)"
    if told is None:
        why = said.get("version_error") or said.get("error") or "the cluster did not say"
        if stated:
            return stated, f"{conn}: the cluster could not be asked ({why})"
        return "unknown", (f"the cluster could not be asked ({why}); a connection may state it as "
                           "extra.broker_version")
    if stated is None or stated == told:
        return told, how
    if c.broker == "kafka" and stated.startswith(told.rstrip("+") + "."):
        return stated, f"{conn}, of the release line {told} that the cluster answered: {how}"
    return told, f"{how} (the connection {c.conn_id!r} states {stated!r}: the cluster's answer is recorded)"


def objects(c: Cluster) -> dict[str, list[str]] | None:
    """What the cluster holds that a run may create (topics, groups, queues...), None where it cannot be
    listed."""
    return {"kafka": kafka_objects, "pulsar": pulsar_objects, "rabbitmq": rabbitmq_objects}[c.broker](c)


def delete_owned(c: Cluster, prefix: str, recorded: list[str]) -> dict[str, Any]:
    if c.broker == "kafka":
        return kafka_delete(c, prefix)
    if c.broker == "pulsar":
        return pulsar_delete(c, prefix)
    return rabbitmq_delete(c, prefix, recorded)


def where(c: Cluster) -> str:
    return redact_uri(c.address())
