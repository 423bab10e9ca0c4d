"""The connection of an existing cluster: one Airflow connection per broker, read into a :class:`Cluster`.

A connection is found as Airflow finds it: the environment variable
``AIRFLOW_CONN_<ID>`` (JSON, or a URI) first, else Airflow's secrets backends
and metadata database (``BaseHook.get_connection``, imported only then). What
each broker reads from it (docs/external.md):

kafka
    ``extra``: client properties in librdkafka / Java names - ``bootstrap.servers``,
    ``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
    ``ssl.ca.location`` (the Java name ``ssl.truststore.location`` is not read: a PEM file is);
    ``host`` (``h1:9092,h2:9092``) and ``port`` stand for ``bootstrap.servers``, ``login`` and
    ``password`` for the SASL username and password.
pulsar
    ``extra``: ``service_url`` (``pulsar://`` or ``pulsar+ssl://``), ``admin_url`` (``http(s)://``),
    ``token``, ``tls_trust_certs_file_path``, ``namespace`` (only ``public/default`` is supported yet);
    ``host`` / ``port`` stand for the service URL, ``password`` for the token.
rabbitmq
    ``extra``: ``amqp_uri`` (``amqp://`` or ``amqps://``), ``management_url`` (optional: lists queues);
    else ``host``, ``port`` (5672), ``login``, ``password``, ``schema`` (the virtual host).
any broker
    ``extra.broker_version``: the broker's version as the connection states it, recorded when the cluster
    cannot be asked (and, for Kafka, whose protocol tells only the release line, the release it refines);
    the brokers' own metrics (:class:`ClusterMetrics`): ``extra.metrics_endpoints`` (the brokers' /metrics
    URLs, scraped every interval of a phase) and/or ``extra.prometheus_conn_id`` (a connection of the
    cluster's own Prometheus, read into a :class:`PrometheusConnection`) with ``extra.prometheus_labels``
    (the matchers that select this cluster's series there).

Secrets (SASL password, token, AMQP password) never go into a record: the
endpoint the workers get names them as ``${env:BROKERBENCH_SECRET_<...>}``
and the environment gives their values to the client processes only
(:func:`secret_environ`).
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..base import EnvironmentFailure

#: the Airflow connection of each broker when the settings name none
DEFAULT_CONNECTIONS = {"kafka": "brokerbench_kafka", "pulsar": "brokerbench_pulsar",
                       "rabbitmq": "brokerbench_rabbitmq"}
#: the Kafka client properties passed through to the client libraries (librdkafka names)
KAFKA_CLIENT_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location",
                     "ssl.endpoint.identification.algorithm")
KAFKA_SECRET_KEYS = ("sasl.password",)
SECRET_PREFIX = "BROKERBENCH_SECRET_"
#: the keys of ``extra`` that say where the cluster's own metrics are (any broker: :class:`ClusterMetrics`)
METRICS_KEYS = ("metrics_endpoints", "prometheus_conn_id", "prometheus_labels")
#: the role each broker's endpoints have unless an endpoint says (include/metrics/<broker>.yaml's roles)
DEFAULT_ROLE = {"kafka": "broker", "pulsar": "broker", "rabbitmq": "node"}
ROLES = {"kafka": ("broker",), "pulsar": ("broker", "bookie"), "rabbitmq": ("node",)}


class ExternalConnectionError(EnvironmentFailure):
    """A connection that is missing or cannot describe a cluster; names the connection id."""

    def __init__(self, message: str, conn_id: str):
        super().__init__(f"connection {conn_id!r}: {message}")
        self.conn_id = conn_id


@dataclass
class Cluster:
    """An existing cluster of one broker, as its connection describes it."""

    broker: str
    conn_id: str
    bootstrap_servers: str | None = None  # kafka
    service_url: str | None = None  # pulsar
    admin_url: str | None = None  # pulsar
    namespace: str = "public/default"  # pulsar
    amqp_uri: str | None = None  # rabbitmq, with the password
    management_url: str | None = None  # rabbitmq
    #: client properties (kafka: librdkafka names; pulsar: token, tls_trust_certs_file_path), secrets included
    client_config: dict[str, str] = field(default_factory=dict)
    #: the version the connection states (``extra.broker_version``), None when it states none
    broker_version: str | None = None
    #: where the cluster's own metrics are read (``extra.metrics_endpoints``, ``extra.prometheus_conn_id``)
    metrics: "ClusterMetrics" = field(default_factory=lambda: ClusterMetrics())

    def address(self) -> str:
        """Where the cluster is, without credentials: the lease scope and the records use it."""
        if self.broker == "kafka":
            return ",".join(sorted(s.strip() for s in (self.bootstrap_servers or "").split(",") if s.strip()))
        if self.broker == "pulsar":
            return str(self.service_url)
        return redact_uri(str(self.amqp_uri), keep_user=False)

    def secrets(self) -> dict[str, str]:
        """The secret values of this cluster, by the environment variable the workers read them from."""
        out = {}
        if self.broker == "kafka":
            for k in KAFKA_SECRET_KEYS:
                if self.client_config.get(k):
                    out[_secret_var(self.conn_id, k)] = self.client_config[k]
        elif self.broker == "pulsar" and self.client_config.get("token"):
            out[_secret_var(self.conn_id, "token")] = self.client_config["token"]
        elif self.broker == "rabbitmq":
            pw = urllib.parse.urlsplit(str(self.amqp_uri)).password
            if pw:
                out[_secret_var(self.conn_id, "password")] = pw  # percent-encoded, as it goes back into the URI
        return out

    def client_config_for_workers(self) -> dict[str, str]:
        """:attr:`client_config` with each secret replaced by its ``${env:...}`` reference."""
        cfg = dict(self.client_config)
        for k in (*KAFKA_SECRET_KEYS, "token"):
            if cfg.get(k):
                cfg[k] = "${env:" + _secret_var(self.conn_id, k) + "}"
        return cfg

    def amqp_uri_for_workers(self) -> str:
        """The AMQP URI with its password replaced by its ``${env:...}`` reference."""
        parts = urllib.parse.urlsplit(str(self.amqp_uri))
        if not parts.password:
            return str(self.amqp_uri)
        ref = "${env:" + _secret_var(self.conn_id, "password") + "}"
        netloc = f"{parts.username}:{ref}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _secret_var(conn_id: str, key: str) -> str:
    return SECRET_PREFIX + re.sub(r"[^A-Z0-9]+", "_", f"{conn_id}_{key}".upper())


def redact_uri(uri: str, keep_user: bool = True) -> str:
    """``amqp://user:***@host:5672/vh`` (or without the user): a URI fit for a log line or a record."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.hostname:
        return uri
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    user = f"{parts.username}:***@" if keep_user and parts.username else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=user + host))


