"""What a user can run, for ``brokerbench list``: each suite with its description, brokers (driver, client library,
default version), variants and workloads (rate and message size as the suite runs them), every workload, driver and
variant file, and the broker versions already resolved in the broker cache (``BROKERBENCH_BROKER_CACHE``, else
``~/.cache/brokerbench/brokers``; brokerbench.environments.machine.distributions).

Reads files only: no Airflow, no broker, no network.
"""

from __future__ import annotations

import subprocess
import textwrap
from typing import Any

from brokerbench.changepoint import version_key
from brokerbench.environments.brokermetrics import CATALOG_BROKERS, catalog, catalog_path
from brokerbench.environments.machine.distributions import ARTIFACTS, TOOL_ARTIFACTS, cache_root, cached_versions
from brokerbench.environments.registry import environment_kind
from brokerbench.spec import (
    SpecError,
    Suite,
    Workload,
    build_plan,
    list_drivers,
    list_suites,
    list_variants,
    list_workloads,
    load_driver,
    load_suite,
    load_variant,
    load_workload,
)
from brokerbench.spec.clients import default_client_library
from brokerbench.util import dag_id_for, text_table
from brokerbench.worker.runner import workload_kind

#: the brokers' names as their projects give them
PRODUCTS = {"kafka": "Apache Kafka", "pulsar": "Apache Pulsar", "rabbitmq": "RabbitMQ"}
#: a workload's columns (units in the names)
WORKLOAD_COLUMNS = ["workload", "kind", "rate_msg_s", "message_size_bytes", "topics_x_partitions",
                    "clients_per_topic", "duration_min", "warmup_min"]
#: a suite's broker columns
BROKER_COLUMNS = ["broker", "driver", "client_library", "default_version"]


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}".rstrip("0")


def rate_text(w: Workload) -> str:
    """The producers' rate in msg/s, ``max`` (find the highest stable rate) or the rates a sweep steps through
    (``sweep 1,000 to 40,000 (6 steps)``)."""
    if w.sweep_rates_msg_s:
        rates = sorted(w.sweep_rates_msg_s)
        return f"sweep {_number(rates[0])} to {_number(rates[-1])} ({len(rates)} steps)"
    return _number(w.producer_rate) if w.producer_rate > 0 else "max"


def workload_row(w: Workload) -> list[str]:
    """A workload's row of :data:`WORKLOAD_COLUMNS` (clients as OMB's names write them: ``4p 4c``)."""
    consumers = w.subscriptions_per_topic * w.consumer_per_subscription
    return [w.id, workload_kind(w.to_omb_dict(), w.kind), rate_text(w), _number(w.message_size),
            f"{w.topics} x {w.partitions_per_topic}", f"{w.producers_per_topic}p {consumers}c",
            _number(w.test_duration_minutes), _number(w.warmup_duration_minutes)]


def installed_rabbitmq() -> str | None:
    """The version of the installed Debian package rabbitmq-server (what the local environment runs), or None."""
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() or None if p.returncode == 0 else None


def default_versions(suite: Suite, cached: dict[str, list[str]], rabbitmq: str | None) -> dict[str, str]:
    """broker -> the version a run of ``suite`` deploys when no param names one, said for a reader: whether it is
    already in the broker cache (else it is resolved from Maven Central on first use), a stand-in, the installed
    package, or the external cluster's own."""
    settings: dict[str, Any] = suite.environment_settings
    kind = environment_kind(suite.environment)
    base = kind.default_broker_versions()
    if base is None:  # it deploys no broker: the cluster's own version is recorded
        return {b: "the cluster's (asked of it)" for b in suite.brokers}
    versions = {**base, **(settings.get("broker_versions") or {})}
    stand_ins = dict(settings.get("broker_implementations") or {})
    out = {}
    for broker in suite.brokers:
        version = versions.get(broker)
        if broker in stand_ins:
            out[broker] = f"{stand_ins[broker]} (stand-in)"
        elif broker in ARTIFACTS and version:
            where = "in the cache" if version in cached.get(broker, []) else "from Maven Central on first use"
            out[broker] = f"{PRODUCTS[broker]} {version} ({where})"
        elif kind.brokers_on_this_machine:  # RabbitMQ: the installed Debian package
            out[broker] = (f"{PRODUCTS[broker]} {rabbitmq} (Debian package rabbitmq-server)" if rabbitmq else
                           f"{PRODUCTS[broker]} of the Debian package rabbitmq-server (not installed)")
        elif version and version != "package":
            out[broker] = f"{PRODUCTS.get(broker, broker)} {version} (on the hosts)"
        else:
            out[broker] = f"{PRODUCTS.get(broker, broker)} of the hosts' package"
    return out


