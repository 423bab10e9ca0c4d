"""The ``local`` environment: real brokers as processes on loopback on this machine.

One host (this machine, :class:`~brokerbench.environments.base.LocalHost`)
plays every role: broker, metadata and client. Brokers are started by
:mod:`brokerbench.environments.machine`; workers are
``python -m brokerbench.worker run`` processes.

State directory: the setting ``state_dir``, else
``$BROKERBENCH_LOCAL_STATE_ROOT/<run_key>``, else
``$BROKERBENCH_HOME/state/<run_key>`` (``BROKERBENCH_HOME`` defaults to
``<repository>/.brokerbench``). Every call finds what it needs there, so each
Airflow task may run in its own process, and :meth:`LocalEnvironment.teardown`
works from a fresh object after anything went wrong.

``BROKERBENCH_LOCAL_STATE_ROOT`` is the environment's own directory on this
host, for deployments where several Airflow workers on the host (each with a
``BROKERBENCH_HOME`` of its own) take the tasks of one run: they all find the
run's brokers and workers there (docs/deployment.md).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from typing_extensions import override

from .. import brokermetrics, cpus, hostmetrics, hostsetup
from ..base import Environment, EnvironmentFailure
from ..machine import distribution_for, implementation_for
from ..machine.distributions import DistributionError
from ..machine.runtime import Machine
from ..processes import brokerbench_home, state_dir_for, write_json
from ..settings import LocalSettings

log = logging.getLogger("brokerbench")

__all__ = ["LocalEnvironment", "LocalSettingsError", "check_brokers", "brokerbench_home", "state_dir_for"]


class LocalSettingsError(EnvironmentFailure):
    """A local setting that cannot work; ``setting`` is its dotted name (``broker_versions.kafka``)."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


def local_settings(settings: LocalSettings | Mapping[str, Any] | None) -> LocalSettings:
    """``settings`` checked against :class:`LocalSettings` (a model as it is); a bad one raises LocalSettingsError
    naming it."""
    if isinstance(settings, LocalSettings):
        return settings
    try:
        return LocalSettings.model_validate(dict(settings or {}))
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        raise LocalSettingsError(f"{name}: {err['msg']} (got {err.get('input')!r})", name) from None


def installed_rabbitmq_version() -> str | None:
    """The upstream version of Debian's rabbitmq-server package (``3.10.8`` of ``3.10.8-1.1``), or None."""
    if not shutil.which("dpkg-query"):
        return None
    p = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"], capture_output=True, text=True)
    m = re.match(r"^(?:\d+:)?([\w.]+?)(-[\w.+~]+)?$", p.stdout.strip()) if p.returncode == 0 else None
    return m.group(1) if m else None


def check_brokers(settings: LocalSettings | Mapping[str, Any], brokers: list[str]) -> dict[str, dict[str, Any]]:
    """What each broker of a run will be, known before the lease and before anything starts.

    Apache Kafka / Apache Pulsar versions are resolved here (from Maven Central
    the first time, from the cache afterwards). Returns broker -> {implementation,
    version, distribution (the manifest: artifact, jars with sha256)}. Raises
    :class:`LocalSettingsError` naming the setting: an unknown implementation, a
    version that cannot be resolved (with the artifact and Maven's reason), a
    RabbitMQ version other than the installed package's; a setting of the wrong type.
    """
    settings = local_settings(settings)
    # a version the settings name (not the model's default), for what a stand-in or the installed package says
    named = settings.broker_versions if "broker_versions" in settings.model_fields_set else {}
    out: dict[str, dict[str, Any]] = {}
    for broker in brokers:
        try:
            impl = implementation_for(broker, settings)
        except EnvironmentFailure as e:
            raise LocalSettingsError(str(e).split(": ", 1)[-1], f"broker_implementations.{broker}") from None
        asked = named.get(broker)
        if impl.startswith("apache-"):
            try:
                dist = distribution_for(broker, settings)
            except DistributionError as e:
                raise LocalSettingsError(str(e), f"broker_versions.{broker}") from None
            except EnvironmentFailure as e:  # a kafka_home / pulsar_home that is no distribution
                raise LocalSettingsError(str(e), f"{broker}_home") from None
            out[broker] = {"implementation": impl, "version": dist.version, "distribution": dist.provenance()}
        elif broker == "rabbitmq":
            installed = installed_rabbitmq_version()
            if asked and installed and str(asked) != installed:
                raise LocalSettingsError(f"rabbitmq {asked} is not what runs here: the local environment runs the "
                                         f"installed Debian package, rabbitmq-server {installed}",
                                         "broker_versions.rabbitmq")
            out[broker] = {"implementation": impl, "version": installed or "unknown"}
        else:
            out[broker] = {"implementation": impl, "version": None,
                           "note": f"{impl} is a stand-in: broker_versions.{broker} does not apply"
                           + (f" (asked: {asked})" if asked else "")}
    return out