def read_connection(conn_id: str) -> dict[str, Any]:
    """The connection as a dict (conn_type, host, port, login, password, schema, extra: a dict)."""
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw is not None:
        raw = raw.strip()
        if raw.startswith("{"):
            try:
                d = json.loads(raw)
            except ValueError as e:
                raise ExternalConnectionError(f"AIRFLOW_CONN_{conn_id.upper()} is not valid JSON: {e}", conn_id) from None
        else:
            d = _from_uri(raw)
    else:
        d = _from_airflow(conn_id)
    extra = d.get("extra") or {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra) if extra.strip() else {}
        except ValueError as e:
            raise ExternalConnectionError(f"extra is not valid JSON: {e}", conn_id) from None
    if not isinstance(extra, dict):
        raise ExternalConnectionError("extra must be a JSON object", conn_id)
    return {**d, "extra": extra}


def _from_uri(uri: str) -> dict[str, Any]:
    parts = urllib.parse.urlsplit(uri)
    extra = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query).items()}
    if "__extra__" in extra:
        extra = json.loads(extra["__extra__"])
    return {"conn_type": parts.scheme, "host": parts.hostname, "port": parts.port,
            "login": urllib.parse.unquote(parts.username) if parts.username else None,
            "password": urllib.parse.unquote(parts.password) if parts.password else None,
            "schema": urllib.parse.unquote(parts.path.lstrip("/")) or None, "extra": extra}


def _from_airflow(conn_id: str) -> dict[str, Any]:
    # Airflow only when the connection is not in the environment: the environment loads without it
    try:
        from airflow.sdk import BaseHook

        c = BaseHook.get_connection(conn_id)
    except Exception as e:  # noqa: BLE001 - not defined, or no Airflow here: said with the way to define it
        raise ExternalConnectionError(
            f"not defined ({type(e).__name__}: {e}); define it in Airflow or as the environment variable "
            f"AIRFLOW_CONN_{conn_id.upper()} (JSON, see docs/external.md)", conn_id) from None
    return {"conn_type": c.conn_type, "host": c.host, "port": c.port, "login": c.login, "password": c.password,
            "schema": c.schema, "extra": c.extra_dejson or {}}


