"""The aws settings, checked before any machine exists: defaults < the suite's environmentSettings refined by
params < the site's settings (``BROKERBENCH_AWS_SETTINGS``), merged; then every rule that can be known without a
machine - types and choices by :class:`~brokerbench.environments.settings.AwsSettings`, the rest (network,
versions, profiles, counts, instance types, cost) here. A refusal is an :class:`AwsSettingsError` naming the
setting and where its value came from."""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, Protocol

from pydantic import ValidationError

from ...spec import bounds
from ...spec.errors import SpecError
from ..base import EnvironmentFailure
from ..settings import AwsSettings, StaticHost, defaults
from . import fleet as aws_fleet
from .brokers import IMPLEMENTATIONS, kafka_mode
from .templates import profiles

#: the environment's defaults: AwsSettings' (docs/aws.md)
DEFAULTS: dict[str, Any] = defaults(AwsSettings)

#: aws settings that are also run params (``brokerbench.spec.params.ENVIRONMENT_PARAMS``): errors name them ``params.<key>``
PARAM_SETTINGS = ("broker_versions", "instance_types", "instance_counts", "cost_cap_usd", "tuning_profile")
#: at most this many instances per role (spec/bounds.py, the run params' bound too)
MAX_INSTANCES_PER_ROLE = int(bounds.MAX_INSTANCES_PER_ROLE.value)


class AwsSettingsError(SpecError, EnvironmentFailure):
    """A setting of the aws environment that cannot work, found before any machine
    exists. A SpecError (the validate task fails at once, without retry) whose field
    says where the value comes from: ``params.<key>`` (a run param),
    ``environmentSettings.<key>`` (the suite) or ``BROKERBENCH_AWS_SETTINGS.<key>``
    (the site settings); and an EnvironmentFailure for callers of provision."""

    def __init__(self, message: str, field: str):
        SpecError.__init__(self, message, None, field)


