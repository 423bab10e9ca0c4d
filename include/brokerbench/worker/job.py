"""The job a worker runs: one typed contract shared by the pipeline (which writes it) and the worker.

A job travels as JSON (a file on the client host). :class:`Job` is its schema:
the pipeline builds every job through it (``brokerbench.pipeline.benchmark._job``), the worker
validates the job file against it before it connects to anything, so a bad
job fails at once naming its fields. The worker still reads the job as the
the runner reads a :class:`Job`: every default lives here, in the model, and
``to_dict`` writes only the fields that were set, so a job file stays as the
pipeline wrote it. Only pydantic, which the worker already needs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: publish-delay p99 above which a measurement (or a sweep step) is not valid, ms
DELAY_P99_BOUND_MS = 50.0


class Job(BaseModel):
    """Required fields first; every optional one has its default here (the runner has none of its own)."""

    # scale-out and later versions may add fields: kept, never refused
    model_config = ConfigDict(extra="allow")

    worker: str = Field(description='name of this process, unique in the run (<host>-<index>)')
    phase: str = Field(description='warmup | measure')
    workload_id: str | None = Field(default=None, description='workload file stem, used in result paths')
    broker: str = Field(description='kafka | pulsar | rabbitmq')
    variant: str | None = Field(default=None, description='durability variant name')
    workload: dict[str, Any] = Field(description='OMB workload dict')
    driver: dict[str, Any] = Field(description='OMB driver dict (variant already applied)')
    endpoint: dict[str, Any] = Field(description='BrokerEndpoint dict: where the broker listens')
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
    switch_interval_s: float | None = Field(
        default=0.001, description="sys.setswitchinterval for this process (Python's is 0.005; 0 or null: leave it)")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict written to the job file: the fields that were set, as given."""
        return self.model_dump(exclude_unset=True)


#: job field -> meaning (docs/worker.md, docs/results-format.md)
JOB_FIELDS: dict[str, str] = {name: f.description or "" for name, f in Job.model_fields.items()}


class JobError(ValueError):
    """A job that does not match :class:`Job`, with every bad field named."""


def check_job(job: dict[str, Any]) -> dict[str, Any]:
    """Validate ``job`` against :class:`Job`; returns it unchanged, raises :class:`JobError`."""
    try:
        Job.model_validate(job)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise JobError(f"invalid job ({e.error_count()} problem(s)): {problems}") from None
    return job