#: the longest ``extra.broker_version`` (the param broker_versions' bound)
MAX_VERSION_CHARS = 40


def stated_version(conn_id: str, extra: dict[str, Any]) -> str | None:
    """``extra.broker_version``: the version the connection states, checked (text, at most 40 characters)."""
    value = extra.get("broker_version")
    if value in (None, ""):
        return None
    text = str(value).strip()
    if not text or len(text) > MAX_VERSION_CHARS or any(ch.isspace() for ch in text):
        raise ExternalConnectionError(f"extra.broker_version must be a version without spaces, at most "
                                      f"{MAX_VERSION_CHARS} characters (got {value!r})", conn_id)
    return text


def cluster_from(broker: str, conn_id: str, conn: dict[str, Any]) -> Cluster:
    """A :class:`Cluster` of ``broker`` from a connection dict (:func:`read_connection`); raises naming what is
    missing."""
    cluster = _cluster_from(broker, conn_id, conn)
    extra = {str(k): v for k, v in (conn.get("extra") or {}).items()}
    cluster.broker_version = stated_version(conn_id, extra)
    cluster.metrics = cluster_metrics(broker, conn_id, extra)
    return cluster


class MetricsEndpoint(BaseModel):
    """One of the cluster's own metrics endpoints (Prometheus text format), scraped every interval of a phase."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="http(s)://<node>:<port>/metrics")
    #: broker (Kafka, Pulsar), bookie (Pulsar), node (RabbitMQ); default: the broker's main role
    role: str | None = None
    #: the node's name in the records; default: the URL's host:port
    node: str | None = None

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")) or not urllib.parse.urlsplit(v).hostname:
            raise ValueError(f"an endpoint's url is http(s)://<host>:<port>/<path> (got {v!r})")
        return v


class ClusterMetrics(BaseModel):
    """Where a cluster's own metrics are read during each phase: its endpoints, its Prometheus, or both."""

    model_config = ConfigDict(extra="forbid")

    metrics_endpoints: list[MetricsEndpoint] = Field(default_factory=list)
    #: the Airflow connection of the Prometheus that scrapes the cluster (:class:`PrometheusConnection`)
    prometheus_conn_id: str | None = None
    #: label matchers that select this cluster's series in that Prometheus (e.g. {"job": "msk-staging"})
    prometheus_labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("metrics_endpoints", mode="before")
    @classmethod
    def _urls(cls, v: Any) -> Any:
        if isinstance(v, str):  # a JSON list, or one URL (or several, comma-separated)
            v = json.loads(v) if v.strip().startswith("[") else [u.strip() for u in v.split(",") if u.strip()]
        return [{"url": e} if isinstance(e, str) else e for e in (v or [])]

    @field_validator("prometheus_labels", mode="before")
    @classmethod
    def _labels(cls, v: Any) -> Any:
        return json.loads(v) if isinstance(v, str) and v.strip() else (v or {})

    @field_validator("prometheus_labels")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k)]
        if bad:
            raise ValueError(f"not a Prometheus label name: {', '.join(bad)}")
        return v

    @property
    def configured(self) -> bool:
        return bool(self.metrics_endpoints or self.prometheus_conn_id)


def cluster_metrics(broker: str, conn_id: str, extra: dict[str, Any]) -> ClusterMetrics:
    """``extra``'s metrics keys (:data:`METRICS_KEYS`) checked; raises naming the connection and the key."""
    try:
        m = ClusterMetrics.model_validate({k: extra[k] for k in METRICS_KEYS if extra.get(k) not in (None, "")})
    except (ValidationError, ValueError) as e:
        if isinstance(e, ValidationError):
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            e = f"{where}: {err['msg']}"  # type: ignore[assignment]
        raise ExternalConnectionError(f"extra.{e}", conn_id) from None
    for ep in m.metrics_endpoints:
        if ep.role is not None and ep.role not in ROLES[broker]:
            raise ExternalConnectionError(f"extra.metrics_endpoints: role {ep.role!r} of {ep.url} is not one of "
                                          f"{broker}'s ({', '.join(ROLES[broker])})", conn_id)
    return m


