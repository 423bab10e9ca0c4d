"""The environments' settings (a suite's ``environmentSettings``, refined by run params), typed.

One model per environment declares every setting: its type, default and
meaning. Each environment object holds its settings as its model
(``env.settings``, validated when the object is made from the plan's dict) and
reads them as attributes (tests/unit/test_settings_reads.py). The aws
environment's :data:`~brokerbench.environments.aws.settings_check.DEFAULTS`
are :class:`AwsSettings`' defaults; its settings check
(``aws.settings_check.check_settings``) refuses a bad value naming the setting,
before any machine exists.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class LocalSettings(BaseModel):
    """Settings of the ``local`` environment (and of the machine part the aws agent runs on a host)."""

    model_config = ConfigDict(extra="allow")

    state_dir: str | None = Field(None, description="the run's state directory; None: $BROKERBENCH_HOME/state/<run>")
    broker_versions: dict[str, str] = Field(
        default_factory=lambda: {"kafka": "4.1.1", "pulsar": "4.0.7"},
        description="Apache Kafka / Apache Pulsar version, resolved from Maven Central into the broker cache "
                    "(rabbitmq: the installed Debian package, which must match when given)")
    broker_implementations: dict[str, str] = Field(
        default_factory=dict, description='stand-ins for quick checks: {"kafka": "tansu", "pulsar": "pulsar-lite"}; '
                                          "default: the real brokers")
    kafka_home: str | None = Field(None, description="an unpacked Apache Kafka tarball instead of a Maven version")
    pulsar_home: str | None = Field(None, description="an unpacked Apache Pulsar tarball instead of a Maven version")
    kafka_heap_mb: int = Field(1024, description="heap of the Apache Kafka JVM, MB")
    kafka_sasl_plain_users: dict[str, str] = Field(
        default_factory=dict, description="Apache Kafka: a SASL_PLAINTEXT listener (PLAIN) with these logins "
                                          "{user: password} beside the PLAINTEXT one; the broker record's "
                                          "sasl_address says where")
    pulsar_heap_mb: int = Field(1024, description="heap of the Apache Pulsar JVM, MB (direct memory: the same)")
    pulsar_token_auth: bool = Field(False, description="Apache Pulsar: token authentication on (the admin "
                                                       "token is the broker record's token)")
    start_timeout_s: float = Field(120.0, description="how long a broker may take to serve, s")
    tuned_profile: str = Field("latency-performance", description="tuned-adm profile applied by host setup")
    disk_baseline_mb: int = Field(64, description="size of the disk baseline, MB (0: skipped)")
    metrics_interval_s: float = Field(1.0, description="host metrics sampling and broker metrics scraping interval, s")
    worker_processes: int | None = Field(None, description="worker processes per client host (default 1)")
    pulsar_lite_log_level: str = Field("info", description="log level of the pulsar-lite stand-in")
    cpu_pinning: dict[str, str] = Field(
        default_factory=dict, description='CPUs of the broker processes and of the clients, taskset\'s syntax, '
                                          'e.g. {"broker": "0", "client": "1"}; empty: not pinned '
                                          "(brokerbench.environments.cpus)")

    @field_validator("cpu_pinning")
    @classmethod
    def _cpu_lists(cls, v: dict[str, str]) -> dict[str, str]:
        from . import cpus

        return cpus.check_syntax(v)


class StaticHost(BaseModel):
    """A machine the user already has (setting ``static_hosts``): reached over SSH, never created or terminated."""

    model_config = ConfigDict(extra="forbid")

    address: str = Field(min_length=1, description="where SSH, the brokers' listeners and the clients reach it")
    role: Literal["broker", "metadata", "client"]
    name: str | None = Field(None, description="None: <role>-<n>, numbered from 0 in the order listed")


class AwsSettings(BaseModel):
    """Settings of the ``aws`` environment (docs/aws.md); the defaults are the environment's DEFAULTS."""

    model_config = ConfigDict(extra="allow")

    aws_conn_id: str = Field("brokerbench_aws", description="Airflow connection (type aws): credentials, region, "
                                                            "endpoint_url")
    ssh_conn_id: str = Field("brokerbench_ssh", description="Airflow connection (type ssh): login and private key")
    region_name: str | None = Field(None, description="None: the connection's region")
    ami: str | None = Field(None, description="required: an AMI with systemd, python3 and (for install) a JDK")
    subnet_id: str | None = None
    vpc_id: str | None = None
    key_name: str | None = None
    controller_cidr: str | None = Field(None, description="required: the address SSH and broker ports are opened to")
    address: Literal["private", "public"] = Field("private", description="which instance address the controller "
                                                                         "uses")
    instance_types: dict[str, str] = Field(
        default_factory=lambda: {"broker": "i3en.2xlarge", "metadata": "t3.small", "client": "c5.2xlarge"},
        description="EC2 instance type per role")
    counts: dict[str, int] = Field(default_factory=dict,
                                   description='instances per role; {"broker": 3, "metadata": 3, "client": 2} '
                                               "by default")
    broker_versions: dict[str, str] = Field(
        default_factory=lambda: {"kafka": "4.1.1", "pulsar": "4.0.7", "rabbitmq": "package"},
        description="the version of each broker (deploy_mode install): any Kafka or Pulsar release on Maven "
                    "Central; RabbitMQ: the hosts' package version, or 'package'")
    kafka_mode: Literal["kraft", "zookeeper", "by-release"] | None = Field(
        None, description="None or 'by-release': by the Kafka release (ZooKeeper before 3.3; 'by-release' overrides "
                          "a suite's mode, e.g. for an A/B run or bisection across 3.3)")
    tuning_profile: str = Field("default", description="named broker tunings (include/infra/aws/profiles.yaml)")
    cost_cap_usd: float | None = Field(100.0, description="refuse a run whose expected cost is above this")
    max_concurrent_runs: int = Field(1, description="runs holding fleets at once (the environment's lease slots)")
    max_lifetime_hours: float | None = Field(None, description="None: 1.5 x expected + 1 h")
    prices_usd_per_hour: dict[str, float] = Field(default_factory=dict,
                                                  description="hourly prices of instance types not in the table")
    deploy_mode: Literal["install", "local"] = Field("install", description="install the broker version, or run "
                                                                            "the local environment's brokers")
    artifact_source: Literal["controller", "apache-archive"] = Field(
        "controller", description="Kafka and Pulsar jars: controller, resolved from Maven Central by the controller "
                                  "and shipped to the hosts over SSH (no egress needed); apache-archive, each host "
                                  "downloads Apache's tarball")
    rabbitmq_source: Literal["package", "tarball"] = Field(
        "package", description="RabbitMQ from the hosts' package manager (version 'package': whatever it has) or "
                               "the generic-unix release tarball (needs egress)")
    data_dir: str = Field("/data", description="the brokers' data: <data_dir>/<host name>/<broker> on each host "
                                               "(host setup mounts the instance-store disks here)")
    heaps_mb: dict[str, int] = Field(default_factory=dict, description="JVM heaps on the hosts, MB, by process: "
                                                                       "kafka, pulsar-broker, bookie, zookeeper")
    host_addresses: dict[str, list[str]] = Field(
        default_factory=dict, description="per role, the addresses its hosts (in name order) are reached and "
                                          "listen at, in place of the instances' own (a static network "
                                          "mapping: NAT, tunnels, the loopback test fleet)")
    static_hosts: list[StaticHost] | None = Field(
        None, description="machines that exist (bare metal, on-premises, another cloud): no EC2 call at all; "
                          "host setup, install, clients and teardown as on EC2 (docs/aws.md, 'Machines you "
                          "already have')")
    remote_dir: str = Field("/opt/brokerbench", description="brokerbench's directory on the hosts")
    remote_python: str | None = Field(None, description="None: <remote_dir>/venv/bin/python, installed by host "
                                                        "setup")
    worker_install: Literal["auto", "never"] = Field(
        "auto", description="auto: install the controller's brokerbench where missing or stale (only with "
                            "remote_python None); never: only check it is there")
    worker_wheel: str | None = Field(None, description="None: build the wheel from the controller's source tree")
    worker_pip_args: list[str] = Field(default_factory=list, description='extra pip arguments on the hosts, e.g. '
                                                                         '["--index-url", "..."]')
    ssh_host_override: str | None = Field(None, description="bastion / tests: connect here instead of the "
                                                            "instance address")
    ssh_port: int | None = None
    host_changes: bool | None = Field(None, description="format disks, chrony, tuned, drop caches; None: not with "
                                                        "an override or host_addresses")
    tuned_profile: str = "latency-performance"
    time_sync_wait_s: float = 120
    disk_baseline_mb: int = 1024
    metrics_interval_s: float = 1.0
    ssh_timeout_s: int = 20
    state_dir: str | None = Field(None, description="the controller's state directory of the run; None: "
                                                    "$BROKERBENCH_HOME/state/<run>")
    instance_counts: dict[str, int] = Field(default_factory=dict,
                                            description="the run param instance_counts: refines counts, role by role")
    start_timeout_s: float | None = Field(None, description="how long a broker may take to serve, s; None: 300 "
                                                            "(deploy_mode install), the local environment's 120 "
                                                            "(deploy_mode local)")
    # deploy_mode local: the local environment's settings of the brokers, given to the agent on the broker host
    broker_implementations: dict[str, str] = Field(default_factory=dict, description="deploy_mode local: as the "
                                                                                     "local environment's")
    kafka_home: str | None = Field(None, description="deploy_mode local: as the local environment's")
    pulsar_home: str | None = Field(None, description="deploy_mode local: as the local environment's")
    kafka_heap_mb: int | None = Field(None, description="deploy_mode local: as the local environment's")
    pulsar_heap_mb: int | None = Field(None, description="deploy_mode local: as the local environment's")


