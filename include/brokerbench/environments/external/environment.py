"""The ``external`` environment: brokers that already exist, given by Airflow connections (docs/external.md).

Nothing is provisioned, deployed, restarted or tuned: ``provision`` and
``setup_hosts`` record this machine (the clients' host), ``deploy`` returns the
cluster's endpoint with what the cluster says about itself (its version asked of it, or given by the
connection: ``cluster.cluster_version``), ``undeploy`` does
nothing. Workers run on this machine (:class:`~..machine.runtime.Machine`'s
worker processes), or with ``clients: aws`` on a client fleet of the aws
environment's (:class:`.aws_clients.AwsClientFleet`: provision creates the
client instances, setup_hosts sets them up, teardown terminates them by tag);
secrets reach the workers as environment variables only (on a client host: the
agent's stdin, then its environment).

The run's objects on the cluster (topics, subscriptions, queues, exchanges,
consumer groups) all carry the run's prefix (:func:`brokerbench.util.run_prefix`);
teardown deletes exactly those - found by listing the cluster, and for
RabbitMQ without a management API by the names the prepare step recorded
before it created them - also from a fresh object after a failure or a kill.

State directory (the setting ``state_dir``, else ``$BROKERBENCH_HOME/state/<run_key>``):
``clusters.json`` (broker -> connection id and address, written at deploy),
``before-<broker>.json`` (the cluster's objects before the run's first deploy),
``created-<broker>.json`` (names the prepare step creates), ``teardown.json``,
``metrics/<phase label>.brokers.json`` (where the phase's broker metrics are read) and ``.brokers.jsonl`` (the
scraper's file of the connection's ``metrics_endpoints``).

The brokers' own metrics of each phase come from the connection of the phase's broker (the one deployed
last: brokers run one after the other): its ``metrics_endpoints``, scraped every ``metrics_interval_s`` by
the scraper of :mod:`..brokermetrics` on this machine, and / or its Prometheus (``prometheus_conn_id``),
read after the phase over the phase's window (:mod:`.prometheus`); both land as
``<dest>/<host>.jsonl`` files of the scraper's format.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from pydantic import ValidationError
from typing_extensions import override

from ...util import run_prefix, safe_name
from .. import brokermetrics
from ..base import BrokerEndpoint, Environment, EnvironmentFailure, LocalHost
from ..hostsetup import describe_host
from ..machine.runtime import Machine
from ..processes import state_dir_for, write_json
from ..settings import ExternalSettings
from . import cluster as admin
from .connections import DEFAULT_ROLE, Cluster, cluster_for, prometheus_for, secret_environ

if TYPE_CHECKING:
    from .aws_clients import AwsClientFleet

log = logging.getLogger("brokerbench")


class ExternalSettingsError(EnvironmentFailure):
    """An external setting that cannot work; ``setting`` is its dotted name."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


def external_settings(settings: ExternalSettings | Mapping[str, Any] | None) -> ExternalSettings:
    """``settings`` checked against :class:`ExternalSettings` (a model as it is); a bad one raises
    ExternalSettingsError naming it."""
    if isinstance(settings, ExternalSettings):
        return settings
    try:
        return ExternalSettings.model_validate(dict(settings or {}))
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        raise ExternalSettingsError(f"{name}: {err['msg']} (got {err.get('input')!r})", name) from None


def lease_scope(settings: ExternalSettings | Mapping[str, Any], brokers: list[str]) -> str:
    """The lease scope of a run on external clusters: ``external@`` and the clusters' addresses (no
    credentials), so two runs on the same cluster measure one at a time and runs on other clusters do not
    wait."""
    s = external_settings(settings)
    return "external@" + "+".join(sorted(f"{b}={cluster_for(b, s.connections).address()}"
                                         for b in sorted(set(brokers))))


