"""The interface every environment (``local``, ``aws``, ``external``: :mod:`.registry`) implements.

A DAG run talks to its environment only through :class:`Environment`, one call
per Airflow task. Tasks of one run may execute in different processes (or on
different Airflow workers), so an environment keeps no state in memory between
calls: everything it needs later lives in the run's *state directory* (local
environment) or is found again by tag (aws environment).

All return values are JSON-serialisable dicts, because they travel through
XCom and into the run's provenance files.
"""

from __future__ import annotations

import contextlib
import subprocess
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel


class EnvironmentFailure(RuntimeError):
    """A failure of the environment, with the host (or broker) it concerns."""

    def __init__(self, message: str, host: str | None = None):
        self.host = host
        super().__init__(f"{host}: {message}" if host else message)


@dataclass
class CommandResult:
    host: str
    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Host(ABC):
    """A machine commands run on: this machine (local) or an EC2 instance over SSH."""

    name: str
    role: str  # "broker", "client", "metadata"

    @abstractmethod
    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        """Run a shell command; never raises for a non-zero exit (see ``.ok``)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role}


class LocalHost(Host):
    """This machine. Used by the local environment for every role."""

    def __init__(self, name: str = "localhost", role: str = "all"):
        self.name = name
        self.role = role

    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        try:
            p = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout)
            return CommandResult(self.name, command, p.returncode, p.stdout, p.stderr)
        except subprocess.TimeoutExpired as e:
            return CommandResult(self.name, command, 124, e.stdout or "" if isinstance(e.stdout, str) else "",
                                 f"timed out after {timeout:.0f} s")


@dataclass
class BrokerEndpoint:
    """Where a deployed broker listens, and what exactly is running there."""

    broker: str  # "kafka" | "pulsar" | "rabbitmq"
    implementation: str  # "tansu", "apache-kafka", "pulsar-lite", "apache-pulsar", "rabbitmq"
    version: str
    bootstrap_servers: str | None = None  # kafka: "127.0.0.1:9092,..."
    service_url: str | None = None  # pulsar: "pulsar://127.0.0.1:6650"
    http_url: str | None = None  # pulsar admin, when there is one
    amqp_uris: list[str] = field(default_factory=list)  # rabbitmq, one per node
    nodes: int = 1
    #: client properties the workers pass to the client library (external clusters: Kafka security.protocol,
    #: sasl.*, ssl.ca.location; Pulsar token, tls_trust_certs_file_path); a secret is written as
    #: ``${env:BROKERBENCH_SECRET_...}`` and read from the worker's environment
    client_config: dict[str, str] = field(default_factory=dict)
    #: how ``version`` was learnt where it is not the version brokerbench deployed (external clusters: asked of
    #: the cluster, or stated by the connection); None otherwise
    version_source: str | None = None
    # What durability the running broker gives, in plain words:
    # {"variant": "fsync-on", "honoured": True/False, "note": "...", "settings": {...}}
    durability: dict[str, Any] = field(default_factory=dict)
    #: the JVM flags the broker was started with (heap, collector, a variant's jvmOptions), where brokerbench
    #: starts a JVM and knows them; [] elsewhere
    jvm_options: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BrokerEndpoint":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


#: an environment's settings model (:mod:`.settings`)
SettingsT = TypeVar("SettingsT", bound=BaseModel)


class Environment(ABC, Generic[SettingsT]):
    """One benchmark run's machines and brokers.

    ``run_key`` identifies the DAG run (``<dag_id>/<run_id>``); ``settings`` are
    the environment's section of the suite plus params (paths, instance types),
    validated: the environment's model of :mod:`.settings`, read as attributes.
    """

    name: str
    settings: SettingsT

    def __init__(self, run_key: str, settings: SettingsT):
        self.run_key = run_key
        self.settings = settings

    @abstractmethod
    def provision(self) -> dict[str, Any]:
        """Create (or find again, when retried) the run's hosts. Returns the fleet."""

    @abstractmethod
    def setup_hosts(self) -> dict[str, Any]:
        """tuned profile, time sync, disks. Returns per-host records of what was
        applied and, where something could not be, why (never raises for that)."""

    @abstractmethod
    def deploy(self, broker: str, broker_settings: dict[str, Any], variant: str,
               driver_overrides: dict[str, Any], *, jvm_options: list[str] | None = None) -> BrokerEndpoint:
        """Start ``broker`` configured for ``variant`` (restarting it if it runs
        with other settings). ``broker_settings`` are the variant's broker-side
        settings; ``driver_overrides`` the client-side ones, given so the
        environment can say whether the implementation honours them; ``jvm_options`` the variant's flags for
        the broker's JVM (heap, collector: over the environment's own, as the brokers' start scripts combine
        theirs). A setting or flag the broker refuses at start fails the deploy, naming it."""

    def before_phase(self, phase: str, label: str) -> dict[str, Any] | None:  # noqa: ARG002 - the default ignores them
        """Called before each warm-up / measured phase (page-cache drop, metrics
        sampler start). Returns the phase's provenance record, or None."""
        return None

    def after_phase(self, phase: str, label: str, dest_dir: str) -> dict[str, Any]:  # noqa: ARG002 - the default ignores them
        """Called after each phase: stop samplers, bring host metrics to
        ``dest_dir``; returns per-host summaries."""
        return {}

    def start_broker_metrics(self, label: str) -> dict[str, Any] | None:  # noqa: ARG002 - the default has none
        """Start scraping the deployed brokers' own metrics (:mod:`.brokermetrics`) for the phase ``label``;
        returns {"targets": [...]} (or {"error": ...}), or None where the environment has no endpoints."""
        return None

    def stop_broker_metrics(self, label: str, dest_dir: str) -> dict[str, Any]:  # noqa: ARG002 - the default has none
        """Stop the phase's scrapers and bring their files to ``dest_dir/<host>.jsonl``; returns {host: file}."""
        return {}

    def record_created(self, broker: str, names: list[str]) -> None:  # noqa: ARG002 - the default keeps none
        """The names (topics, subscriptions, queues) a run's prepare step is about to create on ``broker``, told
        before it creates them. Default: not kept (the environment's teardown removes the brokers)."""

    def client_secrets(self) -> contextlib.AbstractContextManager[None]:
        """A context in which this process's clients find the secrets the endpoint names (external clusters:
        ``BROKERBENCH_SECRET_*`` environment variables). Default: none."""
        return contextlib.nullcontext()

    def health(self, broker: str) -> dict[str, Any]:
        """Raise an error naming ``broker`` unless it runs and serves. Default: no check."""
        return {"broker": broker, "status": "unchecked"}

    @abstractmethod
    def undeploy(self, broker: str) -> None:
        """Stop ``broker``. Idempotent."""

    @abstractmethod
    def run_workers(self, jobs: list[dict[str, Any]], out_paths: list[str],
                    timeout_s: float) -> list[dict[str, Any]]:
        """Run one worker process per job (``brokerbench-worker run --job``) on
        the client hosts, concurrently, and bring their result files to
        ``out_paths``. Returns per-worker {"worker", "returncode", "path", "error"}.
        Worker output lines are progress: relay them to the task log."""

    def provide_client_engine(self, build_dir: str) -> None:  # noqa: B027 - optional, the default needs nothing
        """The JVM engine's build (``build_dir``: jar, lib/, manifest.json), made on this machine, for the workers
        of the next :meth:`run_workers`. Default: nothing (the workers run on this machine and find it here)."""

    def stop_workers(self) -> list[str]:
        """Stop every worker process of this run still running (a killed task's, a crashed try's), from a
        fresh object and from any process. Returns a description of each one stopped. Default: none."""
        return []

    def stop_leftovers_of(self, run_key: str) -> list[dict[str, Any]]:  # noqa: ARG002 - the default has none
        """Stop what run ``run_key`` - found dead holding this environment's lease - left running where this run
        is about to measure; one entry (pid, broker, role, cmd) per process stopped. Default: nothing (machines
        of its own are the sweeper's, docs/aws.md)."""
        return []

    def cleanup_failed_provision(self, *, reason: str | None = None) -> dict[str, Any]:  # noqa: ARG002
        """After a provision that failed on its last try (Airflow then skips the teardown): remove whatever the
        tries created, from a fresh object. Default: the teardown (the reason is for environments that record
        it)."""
        return self.teardown()

    @abstractmethod
    def teardown(self) -> dict[str, Any]:
        """Stop everything the run started. Idempotent; must work after any failure."""
