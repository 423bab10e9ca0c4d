"""Which environment a run uses, chosen once: a suite's ``environment`` name mapped to the class that owns
everything that differs between environments.

Each :class:`EnvironmentKind` owns its settings model (:mod:`.settings`), the checks the validate task (and the
command line, before Airflow starts) applies to a plan, its lease scope (:mod:`brokerbench.lease`) and the
construction of its :class:`~.base.Environment` from a run key and a plan. The rest of the package asks
:func:`environment_kind` and never compares an environment's name.

Importing this module loads no environment's machinery: each kind imports its own package (the aws one its
fleet, SSH and templates; the providers under them boto3 and paramiko) inside the method that needs it.

A fourth environment: its package under ``environments/``, one :class:`EnvironmentKind` subclass here and its
line in :data:`ENVIRONMENTS` (and its name in the suite's ``environment`` field, which the spec layer cannot
import from here; tests/unit/test_environment_registry.py holds the two lists equal).
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from ..spec.errors import SpecError
from .settings import AwsSettings, ExternalSettings, LocalSettings

if TYPE_CHECKING:
    from ..spec import Plan
    from .base import Environment


@dataclass
class PlanCheck:
    """What an environment's plan check found: lines for the validate task's log, and files (relative to the
    run's directory) for the run's provenance."""

    said: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)


def _brokers(plan: Plan) -> list[str]:
    """The plan's brokers in run order."""
    return list(dict.fromkeys(i.broker for i in plan.items))


class EnvironmentKind(ABC):
    """One environment: what a run needs to know of it before (and without) its machinery. Class-level only:
    the registry maps a name to the class itself."""

    #: the suite's ``environment`` value
    name: ClassVar[str]
    #: its ``environmentSettings``, typed
    settings_model: ClassVar[type[BaseModel]]
    #: the brokers run on the machine the command line and the Airflow worker run on
    brokers_on_this_machine: ClassVar[bool] = False

    @classmethod
    def default_broker_versions(cls) -> dict[str, str] | None:
        """The broker versions a run deploys when neither suite nor params name one; None: the environment
        deploys nothing (the clusters' own versions are recorded, never chosen)."""
        return None

    @classmethod
    @abstractmethod
    def check_plan(cls, plan: Plan, params: dict[str, Any]) -> PlanCheck:
        """The validate task's refusals (a :class:`~brokerbench.spec.SpecError` naming the field), before the
        lease and before any machine exists. ``params``: the run's, to name where a refused value came from."""

    @classmethod
    def refuse_early(cls, plan: Plan, params: dict[str, Any]) -> None:  # noqa: ARG003 - the default has none
        """What the command line refuses before Airflow starts, in well under a second: no network, no
        connection lookups. Default: nothing beyond the spec's own checks."""

    @classmethod
    @abstractmethod
    def lease_scope(cls, settings: dict[str, Any], plan: Plan | None) -> tuple[str, int]:
        """The run's lease scope (:mod:`brokerbench.lease`) and its number of slots."""

    @classmethod
    @abstractmethod
    def create(cls, run_key: str, settings: dict[str, Any], plan: Plan | None) -> Environment:
        """The run's environment object (``plan`` None: before the validate task wrote it). ``settings``: as the
        plan carries them; the object holds them validated, as :attr:`settings_model`."""


class Local(EnvironmentKind):
    """Real brokers as processes on loopback on this machine (:mod:`.local`)."""

    name = "local"
    settings_model = LocalSettings
    brokers_on_this_machine = True

    @classmethod
    def default_broker_versions(cls) -> dict[str, str]:
        return LocalSettings().broker_versions

    @classmethod
    def check_plan(cls, plan: Plan, params: dict[str, Any]) -> PlanCheck:
        """Broker implementations and versions resolved now (Maven Central, once per version), refused naming
        the setting; the jars' checksums go into the provenance (``provenance/brokers.json``)."""
        from . import cpus
        from .local import LocalSettingsError, check_brokers
        from .local.environment import local_settings

        try:
            found = check_brokers(plan.environment_settings, _brokers(plan))
        except LocalSettingsError as e:
            key, _, broker = e.setting.partition(".")
            given = params.get(key)
            source = "params" if (isinstance(given, dict) and broker in given) or (given and not broker) else \
                "environmentSettings"
            raise SpecError(str(e), None, f"{source}.{e.setting}") from None
        try:  # CPUs this machine does not offer: refused before the lease
            pinned = cpus.check_on_host(local_settings(plan.environment_settings).cpu_pinning, socket.gethostname())
        except cpus.PinningError as e:
            source = "params" if params.get("cpu_pinning") else "environmentSettings"
            raise SpecError(f"{e.setting}: {e}", None, f"{source}.{e.setting}") from None
        for item in plan.items:  # JVM options: for the Apache distributions' JVMs only
            if item.jvm_options and not str(found[item.broker]["implementation"]).startswith("apache-"):
                field = f"variants.{item.variant}.{item.broker}.jvmOptions"
                raise SpecError(f"variant {item.variant!r} gives {item.broker}'s JVM the options "
                                f"{' '.join(item.jvm_options)}, but {found[item.broker]['implementation']} runs no JVM "
                                f"of brokerbench's (a stand-in): run the Apache distribution "
                                f"(broker_implementations.{item.broker})", None,
                                f"compare_with.{field}" if item.side == "B" else field)
        said = [f"{broker}: {b['implementation']} {b.get('version') or ''}"
                + (f" ({len(b['distribution'].get('jars', []))} jars in {b['distribution'].get('lib')})"
                   if b.get("distribution") else "") for broker, b in found.items()]
        said += [f"cpu pinning: {side} on CPU(s) {','.join(map(str, c))}" for side, c in pinned.items()]
        return PlanCheck(said, {"provenance/brokers.json": found})

    @classmethod
    def lease_scope(cls, settings: dict[str, Any], plan: Plan | None) -> tuple[str, int]:  # noqa: ARG003
        """This machine, one run at a time: it is the one host under test."""
        return f"local@{socket.gethostname()}", 1

    @classmethod
    def create(cls, run_key: str, settings: dict[str, Any], plan: Plan | None) -> Environment:  # noqa: ARG003
        from .local import LocalEnvironment

        return LocalEnvironment(run_key, settings)


class Aws(EnvironmentKind):
    """EC2 fleets (or machines the user has) set up over SSH (:mod:`.aws`)."""

    name = "aws"
    settings_model = AwsSettings

    @classmethod
    def default_broker_versions(cls) -> dict[str, str]:
        return AwsSettings().broker_versions

    @classmethod
    def check_plan(cls, plan: Plan, params: dict[str, Any]) -> PlanCheck:
        """Profiles, counts, versions, types, cost cap: refused naming the setting, before any machine."""
        from .aws.settings_check import check_plan

        check_plan(plan, params)
        return PlanCheck()

    @classmethod
    def lease_scope(cls, settings: dict[str, Any], plan: Plan | None) -> tuple[str, int]:  # noqa: ARG003
        """The account; slots: the setting ``max_concurrent_runs`` (each run has its own fleet)."""
        from .aws.settings_check import aws_settings

        # defaults < suite and params < site settings, typed
        return "aws", max(1, aws_settings(settings).max_concurrent_runs)

    @classmethod
    def create(cls, run_key: str, settings: dict[str, Any], plan: Plan | None) -> Environment:
        from .aws.environment import AwsEnvironment

        return AwsEnvironment(run_key, settings, plan=plan)


class External(EnvironmentKind):
    """Clusters that exist, given by Airflow connections (:mod:`.external`)."""

    name = "external"
    settings_model = ExternalSettings

    @classmethod
    def check_plan(cls, plan: Plan, params: dict[str, Any]) -> PlanCheck:
        """Connections, variants that need a broker restart, the safety limits: refused naming the field."""
        from .external.checks import check_plan

        clusters = check_plan(plan, params)
        return PlanCheck([f"external clusters: {', '.join(f'{b} at {a}' for b, a in clusters.items())}"])

    @classmethod
    def refuse_early(cls, plan: Plan, params: dict[str, Any]) -> None:
        """Variants needing a broker restart, the safety limits; the connections are the validate task's (they
        may live in Airflow's secrets backend)."""
        from .external.checks import check_plan

        check_plan(plan, params, resolve_connections=False)

    @classmethod
    def lease_scope(cls, settings: dict[str, Any], plan: Plan | None) -> tuple[str, int]:
        """Per cluster: the scope names the clusters' addresses (no credentials), one run at a time on each."""
        from .external import lease_scope

        if plan is None:
            raise FileNotFoundError("the external environment's lease scope names the plan's clusters: the "
                                    "validate task has not run for this run")
        return lease_scope(settings, sorted(set(_brokers(plan)))), 1

    @classmethod
    def create(cls, run_key: str, settings: dict[str, Any], plan: Plan | None) -> Environment:
        from .external import ExternalEnvironment

        brokers = sorted(set(_brokers(plan))) if plan is not None else []
        return ExternalEnvironment(run_key, settings, brokers=brokers, plan=plan)


#: every environment this version of brokerbench has, by name
ENVIRONMENTS: dict[str, type[EnvironmentKind]] = {kind.name: kind for kind in (Local, Aws, External)}


class UnknownEnvironment(SpecError):
    """A name no environment of this version has (a :class:`~brokerbench.spec.SpecError` on ``environment``)."""

    def __init__(self, name: str):
        super().__init__(f"{name!r} is not an environment of this version of brokerbench (known: "
                         f"{', '.join(ENVIRONMENTS)})", None, "environment")


def environment_kind(name: str) -> type[EnvironmentKind]:
    """The environment called ``name``; :class:`UnknownEnvironment` (naming the field and the known names)
    for any other."""
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise UnknownEnvironment(name) from None