class PrometheusConnection(BaseModel):
    """A Prometheus server (or any server of its HTTP API: Thanos, Mimir, VictoriaMetrics), from its Airflow
    connection: ``extra.url`` (``https://host/prefix``) or ``schema`` (http, https), ``host`` and ``port``
    (9090); ``login`` / ``password`` for basic authentication, or ``extra.token`` (a bearer token)."""

    model_config = ConfigDict(extra="forbid")

    conn_id: str
    #: the API's base URL, without credentials (``<url>/api/v1/query``)
    url: str
    login: str | None = None
    password: str | None = Field(None, repr=False)
    token: str | None = Field(None, repr=False)
    #: a PEM file of the CA that signed an https server's certificate
    ca_file: str | None = None
    timeout_s: float = Field(10.0, gt=0)

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.login:
            import base64

            pair = f"{self.login}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}


#: the keys of a Prometheus connection's extra
PROMETHEUS_EXTRA = ("url", "token", "ca_file", "timeout_s")


def prometheus_from(conn_id: str, conn: dict[str, Any]) -> PrometheusConnection:
    """A :class:`PrometheusConnection` from a connection dict (:func:`read_connection`); raises naming it."""
    extra = {str(k): v for k, v in (conn.get("extra") or {}).items()}
    unknown = sorted(set(extra) - set(PROMETHEUS_EXTRA))
    if unknown:
        raise ExternalConnectionError(f"extra {', '.join(unknown)}: a Prometheus connection reads "
                                      f"{', '.join(PROMETHEUS_EXTRA)}", conn_id)
    url = extra.get("url")
    if not url:
        if not conn.get("host"):
            raise ExternalConnectionError("a Prometheus connection needs host (and port, schema http or https) "
                                          "or extra.url", conn_id)
        scheme = str(conn.get("schema") or "http").lower()
        if scheme not in ("http", "https"):
            raise ExternalConnectionError(f"schema {scheme!r}: a Prometheus connection's schema is http or https",
                                          conn_id)
        url = f"{scheme}://{conn['host']}:{conn.get('port') or 9090}"
    parts = urllib.parse.urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExternalConnectionError(f"extra.url must be http(s)://<host>[:<port>][/<prefix>] (got "
                                      f"{redact_uri(str(url))!r})", conn_id)
    if parts.password or parts.username:
        raise ExternalConnectionError("the Prometheus URL carries credentials: give them as login / password "
                                      "(or extra.token), kept out of every record", conn_id)
    try:
        return PrometheusConnection(conn_id=conn_id, url=str(url).rstrip("/"), login=conn.get("login") or None,
                                    password=conn.get("password") or None, token=extra.get("token") or None,
                                    ca_file=extra.get("ca_file") or None,
                                    **({"timeout_s": extra["timeout_s"]} if extra.get("timeout_s") else {}))
    except ValidationError as e:
        err = e.errors()[0]
        raise ExternalConnectionError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}", conn_id) from None


def prometheus_for(cluster: Cluster) -> PrometheusConnection | None:
    """The Prometheus connection the cluster's connection names (``extra.prometheus_conn_id``), or None."""
    conn_id = cluster.metrics.prometheus_conn_id
    if not conn_id:
        return None
    return prometheus_from(conn_id, read_connection(conn_id))