def suite_text(name: str, cached: dict[str, list[str]], rabbitmq: str | None) -> str:
    """One suite: its header line, description, variants, brokers and workloads (as the suite runs them)."""
    try:
        suite = load_suite(name)
        plan = build_plan(suite, {})
    except SpecError as e:
        return f"{name}  (error: `brokerbench validate {name}` says why)\n  {e}"
    schedule = f"schedule {suite.schedule}" if suite.schedule else "not scheduled"
    trials = f"{plan.trials} trials" if plan.trials > 1 else "1 trial"
    lines = [f"{name}  (DAG {dag_id_for(name)}; environment {plan.environment}; {schedule}; {trials}; "
             f"intervals of {plan.interval_seconds} s)"]
    if suite.description:
        lines += textwrap.wrap(" ".join(suite.description.split()), 110, initial_indent="  ", subsequent_indent="  ")
    lines.append(f"  variants: {', '.join(dict.fromkeys(i.variant for i in plan.items))}")
    versions = default_versions(suite, cached, rabbitmq)
    brokers: dict[str, list[str]] = {}
    for item in plan.items:
        brokers.setdefault(item.broker, [item.broker, item.driver.name, item.client_library, versions[item.broker]])
    workloads: dict[str, Workload] = {}
    for item in plan.items:
        workloads.setdefault(item.base_workload_id, item.workload)
    lines += ["", _indent(text_table(BROKER_COLUMNS, brokers.values())), "",
              _indent(text_table(WORKLOAD_COLUMNS, [workload_row(w) for w in workloads.values()]))]
    return "\n".join(lines)


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def in_cache(broker: str) -> list[str]:
    """The versions of ``broker`` (or a vendor's perf tool) completely in the broker cache, older to newer."""
    return sorted(cached_versions(broker), key=version_key)


def cache_text() -> str:
    """The broker versions (and the vendors' perf tools for ``calibrate``) completely in the broker cache."""
    root = cache_root()
    lines = [f"broker versions in the cache ({root}; BROKERBENCH_BROKER_CACHE):"]
    for broker in ARTIFACTS:
        found = in_cache(broker)
        lines.append(f"  {broker:<9} {', '.join(found) if found else '(none yet)'}")
    tools = [f"{tool} {', '.join(in_cache(tool))}" for tool in TOOL_ARTIFACTS if in_cache(tool)]
    if tools:
        lines.append(f"  vendors' perf tools (brokerbench calibrate): {'; '.join(tools)}")
    lines.append("  another version is resolved from Maven Central by the first run that needs it")
    lines.append("  (--conf '{\"broker_versions\": {\"kafka\": \"3.9.1\"}}'); RabbitMQ is the installed package")
    return "\n".join(lines)


def catalogs_text() -> str:
    """Each broker's metrics catalog (include/metrics/<broker>.yaml): what the scrapers read during every phase."""
    out = ["broker metrics (read from each broker's own endpoint during every phase; columns of the summary, "
           "charted in the report's 'What the brokers and hosts did'; docs/broker-metrics.md):"]
    for broker in CATALOG_BROKERS:
        cat = catalog(broker)
        out += [f"  {cat.title} ({catalog_path(broker)}): {' '.join(cat.endpoint.split())}"]
        rows = [[m.id, m.kind, m.role, f"{m.worse} is worse", m.means] for m in cat.metrics]
        out.append(_indent(text_table(["metric (column)", "kind", "read from", "worse", "what it means"], rows),
                           "    "))
    return "\n".join(out)


def inventory_text() -> str:
    """Everything ``brokerbench list`` prints."""
    cached = {b: in_cache(b) for b in ARTIFACTS}
    rabbitmq = installed_rabbitmq()
    out = ["suites (run one: brokerbench bench --suite NAME; check one: brokerbench validate NAME)", ""]
    for name in list_suites():
        out += [suite_text(name, cached, rabbitmq), ""]
    workloads, bad = [], []
    for name in list_workloads():
        try:
            workloads.append(workload_row(load_workload(name)))
        except SpecError as e:
            bad.append(f"  {name}: error: {e}")
    out += ["workloads (as in their files; a suite's overrides and --rate / --duration change them):",
            _indent(text_table(WORKLOAD_COLUMNS, workloads)), *bad, ""]
    drivers, bad = [], []
    for name in list_drivers():
        try:
            d = load_driver(name)
        except SpecError as e:
            bad.append(f"  {name}: error: {e}")
            continue
        broker = str(d.broker)
        replication = (str(d.replication_factor) if d.replication_factor else
                       f"ensemble {d.client.persistence.ensemble_size}, write {d.client.persistence.write_quorum}, "
                       f"ack {d.client.persistence.ack_quorum}" if d.client and d.client.persistence else
                       f"{str(d.queue_type).lower()} queues" if d.queue_type else "")
        drivers.append([name, broker, d.client_library or f"{default_client_library(broker)} (default)", replication])
    out += ["drivers (a broker's settings; --client BROKER=LIBRARY picks another client library):",
            _indent(text_table(["driver", "broker", "client_library", "replication"], drivers)), *bad, ""]
    out.append("variants (durability settings; --variants NAME):")
    for name in list_variants():
        try:
            out.append(f"  {name:<14} {_first_sentence(load_variant(name).description)}")
        except SpecError as e:
            out.append(f"  {name}: error: {e}")
    out += ["", catalogs_text(), "", cache_text()]
    return "\n".join(out)