def merge_settings(settings: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings the environment runs with: :data:`DEFAULTS` < the given settings
    (suite environmentSettings refined by params) < site settings; the mappings
    ``instance_types`` and ``broker_versions`` merged key by key. Returns (merged, site)."""
    site = site_settings()
    given = {**{k: v for k, v in (settings or {}).items() if v is not None}, **site}
    merged = {**DEFAULTS, **given}
    for key in ("instance_types", "broker_versions"):
        ours, theirs = (settings or {}).get(key), site.get(key)
        if all(v is None or isinstance(v, dict) for v in (ours, theirs)):
            merged[key] = {**DEFAULTS[key], **(ours or {}), **(theirs or {})}
    return merged, site


def aws_settings(settings: AwsSettings | Mapping[str, Any] | None) -> AwsSettings:
    """The settings the environment runs with, typed: given settings merged (:func:`merge_settings`) and
    validated; a model as it is (already merged). A value of the wrong type raises :class:`AwsSettingsError`
    naming the setting and where it came from."""
    if isinstance(settings, AwsSettings):
        return settings
    merged, site = merge_settings(dict(settings or {}))
    try:
        return AwsSettings.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        where = "BROKERBENCH_AWS_SETTINGS" if loc[0] in site else "environmentSettings"
        raise AwsSettingsError(f"{err['msg']} (got {err.get('input')!r})", ".".join([where, *loc])) from None


def needs_metadata(settings: AwsSettings, brokers: list[str], plan: Any | None = None) -> bool:
    """ZooKeeper hosts are needed by Pulsar, and by Kafka in ZooKeeper mode (installed brokers only), on either
    side of an A/B run (``plan``)."""
    if settings.deploy_mode == "local":
        return False
    return "pulsar" in brokers or zookeeper_kafka(settings, brokers, plan) is not None


def zookeeper_kafka(settings: AwsSettings, brokers: list[str], plan: Any | None = None) -> str | None:
    """The Kafka release of the run that needs ZooKeeper (``"3.2.3"``, or ``"3.2.3 (side B)"`` where only side B
    of an A/B run does: a release before 3.3 against a KRaft one), or None. A side B whose release does not fit
    ``kafka_mode`` at all is refused by side B's own check (pipeline/setup.py check_side_b), not here."""
    if "kafka" not in brokers:
        return None
    version = str(settings.broker_versions["kafka"])
    if kafka_mode(version, settings.kafka_mode) == "zookeeper":
        return version
    side_b = ((getattr(plan, "compare_with", None) or {}).get("broker_versions") or {}).get("kafka")
    try:
        if side_b and kafka_mode(str(side_b), settings.kafka_mode) == "zookeeper":
            return f"{side_b} (side B)"
    except EnvironmentFailure:
        pass
    return None


class Refuse(Protocol):
    """Raise :class:`AwsSettingsError` for a setting (``key``, and ``sub`` within it), named where it came from."""

    def __call__(self, key: str, message: str, sub: str | None = None) -> NoReturn: ...


def check_plan(plan: Any, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`check_settings` for a plan of the aws environment: its
    ``environment_settings`` (params already merged in) and brokers. ``params``, the
    run's params, only sharpen the error's field name (``params.<key>`` when the run
    param gave the value). Returns the cost estimate."""
    brokers = list(dict.fromkeys(i.broker for i in plan.items))
    return check_settings(plan.environment_settings, brokers, plan, params=params, merged=False)


def check_settings(settings: dict[str, Any], brokers: list[str], plan: Any | None = None, *,
                   params: dict[str, Any] | None = None, merged: bool = True) -> dict[str, Any]:
    """Everything about the aws settings that can be known before a machine exists;
    raises :class:`AwsSettingsError` (a SpecError) naming the setting, returns the
    cost estimate (the cap compared exactly).

    ``settings`` as the environment holds them (``merged=True``: :func:`merge_settings`
    already applied) or as given (``merged=False``: suite environmentSettings with
    the params merged in, as the plan carries them; site settings and defaults are
    added here)."""
    site = site_settings() if merged else None
    s, site = (settings, site) if merged else merge_settings(settings)
    given_params = {k for k, v in (params or {}).items() if v not in (None, "", {}, [])}

    def field(key: str, sub: str | None = None) -> str:
        if key in (site or {}):
            where = "BROKERBENCH_AWS_SETTINGS"
        elif key in given_params or (key in PARAM_SETTINGS and params is None):
            where = "params"
        else:
            where = "environmentSettings"
        return f"{where}.{key}" + (f".{sub}" if sub else "")

    def refuse(key: str, message: str, sub: str | None = None) -> NoReturn:
        raise AwsSettingsError(message, field(key, sub))

    for b in brokers:
        if b not in IMPLEMENTATIONS:
            raise AwsSettingsError(f"unknown broker {b!r}; the aws environment runs {', '.join(IMPLEMENTATIONS)}",
                                   "brokers")
    if s.get("cpu_pinning"):
        refuse("cpu_pinning", "cpu_pinning: a local environment setting (brokers and clients on one machine); on aws "
                              "they run on hosts of their own")
    typed = _check_types(s, refuse)
    if s.get("static_hosts"):
        _check_versions(s, brokers, refuse)
        _check_profile(s, refuse)
        return _check_static_hosts(typed, brokers, plan, refuse)
    _check_network(s, refuse)
    _check_versions(s, brokers, refuse)
    _check_profile(s, refuse)
    counts = _check_counts(s, typed, brokers, plan, refuse)
    types, prices = _check_instance_types(s, counts, refuse)
    return _check_cost(s, plan, types, counts, prices, refuse)


def check_client_settings(settings: dict[str, Any], plan: Any | None = None, *,
                          prefix: str = "environmentSettings.aws") -> dict[str, Any]:
    """The settings of a client fleet alone (the aws environment's client half, e.g. for the external
    environment): given settings merged with the defaults and the site's, then types, network, the client
    count and instance type, and the cost of the client instances; a refusal names ``<prefix>.<key>``
    (``BROKERBENCH_AWS_SETTINGS.<key>`` when the site settings gave it). Returns the cost estimate."""
    s, site = merge_settings(settings)

    def refuse(key: str, message: str, sub: str | None = None) -> NoReturn:
        where = "BROKERBENCH_AWS_SETTINGS" if key in site else prefix
        raise AwsSettingsError(message, f"{where}.{key}" + (f".{sub}" if sub else ""))

    _check_types(s, refuse)
    _check_network(s, refuse)
    counts = {"client": client_count(s.get("counts"), refuse)}
    types, prices = _check_instance_types(s, counts, refuse)
    return _check_cost(s, plan, types, counts, prices, refuse)


def client_count(counts: Any, refuse: Refuse | None = None) -> int:
    """Client instances of a client fleet: ``counts.client`` (default 2), 1 to :data:`MAX_INSTANCES_PER_ROLE`;
    ``counts``: the setting as given (the check), or as the typed settings hold it."""
    given = counts or {}
    if not isinstance(given, dict):
        if refuse:
            refuse("counts", f'expected a mapping such as {{"client": 2}}, got {given!r}')
        given = {}
    n = given.get("client", 2)
    ok = not isinstance(n, bool) and isinstance(n, int) and 1 <= n <= MAX_INSTANCES_PER_ROLE
    if not ok and refuse:
        refuse("counts", f"must be a whole number between 1 and {MAX_INSTANCES_PER_ROLE} (got {n!r})", "client")
    return int(n)


#: the settings the rules below check themselves, each with a message that says more than a type error would
OWN_RULES = ("counts", "instance_counts", "tuning_profile")


def _check_types(s: dict[str, Any], refuse: Refuse) -> AwsSettings:
    """Types and choices of every other setting, as :class:`AwsSettings` declares them (the environment validates
    the same model when it is made: what passes here, it takes); the first wrong one refused by name. Returns
    the settings as the model, those of :data:`OWN_RULES` at their defaults (the rules below check them)."""
    try:
        return AwsSettings.model_validate({k: v for k, v in s.items() if k not in OWN_RULES})
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        refuse(loc[0], f"{err['msg']} (got {err.get('input')!r})", ".".join(loc[1:]) or None)


def _check_network(s: dict[str, Any], refuse: Refuse) -> None:
    """The account and network settings without which nothing can be provisioned safely."""
    for key in ("ami", "controller_cidr"):
        if not s.get(key):
            refuse(key, "required for the aws environment (site settings BROKERBENCH_AWS_SETTINGS, the suite's "
                        "environmentSettings or params); see docs/aws.md")
    try:
        net = ipaddress.ip_network(str(s["controller_cidr"]), strict=False)
    except ValueError:
        refuse("controller_cidr", f"{s['controller_cidr']!r} is not an address or CIDR block "
                                  "(e.g. 203.0.113.7/32)")
    if net.prefixlen == 0:
        refuse("controller_cidr", f"{s['controller_cidr']} would open SSH and the broker ports to the whole "
                                  "internet; give the controller's own address")


def _check_versions(s: dict[str, Any], brokers: list[str], refuse: Refuse) -> dict[str, Any]:
    """Installed brokers: a version that can be resolved (Kafka, Pulsar: any release on Maven Central, or in
    the Apache archive; RabbitMQ: the hosts' package, checked on the host, or a release tarball), and Kafka's
    metadata mode for it. Whether Maven Central has the version is asked at deploy, by the controller."""
    from ..machine.distributions import VERSION_RE

    versions = s.get("broker_versions") or {}
    for b in brokers:
        v = str(versions.get(b) or "")
        if s["deploy_mode"] != "install":
            continue
        if b == "rabbitmq" and v == "package" and s.get("rabbitmq_source", "package") == "package":
            continue
        if not VERSION_RE.match(v):
            hint = " (or 'package': whatever the hosts' package manager installs)" if b == "rabbitmq" else ""
            refuse("broker_versions", f"{b} version {v!r} is not a release number such as 4.1.1{hint}", b)
    if "kafka" in brokers and s["deploy_mode"] == "install":
        try:
            kafka_mode(str(versions["kafka"]), s.get("kafka_mode"))
        except EnvironmentFailure as e:
            refuse("kafka_mode", str(e))
    return versions


def _check_profile(s: dict[str, Any], refuse: Refuse) -> None:
    """A tuning profile of include/infra/aws/profiles.yaml."""
    known = profiles() or {}
    name = s.get("tuning_profile") or "default"
    if not isinstance(name, str) or name not in known:
        refuse("tuning_profile", f"unknown profile {name!r}; known: {', '.join(sorted(known))} "
                                 "(include/infra/aws/profiles.yaml)")


def _check_counts(s: dict[str, Any], typed: AwsSettings, brokers: list[str], plan: Any | None,
                  refuse: Refuse) -> dict[str, int]:
    """Instances per role: the suite's ``counts`` refined by the param ``instance_counts``; every role the
    brokers (of either side of an A/B run) need has at least one."""
    meta = needs_metadata(typed, brokers, plan)
    for key in ("counts", "instance_counts"):
        given = s.get(key)
        if given in (None, {}):
            continue
        if not isinstance(given, dict):
            refuse(key, f"expected a mapping role -> count ({', '.join(aws_fleet.ROLES)}), got {given!r}")
        for role, n in given.items():
            if role not in aws_fleet.ROLES:
                refuse(key, f"unknown role {role!r}; roles: {', '.join(aws_fleet.ROLES)}", str(role))
            if isinstance(n, bool) or not (isinstance(n, int) or (isinstance(n, float) and n.is_integer())
                                           or (isinstance(n, str) and n.strip().isdigit())):
                refuse(key, f"must be a whole number, got {n!r}", role)
            if not 0 <= int(n) <= MAX_INSTANCES_PER_ROLE:
                refuse(key, f"must be between 0 and {MAX_INSTANCES_PER_ROLE} (got {n!r})", role)
    counts = aws_fleet.role_counts(s.get("counts") or {}, s.get("instance_counts") or {}, meta)

    def count_key(role: str) -> str:
        """Where the role's count came from: the param instance_counts wins over the suite's counts."""
        return next((k for k in ("instance_counts", "counts") if role in (s.get(k) or {})), "instance_counts")

    for role in ("broker", "client"):
        if counts[role] < 1:
            refuse(count_key(role), f"at least 1 {role} instance is needed (got {counts[role]})", role)
    if meta and counts["metadata"] < 1:
        why = "pulsar" if "pulsar" in brokers else f"kafka {zookeeper_kafka(typed, brokers, plan)} in ZooKeeper mode"
        refuse(count_key("metadata"), f"at least 1 metadata (ZooKeeper) instance is needed for {why} "
                                      f"(got {counts['metadata']})", "metadata")
    return counts


def static_host_records(static_hosts: list[StaticHost] | None) -> list[dict[str, Any]]:
    """The ``static_hosts`` setting as fleet host records (``name``: given, else ``<role>-<n>``)."""
    seen: dict[str, int] = {}
    out = []
    for h in static_hosts or []:
        n = seen.get(h.role, 0)
        seen[h.role] = n + 1
        out.append({"name": h.name or f"{h.role}-{n}", "role": h.role, "address": h.address,
                    "instance_id": None, "instance_type": "static", "private_ip": h.address, "public_ip": None})
    return out


def _check_static_hosts(s: AwsSettings, brokers: list[str], plan: Any | None,
                        refuse: Refuse) -> dict[str, Any]:
    """Machines that exist: at least one broker and one client host (and a metadata host where the brokers need
    ZooKeeper), names unique; nothing is paid for, so there is no cost to check. Returns what stands in for
    the cost estimate."""
    hosts = static_host_records(s.static_hosts)
    names = [h["name"] for h in hosts]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        refuse("static_hosts", f"host names must be unique: {', '.join(dup)} listed more than once")
    counts = {r: sum(1 for h in hosts if h["role"] == r) for r in aws_fleet.ROLES}
    for role in ("broker", "client"):
        if counts[role] < 1:
            refuse("static_hosts", f"at least 1 host with role {role!r} is needed (got {counts[role]})")
    if needs_metadata(s, brokers, plan) and counts["metadata"] < 1:
        why = "pulsar" if "pulsar" in brokers else f"kafka {zookeeper_kafka(s, brokers, plan)} in ZooKeeper mode"
        refuse("static_hosts", f"at least 1 host with role 'metadata' (ZooKeeper) is needed for {why}")
    return {"static_hosts": counts, "expected_usd": 0.0, "note": "machines that exist: nothing is created or paid "
                                                                 "for by brokerbench"}


def _check_instance_types(s: dict[str, Any], counts: dict[str, int],
                          refuse: Refuse) -> tuple[dict[str, Any], dict[str, Any]]:
    """An instance type for every role that has instances, each with a known hourly price."""
    prices = s.get("prices_usd_per_hour") or {}
    if not all(not isinstance(v, bool) and v > 0 for v in prices.values()):
        refuse("prices_usd_per_hour", f"expected a mapping instance type -> positive USD per hour, got {prices!r}")
    types = s.get("instance_types") or {}
    table = {**aws_fleet.PRICES_USD_PER_HOUR, **prices}
    for role in types:
        if role not in aws_fleet.ROLES:
            refuse("instance_types", f"unknown role {role!r}; roles: {', '.join(aws_fleet.ROLES)}", str(role))
    for role, n in counts.items():
        if n <= 0:
            continue
        itype = types.get(role)
        if not isinstance(itype, str) or not itype:
            refuse("instance_types", f"no instance type for the {n} {role} instance(s)", role)
        if itype not in table:
            refuse("instance_types", f"no hourly price known for {itype!r}, so the cost cap cannot be checked: "
                                     f"add it to the setting prices_usd_per_hour, or use one of "
                                     f"{', '.join(sorted(table))}", role)
    return types, prices


def _check_cost(s: dict[str, Any], plan: Any | None, types: dict[str, Any], counts: dict[str, int],
                prices: dict[str, Any], refuse: Refuse) -> dict[str, Any]:
    """The expected cost under the cap and the lifetime; returns the cost estimate."""
    for key in ("cost_cap_usd", "max_lifetime_hours"):
        number = s.get(key)
        if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float)) or number <= 0):
            refuse(key, f"must be a positive number, got {number!r}")
    minutes = aws_fleet.expected_minutes(plan)
    lifetime = s.get("max_lifetime_hours") or round(minutes / 60.0 * 1.5 + 1.0, 2)
    cap = s.get("cost_cap_usd")
    cost = aws_fleet.estimate_cost(types, counts, minutes, float(cap) if cap is not None else None,
                                   float(lifetime), prices)
    if cost.get("refused"):
        refuse(cost.get("refused_field") or "cost_cap_usd", f"run refused before provisioning: {cost['refused']}")
    return cost


def site_settings() -> dict[str, Any]:
    """Settings of this installation (account, network, bastion), which win over the
    suite's: ``BROKERBENCH_AWS_SETTINGS`` = a JSON file path or inline JSON."""
    raw = os.environ.get("BROKERBENCH_AWS_SETTINGS", "").strip()
    if not raw:
        return {}
    text = raw if raw.startswith("{") else Path(raw).read_text()
    return {k: v for k, v in json.loads(text).items() if v is not None}