class ExternalEnvironment(Environment[ExternalSettings]):
    """Clusters given by connection; clients on this machine or an aws client fleet (setting ``clients``).
    ``brokers``: the run's brokers (from the plan; a fresh object for teardown finds them in the state
    directory); ``plan``: for the client fleet's cost estimate."""

    name = "external"

    def __init__(self, run_key: str, settings: ExternalSettings | Mapping[str, Any] | None = None,
                 brokers: list[str] | None = None, plan: Any | None = None):
        super().__init__(run_key, external_settings(settings))  # ExternalSettingsError naming a bad setting
        self.plan = plan
        self.state_dir = state_dir_for(run_key, self.settings.state_dir)
        self.brokers = list(brokers or [])
        self.prefix = run_prefix(run_key)
        self.host = LocalHost("localhost", "client")
        self._clusters: dict[str, Cluster] = {}
        self._fleet: AwsClientFleet | None = None
        #: the JVM engine's build on this machine, for workers on aws client hosts (provide_client_engine)
        self.client_engine: str | None = None

    @property
    def aws_clients(self) -> bool:
        return self.settings.clients == "aws"

    def client_fleet(self) -> AwsClientFleet:
        """The aws client fleet (``clients: aws``); its state under ``<state dir>/aws-clients``."""
        if self._fleet is None:
            from .aws_clients import AwsClientFleet

            self._fleet = AwsClientFleet(self.run_key, {**self.settings.aws,
                                                        "state_dir": str(self.state_dir / "aws-clients")},
                                         plan=self.plan)
        return self._fleet

    # -- clusters -----------------------------------------------------------------------------------------
    def cluster(self, broker: str) -> Cluster:
        if broker not in self._clusters:
            self._clusters[broker] = cluster_for(broker, self.settings.connections)
        return self._clusters[broker]

    def _recorded_clusters(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads((self.state_dir / "clusters.json").read_text())
        except (OSError, ValueError):
            return {}

    def _machine(self) -> Machine:
        return Machine(self.run_key, {"state_dir": str(self.state_dir)})

    @contextlib.contextmanager
    def client_secrets(self) -> Iterator[None]:
        """The clusters' secrets in this process's environment for the block (the workers it starts inherit
        them; an in-process client reads them the same way)."""
        brokers = sorted(set(self.brokers) | set(self._recorded_clusters()))
        extra = secret_environ([self.cluster(b) for b in brokers])
        before = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    # -- provision / host setup: nothing to create or change, but the aws client fleet (clients: aws) ----------
    def provision(self) -> dict[str, Any]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.aws_clients:
            clients = self.client_fleet().provision()
            fleet = {**clients, "environment": self.name, "state_dir": str(self.state_dir),
                     "clusters": {b: {"connection": self.cluster(b).conn_id, "address": admin.where(self.cluster(b))}
                                  for b in self.brokers},
                     "note": "external clusters: only the client instances are provisioned (aws client fleet)"}
            write_json(self.state_dir / "fleet.json", fleet)
            return fleet
        fleet = {"environment": self.name, "run_key": self.run_key, "state_dir": str(self.state_dir),
                 "hosts": [{**self.host.describe(), "address": "127.0.0.1", "roles": ["client"]}],
                 "clusters": {b: {"connection": self.cluster(b).conn_id, "address": admin.where(self.cluster(b))}
                              for b in self.brokers},
                 "note": "external clusters: nothing provisioned; the clients run on this machine"}
        write_json(self.state_dir / "fleet.json", fleet)
        return fleet

    def setup_hosts(self) -> dict[str, Any]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.aws_clients:
            result = {**self.client_fleet().setup_hosts(), "environment": self.name}
            write_json(self.state_dir / "hosts.json", result)
            return result
        record = {"name": self.host.name, "role": "client",
                  "tuned": {"applied": False, "reason": "external environment: brokerbench changes no host"},
                  "time_sync": {"clock_offset_ms": 0.0, "source": "clients on one host", "synchronised": True,
                                "note": "producers and consumers run on this machine and read the same clock"},
                  "disk": {"note": "external environment: the brokers' disks are not brokerbench's to measure"},
                  "description": describe_host(self.host)}
        result = {"environment": self.name, "hosts": [record]}
        write_json(self.state_dir / "hosts.json", result)
        return result

    # -- brokers ------------------------------------------------------------------------------------------------
    def deploy(self, broker: str, broker_settings: dict[str, Any], variant: str,
               driver_overrides: dict[str, Any], *, jvm_options: list[str] | None = None) -> BrokerEndpoint:
        """No deploy: the cluster's endpoint and what it says about itself. Broker-side settings and JVM options
        are refused (validation refuses them first, naming the variant)."""
        if broker_settings:
            raise EnvironmentFailure(f"variant {variant!r} needs broker-side settings "
                                     f"({', '.join(sorted(broker_settings))}) that the external environment "
                                     f"cannot apply", broker)
        if jvm_options:
            raise EnvironmentFailure(f"variant {variant!r} needs JVM options ({' '.join(jvm_options)}) that the "
                                     f"external environment cannot apply: it never restarts a cluster", broker)
        c = self.cluster(broker)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        clusters = self._recorded_clusters()
        clusters[broker] = {"connection": c.conn_id, "address": admin.where(c), "deployed_at": time.time()}
        write_json(self.state_dir / "clusters.json", clusters)
        before = self.state_dir / f"before-{broker}.json"
        if not before.exists():  # the first deploy of the run: what was there before it created anything
            write_json(before, {"objects": admin.objects(c)})
        try:
            said = admin.describe(c)
        except Exception as e:  # noqa: BLE001 - a health check follows; the record says what failed
            said = {"error": f"{type(e).__name__}: {e}"}
        version, version_source = admin.cluster_version(c, said)
        applied = "; ".join(f"{k}: {v}" for k, v in sorted(driver_overrides.items())) or "none"
        durability = {
            "variant": variant, "honoured": True, "settings": driver_overrides, "cluster": said,
            "note": f"external cluster {admin.where(c)} (connection {c.conn_id!r}): the variant's client and "
                    f"topic settings are applied per topic ({applied}); the cluster's own configuration is "
                    f"recorded as it is, never changed"}
        ep = BrokerEndpoint(broker=broker, implementation="external", version=version, version_source=version_source,
                            durability=durability, client_config=c.client_config_for_workers())
        log.info("%s: external cluster %s is version %s (%s)", broker, admin.where(c), version, version_source)
        clusters[broker]["version"] = version
        write_json(self.state_dir / "clusters.json", clusters)
        if broker == "kafka":
            ep.bootstrap_servers = c.bootstrap_servers
        elif broker == "pulsar":
            ep.service_url, ep.http_url = c.service_url, c.admin_url
        else:
            ep.amqp_uris = [c.amqp_uri_for_workers()]
        return ep

    def health(self, broker: str) -> dict[str, Any]:
        c = self.cluster(broker)
        try:
            admin.describe(c) if broker == "rabbitmq" else admin.objects(c)
        except Exception as e:  # noqa: BLE001 - said by broker and address
            raise EnvironmentFailure(f"external cluster {admin.where(c)} does not serve: {type(e).__name__}: {e}",
                                     broker) from None
        return {"broker": broker, "implementation": "external", "status": "serving", "address": admin.where(c)}

    def undeploy(self, broker: str) -> None:
        """Nothing to stop; needs no connection (it also runs for brokers a run did not pick)."""
        where = self._recorded_clusters().get(broker, {}).get("address")
        if where:
            log.info("%s: external cluster %s left running (not brokerbench's to stop)", broker, where)

    def record_created(self, broker: str, names: list[str]) -> None:
        """The names the prepare step is about to create on ``broker``'s cluster, kept for teardown."""
        path = self.state_dir / f"created-{broker}.json"
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = []
        write_json(path, sorted(set(known) | set(names)))

    # -- workers: processes on this machine, or on the aws client hosts ----------------------------------------
    def provide_client_engine(self, build_dir: str) -> None:
        self.client_engine = build_dir  # for the aws client hosts (the machine's workers find it here)

    def run_workers(self, jobs: list[dict[str, Any]], out_paths: list[str],
                    timeout_s: float) -> list[dict[str, Any]]:
        if self.aws_clients:
            fleet = self.client_fleet()
            if self.client_engine is not None:
                fleet.provide_client_engine(self.client_engine)
            brokers = sorted(set(self.brokers) | set(self._recorded_clusters()))
            fleet.worker_environ = secret_environ([self.cluster(b) for b in brokers])
            try:
                return fleet.run_workers(jobs, out_paths, timeout_s)
            finally:
                fleet.worker_environ = {}
        with self.client_secrets():
            return self._machine().run_workers(jobs, out_paths, timeout_s)

    def stop_workers(self) -> list[str]:
        if self.aws_clients:
            return self.client_fleet().stop_workers()
        return self._machine().stop_workers()

    @override
    def before_phase(self, phase: str, label: str) -> dict[str, Any] | None:
        """aws clients: the client hosts' metrics samplers started (the aws environment's)."""
        return self.client_fleet().before_phase(phase, label) if self.aws_clients else None

    @override
    def after_phase(self, phase: str, label: str, dest_dir: str) -> dict[str, Any]:
        """aws clients: the client hosts' samples copied to ``dest_dir``."""
        return self.client_fleet().after_phase(phase, label, dest_dir) if self.aws_clients else {}

    # -- the brokers' own metrics: the connection's endpoints and / or its Prometheus ------------------------------
    def _phase_broker(self) -> tuple[str, dict[str, Any]] | None:
        """The broker whose phases run now: the one deployed last (one broker after the other)."""
        recorded = self._recorded_clusters()
        if not recorded:
            return None
        broker = max(recorded, key=lambda b: float(recorded[b].get("deployed_at") or 0))
        return broker, recorded[broker]

    @override
    def start_broker_metrics(self, label: str) -> dict[str, Any] | None:
        """The scraper of the connection's ``metrics_endpoints`` started, and the phase's start kept for its
        Prometheus (``prometheus_conn_id``, read by :meth:`stop_broker_metrics`); None when the connection
        names neither."""
        current = self._phase_broker()
        if current is None:
            return None
        broker, recorded = current
        try:
            c = self.cluster(broker)
        except EnvironmentFailure as e:  # the phase says it; metrics never stop a run
            return {"broker": broker, "error": str(e)}
        if not c.metrics.configured:
            return None
        version = str(recorded.get("version") or "")
        rec: dict[str, Any] = {"broker": broker, "connection": c.conn_id, "start": time.time(), "targets": []}
        metrics_dir = self.state_dir / "metrics"
        metrics_dir.mkdir(parents=True, exist_ok=True)
        if c.metrics.metrics_endpoints:
            targets = [brokermetrics.Target(broker, ep.role or DEFAULT_ROLE[broker],
                                            ep.node or urllib.parse.urlsplit(ep.url).netloc, ep.url, "external",
                                            version) for ep in c.metrics.metrics_endpoints]
            try:
                started = brokermetrics.start(str(self.state_dir), str(metrics_dir / f"{label}.brokers.jsonl"),
                                              self.host.name, self.settings.metrics_interval_s, targets,
                                              watch_pid=os.getpid())
                rec.update(scraper=started["out"], targets=started["targets"])
            except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a run
                rec["error"] = f"{type(e).__name__}: {e}"
        if c.metrics.prometheus_conn_id:
            rec["prometheus"] = c.metrics.prometheus_conn_id
        write_json(metrics_dir / f"{label}.brokers.json", rec)
        return rec

    @override
    def stop_broker_metrics(self, label: str, dest_dir: str) -> dict[str, Any]:
        """The scraper stopped, its file copied; the Prometheus' samples of the phase written beside it."""
        try:
            rec = json.loads((self.state_dir / "metrics" / f"{label}.brokers.json").read_text())
        except (OSError, ValueError):
            return {}
        files: dict[str, Any] = {}
        dest = Path(dest_dir)
        dest.mkdir(parents=True, exist_ok=True)
        if rec.get("scraper"):
            brokermetrics.stop(rec["scraper"])
            if Path(rec["scraper"]).exists():
                shutil.copyfile(rec["scraper"], dest / f"{self.host.name}.jsonl")
                files[self.host.name] = str(dest / f"{self.host.name}.jsonl")
        if rec.get("prometheus"):
            from .prometheus import write_phase

            broker = rec["broker"]
            c = self.cluster(broker)
            host = safe_name(f"prometheus-{rec['prometheus']}")
            try:
                prom = prometheus_for(c)
                if prom is None:
                    raise EnvironmentFailure(f"connection {c.conn_id!r} names no prometheus_conn_id any more")
                written = write_phase(str(dest / f"{host}.jsonl"), host, prom, broker,
                                      c.metrics.prometheus_labels, float(rec["start"]),
                                      interval=self.settings.metrics_interval_s,
                                      version=str(self._recorded_clusters().get(broker, {}).get("version") or ""))
                files[host] = written["file"]
                if written.get("error"):
                    log.warning("%s: broker metrics of %s: %s", broker, label, written["error"])
                else:
                    log.info("%s: broker metrics of %s from Prometheus %r: %d scrapes of %s", broker, label,
                             rec["prometheus"], written["scrapes"], ", ".join(written["targets"]))
            except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a run
                log.warning("%s: broker metrics of %s from Prometheus %r not read: %s: %s", broker, label,
                            rec["prometheus"], type(e).__name__, e)
        return files

    @override
    def stop_leftovers_of(self, run_key: str) -> list[dict[str, Any]]:
        """A dead run on the same cluster: its teardown (its workers here, its objects on the cluster)."""
        record = ExternalEnvironment(run_key, self.settings).teardown()
        return list(record.get("stopped", []))

    # -- teardown ------------------------------------------------------------------------------------------------
    def teardown(self) -> dict[str, Any]:
        """Stop the run's workers; delete exactly the run's objects (the prefix) on every cluster it deployed
        to; say what is left that was not there before (nothing, when all went well)."""
        record: dict[str, Any] = {"environment": self.name, "state_dir": str(self.state_dir), "prefix": self.prefix,
                                  "stopped": [], "errors": [], "clusters": {}}
        existed = self.state_dir.exists()
        if self.aws_clients:
            # first the client instances (found by the run's tag: also after a failed or killed provision), so
            # no worker still sends while the run's objects are deleted
            try:
                record["client_fleet"] = self.client_fleet().teardown()
            except Exception as e:  # noqa: BLE001 - recorded; the clusters are cleaned all the same
                record["errors"].append(f"aws clients: {type(e).__name__}: {e}")
        if not existed:
            record["note"] = "nothing to remove: the state directory does not exist (provision never ran)"
            return record
        for pid_file in (self.state_dir / "metrics").glob("*.brokers.jsonl.pid"):
            brokermetrics.stop(str(pid_file)[:-len(".pid")])  # a phase's scraper that a kill left running
        if not self.aws_clients:
            machine = self._machine().teardown()
            record["stopped"], record["errors"] = machine.get("stopped", []), list(machine.get("errors", []))
        for broker in sorted(set(self._recorded_clusters()) | set(self.brokers)):
            rec: dict[str, Any] = {}
            record["clusters"][broker] = rec
            try:
                c = self.cluster(broker)
                rec["address"] = admin.where(c)
                recorded = self._created(broker)
                deleted = admin.delete_owned(c, self.prefix, recorded)
                record["errors"] += [f"{broker}: {e}" for e in deleted.pop("errors", [])]
                rec["deleted"] = deleted
                after = admin.objects(c)
                before = self._before(broker)
                if after is not None and before is not None:
                    rec["left"] = {k: sorted(set(v) - set(before.get(k, []))) for k, v in after.items()
                                   if set(v) - set(before.get(k, []))}
                    left_owned = {k: [n for n in v if admin.owned(n, self.prefix)] for k, v in rec["left"].items()}
                    if any(left_owned.values()):
                        record["errors"].append(f"{broker}: still on the cluster after teardown: {left_owned}")
                elif after is None:
                    rec["left"] = None
                    rec["note"] = "this cluster cannot be listed: the recorded names were deleted"
            except Exception as e:  # noqa: BLE001 - teardown goes on with the next cluster
                record["errors"].append(f"{broker}: {type(e).__name__}: {e}")
        write_json(self.state_dir / "teardown.json", record)
        for broker, rec in record["clusters"].items():
            log.info("%s: teardown on %s deleted %s", broker, rec.get("address"), rec.get("deleted"))
        return record

    def _created(self, broker: str) -> list[str]:
        try:
            return list(json.loads((self.state_dir / f"created-{broker}.json").read_text()))
        except (OSError, ValueError):
            return []

    def _before(self, broker: str) -> dict[str, list[str]] | None:
        try:
            return json.loads((self.state_dir / f"before-{broker}.json").read_text()).get("objects")
        except (OSError, ValueError):
            return None


__all__ = ["ExternalEnvironment", "ExternalSettingsError", "external_settings", "lease_scope"]