class LocalEnvironment(Machine, Environment):
    """Brokers and workers as processes on this machine, on 127.0.0.1 only.

    Settings (all optional, :class:`~brokerbench.environments.settings.LocalSettings`, held validated as
    ``settings``): ``state_dir``; ``kafka_home`` / ``pulsar_home`` (tarballs instead of versions from Maven
    Central); ``start_timeout_s``; ``tuned_profile`` (default latency-performance); ``disk_baseline_mb``
    (default 64, 0 to skip).

    Brokers, workers and teardown are :class:`~brokerbench.environments.machine.runtime.Machine`'s;
    this class adds provisioning, host setup and the phases' host metrics.
    """

    name = "local"

    def __init__(self, run_key: str, settings: LocalSettings | Mapping[str, Any] | None = None):
        given = local_settings(settings)  # LocalSettingsError naming a bad setting
        self._given_settings = given  # another run's environment on this machine: the same settings
        root = os.environ.get("BROKERBENCH_LOCAL_STATE_ROOT")
        if root and not given.state_dir:
            given = given.model_copy(update={"state_dir": str(Path(root) / Path(state_dir_for(run_key)).name)})
        super().__init__(run_key, given)

    @override
    def stop_leftovers_of(self, run_key: str) -> list[dict[str, Any]]:
        """The dead run's teardown, from a fresh object for its state directory on this machine."""
        record = LocalEnvironment(run_key, self._given_settings).teardown()
        return list(record.get("stopped", []))

    # -- provision / host setup ------------------------------------------------
    def provision(self) -> dict[str, Any]:
        """One host, this machine, in every role. Writes ``fleet.json``."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fleet = {
            "environment": self.name,
            "run_key": self.run_key,
            "state_dir": str(self.state_dir),
            "hosts": [{**self.host.describe(), "address": "127.0.0.1",
                       "roles": ["broker", "metadata", "client"]}],
        }
        write_json(self.state_dir / "fleet.json", fleet)
        return fleet

    def setup_hosts(self) -> dict[str, Any]:
        """tuned profile, time sync, disk baseline and description of this host."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        size = self.settings.disk_baseline_mb
        record = {
            "name": self.host.name,
            "role": self.host.role,
            "tuned": hostsetup.apply_tuned_profile(self.host, self.settings.tuned_profile),
            "time_sync": hostsetup.time_sync(self.host, single_host=True),
            "disk": (hostsetup.disk_baseline(self.host, str(self.state_dir), size_mb=size) if size > 0
                     else {"note": "disk baseline skipped (disk_baseline_mb = 0)"}),
            "description": hostsetup.describe_host(self.host),
            "cpu_pinning": cpus.describe(self.settings.cpu_pinning, self.host.name),
        }
        result = {"environment": self.name, "hosts": [record]}
        write_json(self.state_dir / "hosts.json", result)
        return result

    # -- phases: host metrics (the same sampler as on aws hosts) ----------------------------
    def before_phase(self, phase: str, label: str) -> dict[str, Any]:
        """Start this machine's metrics sampler (CPU, memory, disk, network) for the phase."""
        out = self.state_dir / "metrics" / f"{label}.jsonl"
        rec: dict[str, Any] = {"phase": phase, "label": label,
                               "page_cache": [{"host": self.host.name, "dropped": False,
                                               "note": "local environment: the page cache of a shared machine "
                                                       "is not dropped"}] if phase == "measure" else []}
        try:
            # own CPU: processes with this state dir's marker, and this task with its ancestors;
            # every other process's CPU is foreign (docs/results-format.md, "Status"). The sampler ends
            # with this task should it be killed before after_phase stops it
            hostmetrics.start(str(self.state_dir), str(out), self.host.name,
                              self.settings.metrics_interval_s,
                              own_pids=hostmetrics.own_chain(os.getpid()), watch_pid=os.getpid())
            rec["metrics"] = [{"host": self.host.name, "file": str(out)}]
        except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a run
            rec["metrics"] = [{"host": self.host.name, "error": f"{type(e).__name__}: {e}"}]
        return rec

    @override
    def start_broker_metrics(self, label: str) -> dict[str, Any] | None:
        """A scraper of every running broker's own endpoints (:mod:`..brokermetrics`) for the phase."""
        targets = self.metrics_targets()
        if not targets:
            return None
        out = self.state_dir / "metrics" / f"{label}.brokers.jsonl"
        try:
            return brokermetrics.start(str(self.state_dir), str(out), self.host.name,
                                       self.settings.metrics_interval_s, targets, watch_pid=os.getpid())
        except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a run
            return {"error": f"{type(e).__name__}: {e}"}

    @override
    def stop_broker_metrics(self, label: str, dest_dir: str) -> dict[str, Any]:
        src = self.state_dir / "metrics" / f"{label}.brokers.jsonl"
        brokermetrics.stop(str(src))
        if not src.exists():
            return {}
        dest = Path(dest_dir) / f"{self.host.name}.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        return {self.host.name: str(dest)}

    @override
    def after_phase(self, phase: str, label: str, dest_dir: str) -> dict[str, Any]:
        """Stop the sampler; its samples go to ``dest_dir/<host>.jsonl``, the summary is returned."""

        from .. import hostmetrics

        src = self.state_dir / "metrics" / f"{label}.jsonl"
        hostmetrics.stop(str(src))
        if not src.exists():
            return {self.host.name: {"role": self.host.role, "samples": 0}}
        dest = Path(dest_dir) / f"{self.host.name}.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        return {self.host.name: {"role": self.host.role, "file": str(dest),
                                 **hostmetrics.summarise(hostmetrics.parse_lines(dest.read_text()))}}
