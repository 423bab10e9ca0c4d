"""One worker process running one phase (warm-up or measured) of a workload.

A *job* is a JSON-able dict (schema: :class:`brokerbench.worker.job.Job`) written by the
environment; the worker never needs Airflow. Flow:

1. connect: consumers first, then producers;
2. readiness probe (OMB): producers send probe messages (send time 0) until
   every subscription of every topic received one and every consumer is in
   place (a Kafka group member holds its partitions at fixed positions);
   bounded, with an error naming what never arrived;
3. load: every producer follows an open-loop uniform schedule
   ``intended_i = start + i / rate``; it sends at the intended time, or at
   once when it is late; the lateness is recorded as publish delay, so a
   client that cannot keep up shows it instead of quietly sending less;
4. intervals are written as they close; at the end producers flush, the
   consumers get a bounded time to drain, and the end record is written.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any, Callable

import psutil

from brokerbench import __version__
from brokerbench.worker.clients import Clients, ReadinessProbe
from brokerbench.worker.drivers import driver_class
from brokerbench.worker.job import DELAY_P99_BOUND_MS as DELAY_P99_BOUND_MS  # re-exported
from brokerbench.worker.job import JOB_FIELDS as JOB_FIELDS  # re-exported
from brokerbench.worker.job import KINDS as KINDS  # re-exported
from brokerbench.worker.job import Job, JobWorkload, WorkerError
from brokerbench.worker.layout import SWEEP_RATES as SWEEP_RATES  # re-exported
from brokerbench.worker.layout import ClientLayout
from brokerbench.worker.modes import MODES, Load, run_constant
from brokerbench.worker.payload import payload_pool
from brokerbench.worker.recorder import IntervalWriter, Recorder
from brokerbench.worker.validity import ACHIEVED_MIN_RATIO as ACHIEVED_MIN_RATIO  # re-exported
from brokerbench.worker.validity import CLIENT_CPU_BOUND_PERCENT as CLIENT_CPU_BOUND_PERCENT  # re-exported
from brokerbench.worker.validity import CLOCK_OFFSET_WARN_MS as CLOCK_OFFSET_WARN_MS  # re-exported
from brokerbench.worker.validity import HOST_CPU_BOUND_PERCENT as HOST_CPU_BOUND_PERCENT  # re-exported
from brokerbench.worker.validity import validity

log = logging.getLogger("brokerbench.worker")


def workload_kind(workload: JobWorkload | Mapping[str, Any], kind: str | None = None) -> str:
    """The workload kind (:meth:`JobWorkload.kind_of`) of a workload or its OMB dict."""
    return JobWorkload.parse(workload).kind_of(kind)


class _Phase:
    """One worker process running one phase of one workload (see the module docstring): its client layout, its
    clients and readiness probe, the load of its kind's run mode, and the validity rules on what it measured."""

    def __init__(self, job: Job, out_path: str, progress: Callable[[str], None]):
        self.job = job
        self.progress = progress
        self.layout = ClientLayout.of(job)
        self.recorder = Recorder()
        self.cls = driver_class(job.broker, job.client_library)
        self.writer = IntervalWriter(out_path, self._meta(), self.recorder, subscriptions=len(self.layout.subs),
                                     progress=progress, catchup=self.layout.catchup_sub is not None)
        self.clients = Clients()
        self.probe = ReadinessProbe(self.layout, job.probe_timeout_s)
        self.load = Load(job, self.layout, self.clients, self.writer, self.recorder, self.say)

    def _meta(self) -> dict[str, Any]:
        """The result file's meta record: what ran, where, against which broker."""
        job, layout = self.job, self.layout
        meta = {
            "format_version": 1, "kind": layout.kind,
            "workload": job.workload_id, "workload_name": job.workload.name or job.workload_id,
            "driver": job.driver.name or job.broker, "broker": job.broker,
            "variant": job.variant, "phase": job.phase, "worker": job.worker,
            "host": socket.gethostname(), "interval_s": layout.interval_s,
            "target_rate_msg_s": layout.target_rate(),
            "message_size_bytes": layout.message_size,
            "topics": len(layout.topics), "partitions_per_topic": layout.partitions,
            "producers": layout.n_producers,
            "consumers": layout.cps * layout.subscriptions_per_topic * len(layout.topics),
            "subscriptions_per_topic": layout.subscriptions_per_topic,
            "client_library": self.cls.client_library, "client_library_version": self.cls.client_library_version,
            "brokerbench_version": __version__,
            "broker_implementation": job.endpoint.implementation,
            "broker_version": job.endpoint.version,
            "start_at_ns": job.start_at_ns,
            "lead_in_s": job.lead_in_s,
        }
        if layout.kind == "throughput-sweep":
            meta["sweep_rates_msg_s"] = layout.sweep_rates
        return meta

    def say(self, text: str) -> None:
        self.progress(f"[{self.job.worker}] {text}")

    def connect(self) -> None:
        layout, clients = self.layout, self.clients
        clients.connect(self.cls, self.job, layout, self.recorder, self.probe.handler)
        self.say(f"{self.job.phase} ({layout.kind}): {len(clients.producers)} producers at {layout.described_rate()} "
                 f"in total, {len(clients.consumers) + len(clients.catchup_consumers)} consumers, "
                 f"topics {', '.join(layout.topics)}")

    def run(self) -> dict[str, Any]:
        job, load, writer = self.job, self.load, self.writer
        status, error = "ok", None
        cpu_percent = host_cpu = None
        try:
            self.connect()
            self.probe.run(self.clients, writer, self.recorder, load.errors,
                           lambda: payload_pool(job.workload)[0], self.say)
            self.clients.measure(self.recorder)
            with _CpuUse() as cpu:
                MODES.get(self.layout.kind, run_constant)(load)
            cpu_percent, host_cpu = cpu.process_percent, cpu.host_percent
            dead = self.clients.dead()
            if load.errors:
                status, error = "error", load.errors[0]
            elif dead:
                status, error = "error", f"consumer: {dead[0]}"
        except Exception as e:
            status, error = "error", f"{type(e).__name__}: {e}"
        finally:
            self.clients.close()

        writer.stop_segment()
        t = writer.totals
        unacked = t["sent"] - t["acked"] - t["send_errors"]
        if status == "ok" and (t["send_errors"] or unacked > 0):
            error = (f"{t['send_errors']} sends failed and {max(unacked, 0)} were never acknowledged "
                     f"(last error: {self.recorder.last_error})")
            status = "error"
        judged = validity(load.facts(), cpu_percent, host_cpu)
        extra = dict(load.extra_end)
        if writer.catchup_received:
            extra["catchup_received"] = writer.catchup_received
        writer.finish(status=status, error=error, cpu_percent=judged["cpu_percent"], kind=self.layout.kind,
                      validity=judged, load_s=round(load.load_s, 3), **extra)
        # the row's status is decided by the aggregation (it adds the host-load and merged achieved-rate
        # rules): this line says what the worker saw, never "ok" for a row the summary may call invalid
        seen = ("invalid: " + "; ".join(judged["invalid_reasons"]) if judged["invalid_reasons"]
                else "no invalidity seen by the worker")
        self.say(f"{job.phase} done: sent {t['sent']} acked {t['acked']} received {t['received']} "
                 f"errors {t['send_errors']} cpu {judged['cpu_percent'] or 0:.0f}% worker {status}; "
                 f"{seen} (the row's status is the summary's)")
        if status != "ok":
            raise WorkerError(f"worker {job.worker} ({job.broker} at {job.endpoint.where()}): {error}")
        return {**t, "validity": judged, "load_s": load.load_s, **extra}