class ExternalSettings(BaseModel):
    """Settings of the ``external`` environment (docs/external.md): clusters that exist, given by connection."""

    model_config = ConfigDict(extra="forbid")

    connections: dict[str, str] = Field(
        default_factory=dict, description="Airflow connection id per broker (kafka, pulsar, rabbitmq); default "
                                          "brokerbench_<broker>")
    clients: Literal["local", "aws"] = Field("local", description="where the worker processes run: local, this "
                                                                  "machine (the Airflow worker's); aws, a client "
                                                                  "fleet of the aws environment's (setting aws)")
    aws: dict[str, Any] = Field(default_factory=dict, description="clients aws: the client fleet's settings, named "
                                                                  "as the aws environment's (ami, controller_cidr, "
                                                                  "aws_conn_id, ssh_conn_id, instance_types.client, "
                                                                  "counts.client, cost_cap_usd, ...)")
    max_rate_msg_s: float = Field(10_000, gt=0, description="refuse a workload whose producer rate (or a sweep "
                                                             "rate) is above this; an unthrottled workload (rate "
                                                             "0) is refused too")
    max_message_size_bytes: int = Field(65_536, gt=0, description="refuse a larger messageSize")
    max_total_bytes: int = Field(10 * 1024 ** 3, gt=0, description="refuse a run whose messages (rate x size x "
                                                                   "warm-up and measured minutes, every workload "
                                                                   "and trial) add up to more")
    max_duration_minutes: float = Field(60.0, gt=0, description="refuse a run whose phases add up to more")
    state_dir: str | None = Field(None, description="the run's state directory; None: $BROKERBENCH_HOME/state/"
                                                    "<run>")
    worker_processes: int | None = Field(None, description="worker processes on this machine (default 1)")
    metrics_interval_s: float = Field(1.0, description="host metrics sampling interval of this machine, and of "
                                                       "the scrapes of the brokers' own metrics, s")
    # the environment params every suite DAG has (broker versions, implementations): ignored by external
    broker_versions: dict[str, str] | None = Field(None, description="not used: the cluster's version is "
                                                                      "recorded, never chosen")
    broker_implementations: dict[str, str] | None = Field(None, description="not used")

    @field_validator("connections")
    @classmethod
    def _brokers(cls, v: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(v) - {"kafka", "pulsar", "rabbitmq"})
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a broker (kafka, pulsar, rabbitmq)")
        return v


def defaults(model: type[BaseModel]) -> dict[str, Any]:
    """A settings model's defaults as a plain dict (the aws environment's DEFAULTS, merged under the given
    settings before they are validated)."""
    return model().model_dump()
