"""The job a worker runs: one typed contract shared by the pipeline (which writes it) and the worker.

A job travels as JSON (a file on the client host). :class:`Job` is its schema,
with its parts typed too: the OMB workload (:class:`JobWorkload`), the OMB
driver (:class:`JobDriver`) and where the broker listens (:class:`JobEndpoint`),
each keeping the keys it does not name. The pipeline and the cross-check build
every job with :meth:`Job.build`; a job goes to its file through one serialiser
(:meth:`Job.to_json`, :func:`job_json` at the environments' edge, where jobs
travel as dicts) and comes back through one parser (:func:`read_job`,
:meth:`Job.parse`), which names every bad field before the worker connects to
anything. The worker reads attributes; every default lives here, in the
models, and a job file holds only the fields that were set, as given
(camelCase OMB keys in the workload and driver), so the JVM engine
(``include/jvm-worker``) reads the same file. Only pydantic, which the worker
already needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: publish-delay p99 above which a measurement (or a sweep step) is not valid, ms
DELAY_P99_BOUND_MS = 50.0
#: throughput-sweep: publish latency p99 (send to acknowledgement) above which a step is not stable, ms, unless the
#: workload's ``sweepMaxPublishP99Ms`` (or the run param ``sweep_max_publish_p99_ms``) says otherwise. A step that
#: keeps its rate while its acknowledgements take seconds is no rate a latency-minded user runs at (a Kafka step
#: of 40,000 msg/s held its rate with a publish p99 of 1,378 ms on a 2-core machine); 200 ms is ten times the
#: p99s the seeds' latency figures show for a healthy broker and well above a loaded local one's
SWEEP_MAX_PUBLISH_P99_MS = 200.0

#: the workload kinds (docs/worker.md)
KINDS = ("latency", "throughput-sweep", "producer-only", "consumer-only", "backlog", "mixed")

#: the kinds whose measured phase starts with a lead-in (a constant schedule: modes.run_constant)
LEAD_IN_KINDS = ("latency", "producer-only", "mixed")
#: a measured phase's lead-in is a tenth of the phase, at most this long, s
LEAD_IN_MAX_S = 15.0


def lead_in_for(phase: str, kind: str, duration_s: float) -> float:
    """The lead-in of a phase, s: the load its own clients send before the phase records anything.

    Every phase runs in a new worker process, so its clients start cold: a JVM client compiles its hot paths
    in the first seconds, and a Python client opens its connections. The 2-minute trials of the nightly suite
    showed it: through the JVM engine the first 10-s interval's publish p99 was 2 to 4 times the rest's
    (docs/analytics.md, "The measured phase's lead-in"). OMB's workers measure with the clients they warmed up;
    here the measured phase starts at the target rate ``lead_in`` seconds before its first interval. Only a
    measured phase of a constant schedule has one (a sweep's steps, a backlog and a consumer-only phase judge
    their own starts).
    """
    if phase != "measure" or kind not in LEAD_IN_KINDS:
        return 0.0
    return round(min(LEAD_IN_MAX_S, max(0.0, duration_s) / 10.0), 3)


class JobError(ValueError):
    """A job that does not match :class:`Job`, with every bad field named (the worker exits 1)."""


class WorkerError(RuntimeError):
    """The phase failed (the worker exits 2; its result file keeps every interval measured)."""


def _problems(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())


_Part = TypeVar("_Part", bound="JobPart")


class JobPart(BaseModel):
    """A part of a job in OMB's own format: the keys the worker reads as typed attributes (camelCase in the
    file), every other key kept as given."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @classmethod
    def parse(cls: type[_Part], value: _Part | Mapping[str, Any] | None) -> _Part:
        """``value`` as this part (a mapping is validated: JobError names its bad keys)."""
        if isinstance(value, cls):
            return value
        try:
            return cls.model_validate(dict(value or {}))
        except ValidationError as e:
            raise JobError(f"invalid {cls.__name__} ({e.error_count()} problem(s)): {_problems(e)}") from None

    def to_dict(self) -> dict[str, Any]:
        """The keys that were set, as given (OMB's names)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class JobWorkload(JobPart):
    """The OMB workload (its keys the worker reads; defaults as OMB's)."""

    name: str | None = None
    kind: str | None = None
    partitions_per_topic: int = Field(default=1, alias="partitionsPerTopic")
    message_size: int | None = Field(default=None, alias="messageSize")
    producers_per_topic: int = Field(default=1, alias="producersPerTopic")
    subscriptions_per_topic: int = Field(default=1, alias="subscriptionsPerTopic")
    consumer_per_subscription: int = Field(default=1, alias="consumerPerSubscription")
    producer_rate: float = Field(default=0.0, alias="producerRate")
    consumer_backlog_size_gb: float | None = Field(default=0.0, alias="consumerBacklogSizeGB")
    backlog_drain_ratio: float = Field(default=1.0, alias="backlogDrainRatio")
    key_distributor: str | None = Field(default=None, alias="keyDistributor")
    payload_file: str | None = Field(default=None, alias="payloadFile")
    use_randomized_payloads: bool = Field(default=False, alias="useRandomizedPayloads")
    random_bytes_ratio: float = Field(default=0.5, alias="randomBytesRatio")
    randomized_payload_pool_size: int = Field(default=1000, alias="randomizedPayloadPoolSize")
    #: throughput-sweep: a step is stable only while its publish latency p99 stays at or below this, ms
    sweep_max_publish_p99_ms: float = Field(default=SWEEP_MAX_PUBLISH_P99_MS, alias="sweepMaxPublishP99Ms", gt=0)

    def kind_of(self, kind: str | None = None) -> str:
        """The workload kind: ``kind`` (the job's) if set, else the workload's, else derived from the OMB fields.

        consumerBacklogSizeGB > 0 -> backlog; no producers -> consumer-only; no
        consumers -> producer-only (unthrottled when producerRate is 0);
        producerRate 0 -> throughput-sweep (OMB's "find the maximum rate", done as
        Confluent did: fixed rates, the highest stable one reported); else latency.
        """
        kind = kind or self.kind
        if kind:
            if kind not in KINDS:
                raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
            return kind
        if (self.consumer_backlog_size_gb or 0) > 0:
            return "backlog"
        if self.producers_per_topic == 0:
            return "consumer-only"
        if self.subscriptions_per_topic * self.consumer_per_subscription == 0:
            return "producer-only"
        if self.producer_rate == 0:
            return "throughput-sweep"
        return "latency"


class PulsarPersistence(JobPart):
    """An OMB Pulsar driver's ``client.persistence`` section (the namespace's, or a topic's, BookKeeper quorums)."""

    ensemble_size: int = Field(default=1, alias="ensembleSize")
    write_quorum: int = Field(default=1, alias="writeQuorum")
    ack_quorum: int = Field(default=1, alias="ackQuorum")

    def __bool__(self) -> bool:
        """Whether the driver gave any of it (an empty section is none)."""
        return bool(self.to_dict())


class PulsarClientConfig(JobPart):
    """An OMB Pulsar driver's ``client`` section."""

    io_threads: int = Field(default=1, alias="ioThreads")
    persistence: PulsarPersistence | None = None


class PulsarProducerConfig(JobPart):
    """An OMB Pulsar driver's ``producer`` section."""

    batching_enabled: bool = Field(default=True, alias="batchingEnabled")
    batching_max_publish_delay_ms: int = Field(default=1, alias="batchingMaxPublishDelayMs")
    batching_max_bytes: int = Field(default=128 * 1024, alias="batchingMaxBytes")
    block_if_queue_full: bool = Field(default=True, alias="blockIfQueueFull")
    pending_queue_size: int = Field(default=10000, alias="pendingQueueSize")


class PulsarConsumerConfig(JobPart):
    """An OMB Pulsar driver's ``consumer`` section."""

    subscription_type: str = Field(default="Failover", alias="subscriptionType")
    receiver_queue_size: int = Field(default=1000, alias="receiverQueueSize")
    max_total_receiver_queue_size_across_partitions: int | None = Field(
        default=None, alias="maxTotalReceiverQueueSizeAcrossPartitions")


#: a Kafka driver's config block: OMB's Java-properties text, or a mapping
Properties = str | dict[str, Any] | None


class JobDriver(JobPart):
    """The OMB driver (variant applied): the keys of every broker's drivers, each broker reading its own."""

    name: str | None = None
    # kafka
    common_config: Properties = Field(default=None, alias="commonConfig")
    topic_config: Properties = Field(default=None, alias="topicConfig")
    producer_config: Properties = Field(default=None, alias="producerConfig")
    consumer_config: Properties = Field(default=None, alias="consumerConfig")
    replication_factor: int = Field(default=1, alias="replicationFactor")
    # pulsar
    client: PulsarClientConfig = Field(default_factory=PulsarClientConfig)
    producer: PulsarProducerConfig = Field(default_factory=PulsarProducerConfig)
    consumer: PulsarConsumerConfig = Field(default_factory=PulsarConsumerConfig)
    # rabbitmq
    queue_type: str = Field(default="CLASSIC", alias="queueType")
    message_persistence: bool = Field(default=False, alias="messagePersistence")
    exchange_type: str | None = Field(default=None, alias="exchangeType")
    amqp_uris: list[str] = Field(default_factory=list, alias="amqpUris")
    max_outstanding_confirms: int = Field(default=10000, alias="maxOutstandingConfirms")


class JobEndpoint(JobPart):
    """Where the broker listens (the environment's BrokerEndpoint as a dict)."""

    broker: str | None = None
    implementation: str | None = None
    version: str | None = None
    bootstrap_servers: str | None = None
    service_url: str | None = None
    http_url: str | None = None
    amqp_uris: list[str] = Field(default_factory=list)
    #: client properties for the client library; a secret as ``${env:BROKERBENCH_SECRET_...}``
    client_config: dict[str, Any] = Field(default_factory=dict)

    def where(self) -> str:
        """The broker's address, for error messages."""
        return self.bootstrap_servers or self.service_url or ",".join(self.amqp_uris) or "?"


class Job(BaseModel):
    """Required fields first; every optional one has its default here (the runner has none of its own)."""

    # scale-out and later versions may add fields: kept, never refused
    model_config = ConfigDict(extra="allow")

    worker: str = Field(description='name of this process, unique in the run (<host>-<index>)')
    phase: str = Field(description='warmup | measure')
    workload_id: str | None = Field(default=None, description='workload file stem, used in result paths')
    broker: str = Field(description='kafka | pulsar | rabbitmq')
    variant: str | None = Field(default=None, description='durability variant name')
    workload: JobWorkload = Field(description='OMB workload dict')
    driver: JobDriver = Field(description='OMB driver dict (variant already applied)')
    endpoint: JobEndpoint = Field(description='BrokerEndpoint dict: where the broker listens')
    topics: list[str] = Field(description='topic names, created by `prepare`')
    subscriptions: list[str] = Field(
        default_factory=list, description='subscription names (one per subscriptionsPerTopic)')
    duration_s: float = Field(description='length of the phase, s')
    interval_s: float = Field(default=10.0, description='reporting interval, s')
    rate_msg_s: float = Field(
        default=0.0, description="this process's total target rate over all its producers, msg/s (0 = none)")
    producers_per_topic: int = Field(default=0, description='producers this process runs per topic')
    consumers_per_subscription: int = Field(
        default=0, description='consumers this process runs per subscription')
    consumer_index_offset: int = Field(
        default=0, description="index of this process's first consumer within a subscription")
    consumers_in_subscription: int | None = Field(
        default=None, description='consumers per subscription over all processes (default: this process\'s, or 1)')
    start_at_ns: int | None = Field(default=None, description='optional wall-clock start shared by all processes, ns')
    probe_timeout_s: float = Field(default=60.0, description='bound of the readiness probe, s')
    drain_timeout_s: float = Field(
        default=10.0, description='bound of the wait for consumers after the last send, s')
    client_library: str | None = Field(
        default=None, description='optional: which library for the broker (default per broker)')
    kind: str | None = Field(
        default=None, description='optional workload kind (KINDS); default derived from the workload (workload_kind)')
    sweep_rates_msg_s: list[float] | None = Field(
        default=None, description="throughput-sweep: this process's target rates, one step each (default SWEEP_RATES)")
    step_duration_s: float | None = Field(
        default=None, description='throughput-sweep: length of one step, s (default duration_s / steps, >= interval_s)')
    sweep_max_delay_p99_ms: float = Field(
        default=DELAY_P99_BOUND_MS, description='throughput-sweep: publish-delay p99 bound of a stable step, ms')
    sweep_stop_after_unstable: int = Field(
        default=1, description='throughput-sweep: stop after this many unstable steps')
    consumer_idle_s: float = Field(
        default=5.0, description='consumer-only: end after this long without a message once some arrived, s')
    catchup_start_s: float | None = Field(
        default=None,
        description='mixed: when the catch-up subscription starts reading, s into the phase (default duration/3)')
    clock_offset_ms: float | None = Field(
        default=None, description="optional: this host's clock offset measured by host setup, ms (validity flags)")
    lead_in_s: float = Field(
        default=0.0, ge=0, allow_inf_nan=False,
        description="load at the target rate before the measured phase's first interval, not recorded (the clients' "
                    "start-up), s; Job.build sets it (lead_in_for)")
    switch_interval_s: float | None = Field(
        default=0.001, description="sys.setswitchinterval for this process (Python's is 0.005; 0 or null: leave it)")

    @classmethod
    def build(cls, *, workload: JobWorkload | Mapping[str, Any], **fields: Any) -> Job:
        """The job of one worker process running ``workload``: its rate, producers per topic, consumers per
        subscription (of this process and of the subscription) and its kind come from the workload unless
        ``fields`` set them; ``fields`` give the rest (worker, phase, broker, driver, endpoint, topics, ...). What
        every run and the cross-check build their jobs with."""
        w = JobWorkload.parse(workload)
        derived = {"rate_msg_s": w.producer_rate, "producers_per_topic": w.producers_per_topic,
                   "consumers_per_subscription": w.consumer_per_subscription,
                   "consumers_in_subscription": w.consumer_per_subscription, "kind": w.kind_of()}
        job = cls.parse({**derived, **fields, "workload": w})
        if "lead_in_s" not in fields:
            job.lead_in_s = lead_in_for(job.phase, w.kind_of(job.kind), job.duration_s)
        return job

    @classmethod
    def parse(cls, value: Job | Mapping[str, Any]) -> Job:
        """The one parser of a job: ``value`` as a :class:`Job` (a mapping is validated: JobError names every bad
        field)."""
        if isinstance(value, cls):
            return value
        try:
            return cls.model_validate(value)
        except ValidationError as e:
            raise JobError(f"invalid job ({e.error_count()} problem(s)): {_problems(e)}") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict of the job file: the fields that were set, as given (OMB's names in the parts)."""
        return self.model_dump(by_alias=True, exclude_unset=True)

    def to_json(self) -> str:
        """The one serialiser of a job: the job file's text (:meth:`to_dict` as JSON)."""
        return json.dumps(self.to_dict(), indent=2, default=str)

    def with_(self, **changes: Any) -> Job:
        """A copy with ``changes`` (fields of this model, already of their types: no validation)."""
        return self.model_copy(update=changes)


#: job field -> meaning (docs/worker.md, docs/results-format.md)
JOB_FIELDS: dict[str, str] = {name: f.description or "" for name, f in Job.model_fields.items()}


def check_job(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """Validate ``job`` against :class:`Job`; returns it unchanged, raises :class:`JobError`."""
    Job.parse(job)
    return job


def job_json(job: Job | Mapping[str, Any]) -> str:
    """A job file's text from a job or its dict (as the environments pass jobs): parsed, then serialised by
    :meth:`Job.to_json`."""
    return Job.parse(job).to_json()


def read_job(path: str | Path) -> Job:
    """A job file as a :class:`Job` (OSError when it cannot be read, JobError when it is not a valid job)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise JobError(f"not JSON: {e}") from None
    if not isinstance(data, dict):
        raise JobError(f"a job is a JSON object, not {type(data).__name__}")
    return Job.parse(data)