class _CpuUse:
    """This process's CPU (% of one core) and the host's (% of all cores) over the ``with`` block; both stay None
    when the block raises."""

    def __enter__(self) -> _CpuUse:
        self.process_percent: float | None = None
        self.host_percent: float | None = None
        self._proc = psutil.Process()
        self._cpu0 = self._proc.cpu_times()
        self._wall0 = time.monotonic()
        psutil.cpu_percent(None)
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        if exc_type is not None:
            return
        cpu1 = self._proc.cpu_times()
        self.host_percent = psutil.cpu_percent(None)
        self.process_percent = 100.0 * ((cpu1.user - self._cpu0.user) + (cpu1.system - self._cpu0.system)) / max(
            time.monotonic() - self._wall0, 1e-9)


def as_job(job: Job | dict[str, Any]) -> Job:
    """The job as a :class:`Job` (a dict, e.g. read from a job file, is validated: JobError names its fields)."""
    return Job.parse(job)


def run_job(job: Job | dict[str, Any], out_path: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one phase; write the result file; return the totals and the end record's extras.

    Raises WorkerError after writing the file when the phase did not end well
    (every interval measured before the failure is kept in the file).
    """
    job = as_job(job)
    if getattr(driver_class(job.broker, job.client_library), "engine", None) == "jvm":
        return _run_in_jvm(job, out_path, progress)
    switch = job.switch_interval_s
    if switch:
        # the producer thread waits for the GIL after each wait for its schedule;
        # with Python's 5 ms default a library thread holding the GIL shows up
        # as milliseconds of publish delay
        sys.setswitchinterval(float(switch))
    return _Phase(job, out_path, progress).run()


def _run_in_jvm(job: Job, out_path: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """The JVM engine runs the phase (brokerbench.worker.jvm); the same return and errors as :func:`run_job`."""
    import json

    from brokerbench.worker import jvm

    try:
        code, last = jvm.run_job(job, out_path, progress=progress)
    except jvm.JvmEngineError as e:
        raise WorkerError(f"worker {job.worker} ({job.broker}): JVM engine: {e}") from None
    end: dict[str, Any] = {}
    try:
        with open(out_path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record.get("record") == "end":
                    end = record
    except (OSError, ValueError):
        pass
    if code != 0:
        why = end.get("error") or last or f"exit {code}"
        raise WorkerError(f"worker {job.worker} ({job.broker} at {job.endpoint.where()}): JVM engine: {why}")
    extra = {k: v for k, v in end.items() if k not in ("record", "end_ns", "status", "error", "totals", "cpu_percent",
                                                       "kind")}
    return {**end.get("totals", {}), **extra}


def prepare_job(job: Job | dict[str, Any]) -> None:
    """Create the job's topics and subscriptions on the broker."""
    job = as_job(job)
    cls = driver_class(job.broker, job.client_library)
    if getattr(cls, "engine", None) == "jvm":
        from brokerbench.worker import jvm

        jvm.ensure_built(progress=lambda line: log.info("%s", line))  # before the phases: they start on time
    driver = cls(job.endpoint, job.driver, Recorder())
    try:
        driver.prepare(job.topics, job.workload.partitions_per_topic, job.subscriptions)
    finally:
        driver.close()