def _cluster_from(broker: str, conn_id: str, conn: dict[str, Any]) -> Cluster:
    extra = {str(k): v for k, v in (conn.get("extra") or {}).items()}
    host, port = conn.get("host"), conn.get("port")
    if broker == "kafka":
        servers = extra.get("bootstrap.servers") or extra.get("bootstrap_servers")
        if not servers and host:
            servers = ",".join(h if ":" in h or not port else f"{h}:{port}" for h in str(host).split(","))
        if not servers:
            raise ExternalConnectionError("a Kafka connection needs extra.bootstrap.servers (or host)", conn_id)
        cfg = {k: str(extra[k]) for k in KAFKA_CLIENT_KEYS if extra.get(k) not in (None, "")}
        if "sasl.mechanisms" in extra and "sasl.mechanism" not in cfg:
            cfg["sasl.mechanism"] = str(extra["sasl.mechanisms"])
        if conn.get("login") and "sasl.username" not in cfg:
            cfg["sasl.username"] = str(conn["login"])
        if conn.get("password") and "sasl.password" not in cfg:
            cfg["sasl.password"] = str(conn["password"])
        unknown = sorted(set(extra) - set(KAFKA_CLIENT_KEYS) - set(METRICS_KEYS)
                         - {"bootstrap.servers", "bootstrap_servers", "sasl.mechanisms", "broker_version"})
        if unknown:
            raise ExternalConnectionError(f"extra {', '.join(unknown)}: not passed to the clients; brokerbench passes "
                                   f"{', '.join(KAFKA_CLIENT_KEYS)}", conn_id)
        proto = cfg.get("security.protocol", "PLAINTEXT").upper()
        if proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ExternalConnectionError(f"security.protocol {proto!r} is not PLAINTEXT, SSL, SASL_PLAINTEXT or "
                                   "SASL_SSL", conn_id)
        if proto.startswith("SASL") and cfg.get("sasl.mechanism", "PLAIN").upper() not in (
                "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ExternalConnectionError(f"sasl.mechanism {cfg['sasl.mechanism']!r}: brokerbench passes PLAIN, "
                                   "SCRAM-SHA-256 and SCRAM-SHA-512 (both client libraries take them)", conn_id)
        return Cluster("kafka", conn_id, bootstrap_servers=str(servers), client_config=cfg)
    if broker == "pulsar":
        service = extra.get("service_url") or (f"pulsar://{host}:{port or 6650}" if host else None)
        if not service or not str(service).startswith(("pulsar://", "pulsar+ssl://")):
            raise ExternalConnectionError("a Pulsar connection needs extra.service_url (pulsar:// or pulsar+ssl://) "
                                   f"(got {service!r})", conn_id)
        admin = extra.get("admin_url")
        if not admin:
            raise ExternalConnectionError("a Pulsar connection needs extra.admin_url (http:// or https://): the "
                                          "run's topics are listed and deleted through the admin API", conn_id)
        if not str(admin).startswith(("http://", "https://")):
            raise ExternalConnectionError(f"extra.admin_url must be http:// or https:// (got {admin!r})", conn_id)
        namespace = str(extra.get("namespace") or "public/default")
        if namespace != "public/default":
            raise ExternalConnectionError(f"extra.namespace {namespace!r}: the run's topics go to public/default; "
                                   "another namespace is not supported yet (docs/external.md)", conn_id)
        cfg = {}
        token = extra.get("token") or conn.get("password")
        if token:
            cfg["token"] = str(token)
        if extra.get("tls_trust_certs_file_path"):
            cfg["tls_trust_certs_file_path"] = str(extra["tls_trust_certs_file_path"])
        return Cluster("pulsar", conn_id, service_url=str(service), admin_url=str(admin).rstrip("/"),
                       namespace=namespace, client_config=cfg)
    if broker == "rabbitmq":
        uri = extra.get("amqp_uri")
        if not uri:
            if not host:
                raise ExternalConnectionError("a RabbitMQ connection needs extra.amqp_uri (or host)", conn_id)
            cred = ""
            if conn.get("login"):
                cred = urllib.parse.quote(str(conn["login"]), safe="")
                if conn.get("password"):
                    cred += ":" + urllib.parse.quote(str(conn["password"]), safe="")
                cred += "@"
            vhost = "/" + urllib.parse.quote(str(conn["schema"]), safe="") if conn.get("schema") else ""
            uri = f"amqp://{cred}{host}:{port or 5672}{vhost}"
        if not str(uri).startswith(("amqp://", "amqps://")):
            raise ExternalConnectionError(f"extra.amqp_uri must be amqp:// or amqps:// (got {redact_uri(str(uri))!r})",
                                   conn_id)
        mgmt = extra.get("management_url")
        return Cluster("rabbitmq", conn_id, amqp_uri=str(uri),
                       management_url=str(mgmt).rstrip("/") if mgmt else None)
    raise ExternalConnectionError(f"unknown broker {broker!r}", conn_id)


def cluster_for(broker: str, connections: Mapping[str, str] | None = None) -> Cluster:
    """The cluster of ``broker``: its connection (named in ``connections``, else the default id) read and
    checked."""
    conn_id = (connections or {}).get(broker) or DEFAULT_CONNECTIONS[broker]
    return cluster_from(broker, conn_id, read_connection(conn_id))


def secret_environ(clusters: list[Cluster]) -> dict[str, str]:
    """The environment variables the client processes need: every secret of ``clusters``."""
    out: dict[str, str] = {}
    for c in clusters:
        out.update(c.secrets())
    return out
