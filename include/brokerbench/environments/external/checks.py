"""What the validate step refuses for a run on external clusters, before the lease and before any client
connects to send: settings, connections, variants that need the broker restarted (broker settings, JVM options,
an A/B run's side B on another variant), and workloads above the safety limits (docs/external.md). Each refusal
is a :class:`~brokerbench.spec.SpecError` naming the field."""

from __future__ import annotations

from typing import Any

from ...spec.errors import SpecError
from .connections import ExternalConnectionError, cluster_for, prometheus_for
from .environment import ExternalSettingsError, external_settings


def _source(params: dict[str, Any], key: str) -> str:
    return "params" if params.get(key) not in (None, "", {}, []) else "environmentSettings"


def check_plan(plan, params: dict[str, Any] | None = None, *, resolve_connections: bool = True) -> dict[str, Any]:
    """Refuse what cannot run on the external clusters; returns the clusters' addresses by broker.
    ``resolve_connections`` False (the command line, before Airflow starts): the settings, variants and safety
    limits only; the connections are the validate task's (they may live in Airflow's secrets backend)."""
    params = params or {}
    side_b = (getattr(plan, "compare_with", None) or {}).get("variants")
    if side_b:
        raise SpecError(f"the external environment deploys no broker (it never restarts or reconfigures a cluster it "
                        f"did not deploy): side B cannot run another variant ({', '.join(side_b)}), whose broker "
                        "settings and JVM options need a broker deployed afresh; compare runs of two variants "
                        "instead (brokerbench compare)", None, "compare_with.variants")
    try:
        settings = external_settings(plan.environment_settings)
    except ExternalSettingsError as e:
        raise SpecError(str(e), None, f"environmentSettings.{e.setting}") from None
    if settings.clients == "aws":  # the client fleet's settings and cost, before any instance exists
        from ..aws.settings_check import check_client_settings

        check_client_settings(settings.aws, plan)
    brokers = list(dict.fromkeys(i.broker for i in plan.items))
    clusters = {}
    metrics_from: dict[str, str] = {}
    for broker in brokers:
        if not resolve_connections:
            clusters[broker] = f"the {broker} cluster"
            continue
        try:
            c = cluster_for(broker, settings.connections)
        except ExternalConnectionError as e:
            raise SpecError(str(e), None, f"environmentSettings.connections.{broker}") from None
        clusters[broker] = c.address()
        if c.metrics.prometheus_conn_id:  # the cluster's own Prometheus: asked now, before anything runs
            from .prometheus import check

            try:
                prom = prometheus_for(c)
                if prom is not None:
                    version = check(prom)
                    metrics_from[broker] = f" (its metrics from Prometheus {version} at {prom.url})"
            except ExternalConnectionError as e:
                raise SpecError(f"{e} - the Prometheus of the {broker} cluster, named by connection {c.conn_id!r} "
                                f"(extra.prometheus_conn_id)", None,
                                f"environmentSettings.connections.{broker}") from None
    seen: set[tuple[str, str]] = set()
    for item in plan.items:
        if (item.broker, item.variant) in seen:
            continue
        seen.add((item.broker, item.variant))
        for key, value in sorted((item.broker_settings or {}).items()):
            raise SpecError(
                f"variant {item.variant!r} needs the broker-side setting {key}={value!r} on {item.broker}, which "
                f"the external environment cannot apply: it never restarts or reconfigures a cluster it did not "
                f"deploy ({clusters[item.broker]}). Run a variant without broker settings for {item.broker}, "
                f"or configure the cluster and use a variant that leaves {key} to it", None,
                f"variants.{item.variant}.{item.broker}.broker.{key}")
        if item.jvm_options:
            raise SpecError(
                f"variant {item.variant!r} gives {item.broker}'s JVM the options {' '.join(item.jvm_options)}, which "
                f"the external environment cannot apply: it never restarts a cluster it did not deploy "
                f"({clusters[item.broker]}). Run a variant without jvmOptions for {item.broker}", None,
                f"variants.{item.variant}.{item.broker}.jvmOptions")
    total_bytes, total_minutes = 0.0, 0.0
    for item in plan.items:
        w = item.workload
        what = f"workload {item.base_workload_id!r} on {item.broker}"
        rates = [float(r) for r in (w.sweep_rates_msg_s or [])] or [float(w.producer_rate)]
        if max(rates) == 0 and w.producers_per_topic:
            raise SpecError(f"{what}: producerRate 0 sends as fast as the clients can, with no bound; the external "
                            f"environment's max_rate_msg_s is {settings.max_rate_msg_s:g} msg/s: give a "
                            f"producerRate", None, "producerRate")
        if max(rates) > settings.max_rate_msg_s:
            raise SpecError(f"{what}: {max(rates):g} msg/s is above the external environment's max_rate_msg_s "
                            f"({settings.max_rate_msg_s:g} msg/s)", None,
                            "sweepRatesMsgS" if w.sweep_rates_msg_s else "producerRate")
        if w.message_size > settings.max_message_size_bytes:
            raise SpecError(f"{what}: messageSize {w.message_size} B is above the external environment's "
                            f"max_message_size_bytes ({settings.max_message_size_bytes} B)", None, "messageSize")
        minutes = (w.test_duration_minutes or 0) + ((w.warmup_duration_minutes or 0) if item.warms_up else 0)
        total_minutes += minutes
        total_bytes += max(rates) * w.message_size * minutes * 60.0
    if total_minutes > settings.max_duration_minutes:
        raise SpecError(f"the run's phases add up to {total_minutes:g} min, above the external environment's "
                        f"max_duration_minutes ({settings.max_duration_minutes:g} min)", None,
                        "testDurationMinutes")
    if total_bytes > settings.max_total_bytes:
        raise SpecError(f"the run would send up to {total_bytes:,.0f} bytes, above the external environment's "
                        f"max_total_bytes ({settings.max_total_bytes:,} bytes)", None, "producerRate")
    return {b: a + metrics_from.get(b, "") for b, a in clusters.items()}
