"""Cross-check: brokerbench's figures next to the broker vendors' own perf tools, on the same broker.

For a deployed broker (its endpoint dict and version), :func:`crosscheck` runs,
alternating phase by phase on the same broker process:

- the vendor tool, resolved from Maven Central into the broker cache
  (:func:`brokerbench.environments.machine.distributions.resolve`):

  ========  ===============================================  ==========================================
  broker    tool (artifact, version)                         what it reports
  ========  ===============================================  ==========================================
  kafka     ``org.apache.kafka.tools.ProducerPerformance``   publish (send -> ack) p50/p99/p99.9, whole ms
            (``org.apache.kafka:kafka-tools``, the broker's)
  pulsar    ``PulsarPerfTestTool produce`` (pulsar-perf)      publish p50/p99/p99.9 ms
            (``org.apache.pulsar:pulsar-testclient``, the broker's)
  rabbitmq  ``com.rabbitmq.perf.PerfTest`` (``com.rabbitmq:perf-test``,  confirm p50/p99 and consumer
            :data:`PERF_TEST_VERSION`)                       (end-to-end) p50/p99, µs; no p99.9
  kafka     ``org.apache.kafka.tools.EndToEndLatency``       end-to-end (send -> received) p50/p99/p99.9,
            (the same artifact), the end-to-end phase        whole ms, one message at a time
  ========  ===============================================  ==========================================

- brokerbench's worker (``python -m brokerbench.worker run``) with each driver
  of the broker, the same settings (:data:`SETTINGS`: acks, batching/linger,
  the fsync-off variant), the same rate, message size and duration.

Every phase gets a fresh topic (Kafka, Pulsar) or queue. The fixed-rate phases
are producer-only for Kafka and Pulsar (the vendor producers have no consumer)
and producer + one consumer for RabbitMQ (as PerfTest runs). A max-rate probe
runs each side producer-only and unthrottled.

The result is one table (:func:`agreement_table`): a row per side and phase,
every column named with its unit, and the ratio brokerbench / vendor per
percentile. The parsers of the tools' output are pure functions
(:func:`parse_kafka_producer_performance`, :func:`parse_pulsar_perf`,
:func:`parse_perf_test`), tested on the tools' real output.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .environments.base import EnvironmentFailure
from .environments.machine import distributions
from .histogram import LogHistogram
from .spec.clients import CLIENT_LIBRARIES
from .worker.job import Job

log = logging.getLogger("brokerbench")

#: what a cross-check raises when its broker or its tool cannot be had (a tool version the registry lacks, a
#: broker that does not start)
CrosscheckFailure = EnvironmentFailure
#: the RabbitMQ PerfTest release run against every RabbitMQ version (PerfTest speaks AMQP 0-9-1 to any)
PERF_TEST_VERSION = "2.22.1"
#: broker -> the vendor tool's name in the broker cache
TOOLS = {"kafka": "kafka-tools", "pulsar": "pulsar-testclient", "rabbitmq": "perf-test"}
#: heap of each vendor tool's JVM, MB (a 2-core machine also runs the broker); pulsar-perf builds every one of its
#: subcommands, with their latency recorders, before it runs one: 256 MB end in OutOfMemoryError at its start
TOOL_HEAP_MB = {"kafka": 256, "pulsar": 512, "rabbitmq": 256}

#: pulsar-perf's rate for the unthrottled probe, msg/s
PULSAR_PERF_UNTHROTTLED = 100_000_000

#: the settings both sides use, per broker: the OMB driver dict brokerbench's worker gets, and what is printed
SETTINGS: dict[str, dict[str, Any]] = {
    "kafka": {
        "driver": {"name": "kafka", "replicationFactor": 1,
                   "producerConfig": "acks=1\nlinger.ms=1\nbatch.size=131072",
                   "consumerConfig": "auto.offset.reset=latest"},
        "described": "acks=1, linger.ms=1, batch.size=131072, 1 partition, replication 1; fsync off (Kafka's "
                     "default: no flush per message)",
    },
    "pulsar": {
        "driver": {"name": "pulsar", "producer": {"batchingEnabled": True, "batchingMaxPublishDelayMs": 1,
                                                  "blockIfQueueFull": True, "pendingQueueSize": 10000},
                   "consumer": {"subscriptionType": "Failover", "receiverQueueSize": 10000}},
        "described": "batching on, max publish delay 1 ms, 10,000 pending messages, block if full; standalone "
                     "bookie with its journal's defaults",
    },
    "rabbitmq": {
        "driver": {"name": "rabbitmq", "queueType": "CLASSIC", "messagePersistence": False},
        "described": "classic queue, transient messages (delivery mode 1), publisher confirms with at most "
                     "10,000 outstanding, 1 producer and 1 consumer",
    },
}


# -- parsing the tools' output (pure) -----------------------------------------------------------------

@dataclass
class ToolFigures:
    """What one run of a tool printed: latencies in ms (None: not reported), achieved msg/s."""

    achieved_msg_s: float | None = None
    publish_p50_ms: float | None = None
    publish_p99_ms: float | None = None
    publish_p999_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    e2e_p999_ms: float | None = None
    records: int | None = None
    note: str = ""


_NUM = r"([\d.]+|NaN)"


def _f(x: str) -> float | None:
    return None if x == "NaN" else float(x)


def parse_kafka_producer_performance(text: str) -> ToolFigures:
    """Kafka's ProducerPerformance: the final line ``N records sent, X records/sec (.. MB/sec), A ms avg
    latency, M ms max latency, P ms 50th, .. ms 95th, P ms 99th, P ms 99.9th.`` (whole milliseconds), or with a
    warm-up (``--warmup-records``) the ``N steady state records sent, ...`` line after it; without either (the
    run was stopped), the records and rates of its 5-second window lines."""
    summary = (rf"(\d+) {{}}records sent, {_NUM} records/sec .*?, {_NUM} ms 50th, {_NUM} ms 95th, "
               rf"{_NUM} ms 99th, {_NUM} ms 99\.9th")
    # with --warmup-records (Kafka 4.2+) the steady state's own summary follows the whole run's
    final = re.findall(summary.format("steady state "), text) or re.findall(summary.format(""), text)
    if final:
        n, rate, p50, _p95, p99, p999 = final[-1]
        return ToolFigures(achieved_msg_s=_f(rate), publish_p50_ms=_f(p50), publish_p99_ms=_f(p99),
                           publish_p999_ms=_f(p999), records=int(n),
                           note="ProducerPerformance: percentiles in whole ms")
    windows = re.findall(rf"^(\d+) records sent, {_NUM} records/sec", text, re.M)
    if windows:
        n = sum(int(w[0]) for w in windows)
        rates = [float(w[1]) for w in windows]
        return ToolFigures(achieved_msg_s=sum(rates) / len(rates), records=n,
                           note="ProducerPerformance stopped before its summary: mean of its window rates")
    return ToolFigures(note="no ProducerPerformance figures in the output")


def parse_pulsar_perf(text: str) -> ToolFigures:
    """Pulsar's PerformanceProducer: ``Aggregated throughput stats --- N records sent --- X msg/s`` and
    ``Aggregated latency stats --- Latency: mean: .. ms - med: .. - 95pct: .. - 99pct: .. - 99.9pct: ..``."""
    out = ToolFigures(note="PerformanceProducer: aggregated stats")
    m = re.search(rf"Aggregated throughput stats --- (\d+) records sent --- {_NUM} msg/s", text)
    if m and int(m.group(1)) > 0:  # nothing sent (it stopped on an error): its zeros are no figures
        out.records, out.achieved_msg_s = int(m.group(1)), _f(m.group(2))
    m = re.search(rf"Aggregated latency stats --- Latency: mean:\s*{_NUM} ms - med:\s*{_NUM} - 95pct:\s*{_NUM} - "
                  rf"99pct:\s*{_NUM} - 99\.9pct:\s*{_NUM}", text)
    if m and out.records:
        out.publish_p50_ms, out.publish_p99_ms, out.publish_p999_ms = _f(m.group(2)), _f(m.group(4)), _f(m.group(5))
    if out.achieved_msg_s is None and out.publish_p50_ms is None:
        out.note = "no PerformanceProducer summary in the output"
    return out


def parse_perf_test(text: str) -> ToolFigures:
    """RabbitMQ PerfTest's summary: ``sending rate avg: X msg/s``, ``consumer latency
    min/median/75th/95th/99th a/b/c/d/e µs`` and ``confirm latency ...`` (µs, or ms with --use-millis).
    PerfTest prints no p99.9: those columns stay empty."""
    out = ToolFigures(note="PerfTest summary: confirm latency as publish, consumer latency as end-to-end; no p99.9")
    m = re.search(r"sending rate avg: ([\d.]+) msg/s", text)
    if m:
        out.achieved_msg_s = float(m.group(1))
    for what, prefix in (("consumer", "e2e"), ("confirm", "publish")):
        m = re.search(rf"{what} latency min/median/75th/95th/99th ([\d./]+) (µs|ms)", text)
        if m:
            vals = [float(v) for v in m.group(1).split("/")]
            scale = 1000.0 if m.group(2) == "µs" else 1.0
            setattr(out, f"{prefix}_p50_ms", vals[1] / scale)
            setattr(out, f"{prefix}_p99_ms", vals[4] / scale)
    return out


PARSERS = {"kafka": parse_kafka_producer_performance, "pulsar": parse_pulsar_perf, "rabbitmq": parse_perf_test}


def parse_kafka_end_to_end_latency(text: str) -> ToolFigures:
    """Kafka's EndToEndLatency: ``Avg latency: A ms`` and ``Percentiles: 50th = P, 99th = P, 99.9th = P`` (whole
    ms). It sends one message at a time and waits for its consumer to receive it before the next, so its rate
    is one message per average latency: achieved = 1000 / A msg/s."""
    out = ToolFigures(note="EndToEndLatency: one message at a time, send -> received; percentiles in whole ms; "
                           "achieved = 1000 / its average latency")
    avg = re.search(rf"Avg latency: {_NUM} ms", text)
    pct = re.search(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)", text)
    if avg and pct:
        a = _f(avg.group(1))
        out.achieved_msg_s = 1000.0 / a if a else None
        out.e2e_p50_ms, out.e2e_p99_ms, out.e2e_p999_ms = (float(pct.group(i)) for i in (1, 2, 3))
    else:
        out.note = "no EndToEndLatency summary in the output"
    return out


def summarise_worker_output(lines: list[str], warmup_s: float = 0.0) -> ToolFigures:
    """brokerbench's worker result file (JSON lines): intervals' histograms merged, acked / load_s. With
    ``warmup_s``, the intervals that start in the phase's first ``warmup_s`` seconds are left out, and the
    achieved rate is the kept intervals' acked messages over their length."""
    return summarise_worker_outputs([lines], warmup_s)


def summarise_worker_outputs(files: list[list[str]], warmup_s: float = 0.0) -> ToolFigures:
    """The result files of worker processes that ran side by side: histograms merged over all, achieved rates
    summed (each file's as in :func:`summarise_worker_output`); the note gives each file's end status."""
    hs = {k: LogHistogram() for k in ("publish_latency_us", "e2e_latency_us")}
    ends: list[dict[str, Any]] = []
    achieved: list[float | None] = []
    records = 0
    for lines in files:
        end: dict[str, Any] = {}
        phase_start: int | None = None
        kept_acked, kept_ns = 0, 0
        for line in lines:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("record") == "interval":
                phase_start = r["start_ns"] if phase_start is None else phase_start
                if r["start_ns"] - phase_start < warmup_s * 1e9:
                    continue
                kept_acked += r.get("acked") or 0
                kept_ns += r["end_ns"] - r["start_ns"]
                for k in hs:
                    if r.get(k):
                        hs[k].merge(LogHistogram.from_dict(r[k]))
            elif r.get("record") == "end":
                end = r
        acked = (end.get("totals") or {}).get("acked")
        load_s = end.get("load_s") or 0
        if warmup_s > 0:
            acked, load_s = kept_acked, kept_ns / 1e9
        achieved.append((acked / load_s) if acked and load_s else None)
        records += acked or 0
        ends.append(end)

    def ms(k: str, p: float) -> float | None:
        v = hs[k].percentile(p)
        return None if v is None else v / 1000.0

    statuses = [e.get("status", "no end record") for e in ends]
    note = ("worker " if len(files) == 1 else f"{len(files)} worker processes: ") + (
        statuses[0] if len(set(statuses)) == 1 else ", ".join(statuses))
    note += f", first {warmup_s:g} s left out" if warmup_s > 0 else ""
    errors = sorted({str(e["error"]) for e in ends if e.get("error")})
    note += (": " + "; ".join(errors)) if errors else ""
    return ToolFigures(achieved_msg_s=sum(a for a in achieved if a) or None,
                       publish_p50_ms=ms("publish_latency_us", 50), publish_p99_ms=ms("publish_latency_us", 99),
                       publish_p999_ms=ms("publish_latency_us", 99.9), e2e_p50_ms=ms("e2e_latency_us", 50),
                       e2e_p99_ms=ms("e2e_latency_us", 99), e2e_p999_ms=ms("e2e_latency_us", 99.9),
                       records=records or None, note=note)


# -- the table --------------------------------------------------------------------------------------

#: the table's columns, each with its unit; ratios are brokerbench / vendor (unitless)
COLUMNS = ["broker", "side", "client", "phase", "rate_msg_s", "size_B", "seconds", "publish_p50_ms", "publish_p99_ms",
           "publish_p999_ms", "e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms", "achieved_msg_s", "ratio_publish_p50",
           "ratio_publish_p99", "ratio_publish_p999", "ratio_e2e_p50", "ratio_e2e_p99", "ratio_e2e_p999", "ratio_achieved",
           "note"]
VENDOR = "vendor tool"
BROKERBENCH = "brokerbench"


@dataclass
class Measurement:
    """One phase of one side: which client, at what rate and size, and its figures."""

    broker: str
    side: str  # VENDOR or BROKERBENCH
    client: str  # the tool (e.g. "ProducerPerformance 4.1.1") or the driver (e.g. "confluent-kafka 2.x")
    phase: str  # "fixed" or "max"
    rate_msg_s: float | None  # target; None for the max-rate probe
    size_b: int
    seconds: float
    figures: ToolFigures = field(default_factory=ToolFigures)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def agreement_table(ms: list[Measurement]) -> list[dict[str, Any]]:
    """One row per measurement (:data:`COLUMNS`); a brokerbench row carries its ratios to the vendor row of
    the same broker, phase, rate and size."""
    vendor = {(m.broker, m.phase, m.rate_msg_s, m.size_b): m.figures for m in ms if m.side == VENDOR}
    rows = []
    for m in ms:
        f = m.figures
        row: dict[str, Any] = {
            "broker": m.broker, "side": m.side, "client": m.client, "phase": m.phase, "rate_msg_s": m.rate_msg_s,
            "size_B": m.size_b, "seconds": m.seconds,
            "publish_p50_ms": _r(f.publish_p50_ms), "publish_p99_ms": _r(f.publish_p99_ms),
            "publish_p999_ms": _r(f.publish_p999_ms), "e2e_p50_ms": _r(f.e2e_p50_ms), "e2e_p99_ms": _r(f.e2e_p99_ms),
            "e2e_p999_ms": _r(f.e2e_p999_ms), "achieved_msg_s": _r(f.achieved_msg_s, 0),
            "note": f.note}
        v = vendor.get((m.broker, m.phase, m.rate_msg_s, m.size_b)) if m.side == BROKERBENCH else None
        for k in ("publish_p50", "publish_p99", "publish_p999", "e2e_p50", "e2e_p99", "e2e_p999"):
            row[f"ratio_{k}"] = _ratio(getattr(f, f"{k}_ms"), getattr(v, f"{k}_ms")) if v else None
        row["ratio_achieved"] = _ratio(f.achieved_msg_s, v.achieved_msg_s) if v else None
        rows.append({c: row.get(c) for c in COLUMNS})
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The table as aligned text (empty cells for figures a side does not report)."""
    cols = [c for c in COLUMNS if c != "note"]
    cell = [[("" if r[c] is None else str(r[c])) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cell)) for i, c in enumerate(cols)] if cell else [len(c) for c in cols]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in cell]
    return "\n".join(out)


# -- running the sides ------------------------------------------------------------------------------

def tool_distribution(broker: str, version: str | None) -> distributions.Distribution:
    """The vendor tool's jars: Kafka's and Pulsar's at the broker's version, PerfTest at
    :data:`PERF_TEST_VERSION`. When the registry lacks the tool's own jar at the broker's version (it serves
    pulsar-testclient of some Pulsar releases only), the jar of the nearest patch release of the same line runs
    on every other library at the broker's version (``distributions.LIBRARY_BOMS``); the provenance records both
    versions."""
    tool = TOOLS[broker]
    if broker == "rabbitmq":
        return distributions.resolve(tool, PERF_TEST_VERSION)
    if not version:
        raise distributions.DistributionError(tool, "", "the deployed broker's version is unknown")
    try:
        return distributions.resolve(tool, version)
    except distributions.DistributionError as first:
        m = re.match(r"^(\d+)\.(\d+)\.(\d+)$", version)
        if not m:
            raise
        major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        tried = []
        for p in [patch - 1, patch + 1, patch - 2, patch + 2]:
            if p < 0:
                continue
            try:
                return distributions.resolve(tool, f"{major}.{minor}.{p}",
                                             libraries=version if tool in distributions.LIBRARY_BOMS else None)
            except distributions.DistributionError as e:
                tried.append(f"{e.version}: {e.reason}")
        raise distributions.DistributionError(tool, version, first.reason + "; the neighbouring patch releases "
                                              "neither: " + "; ".join(tried)) from None


def _log4j2_console(work: Path) -> str:
    conf = work / "log4j2-console.properties"
    conf.write_text("status = warn\nappender.c.type = Console\nappender.c.name = c\n"
                    "appender.c.layout.type = PatternLayout\nappender.c.layout.pattern = %m%n\n"
                    "rootLogger.level = info\nrootLogger.appenderRef.c.ref = c\n")
    return str(conf)


def tool_leaves_out_warmup(broker: str, dist: distributions.Distribution) -> bool:
    """Whether the vendor tool can leave its first seconds out of its figures: ProducerPerformance from Kafka
    4.2 (``--warmup-records``, KIP-1052), PerformanceProducer (``--warmup-time``); PerfTest cannot."""
    if broker == "kafka":
        m = re.match(r"^(\d+)\.(\d+)", dist.version)
        return m is not None and (int(m.group(1)), int(m.group(2))) >= (4, 2)
    return broker == "pulsar"


def vendor_argv(broker: str, dist: distributions.Distribution, endpoint: dict[str, Any], topic: str, rate: float,
                size: int, seconds: float, work: Path, warmup_s: float = 0.0) -> list[str]:
    """The vendor tool's command line (rate 0: unthrottled): ``warmup_s`` and then ``seconds`` (the warm-up
    left out of the figures where the tool can: :func:`tool_leaves_out_warmup`)."""
    jvm = [distributions.java(), f"-Xmx{TOOL_HEAP_MB[broker]}m", "-XX:+UseG1GC", "-Djava.net.preferIPv4Stack=true"]
    if broker == "kafka":
        props = SETTINGS["kafka"]["driver"]["producerConfig"].split("\n")
        per_s = rate if rate > 0 else 400_000
        warm = ["--warmup-records", str(int(per_s * warmup_s))] if warmup_s > 0 and tool_leaves_out_warmup(
            broker, dist) else []
        return [*jvm, "-cp", dist.classpath(), "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                "--num-records", str(max(int(per_s * (seconds + warmup_s)), 1)), "--record-size", str(size),
                "--throughput", str(int(rate)) if rate > 0 else "-1", *warm,
                "--producer-props", f"bootstrap.servers={endpoint['bootstrap_servers']}", *props]
    if broker == "pulsar":
        p = SETTINGS["pulsar"]["driver"]["producer"]
        client_conf = work / "pulsar-perf-client.conf"  # pulsar-perf's first argument: client settings (none)
        client_conf.write_text("")
        # `pulsar-perf produce`: in Pulsar 4.0 PerformanceProducer is a subcommand, without a main method of its own
        return [*jvm, f"-Dlog4j2.configurationFile={_log4j2_console(work)}", "-cp", dist.classpath(),
                "org.apache.pulsar.testclient.PulsarPerfTestTool", str(client_conf), "produce",
                "--service-url", endpoint["service_url"],
                # it refuses rate 0 ("rate must be positive"): unthrottled is a rate no producer reaches here
                "--rate", str(int(rate)) if rate > 0 else str(PULSAR_PERF_UNTHROTTLED), "--size", str(size),
                "--test-duration", str(int(seconds + warmup_s)),
                "--warmup-time", f"{warmup_s:g}",
                "--batch-time-window", str(p["batchingMaxPublishDelayMs"]),
                "--max-outstanding", str(p["pendingQueueSize"]), f"persistent://public/default/{topic}"]
    uri = endpoint["amqp_uris"][0]
    return [*jvm, "-cp", dist.classpath(), "com.rabbitmq.perf.PerfTest", "--uri", uri, "--producers", "1",
            "--consumers", "1" if rate > 0 else "0", "--size", str(size), "--time", str(int(seconds + warmup_s)),
            "--confirm", "10000", "--queue", topic, "--auto-delete", "true",
            *(["--rate", str(int(rate))] if rate > 0 else [])]


#: brokers whose vendor tools measure end-to-end latency on their own (Kafka's EndToEndLatency)
E2E_TOOLS = {"kafka": "EndToEndLatency"}
#: messages EndToEndLatency sends per second of a phase (it runs one at a time, about 1 to 3 ms each here)
E2E_MESSAGES_PER_S = 300


def vendor_e2e_argv(broker: str, dist: distributions.Distribution, endpoint: dict[str, Any], topic: str,
                    messages: int, size: int) -> list[str]:
    """Kafka's EndToEndLatency: ``<bootstrap> <topic> <messages> <acks> <size> [producer/consumer properties]``.
    It sets linger.ms=0 on its producer and fetch.max.wait.ms=0 on its consumer itself; acks as :data:`SETTINGS`."""
    if broker not in E2E_TOOLS:
        raise ValueError(f"{broker}: no vendor end-to-end latency tool")
    acks = re.search(r"acks=(\S+)", SETTINGS[broker]["driver"]["producerConfig"])
    jvm = [distributions.java(), f"-Xmx{TOOL_HEAP_MB[broker]}m", "-XX:+UseG1GC", "-Djava.net.preferIPv4Stack=true"]
    return [*jvm, "-cp", dist.classpath(), "org.apache.kafka.tools.EndToEndLatency", endpoint["bootstrap_servers"],
            topic, str(messages), acks.group(1) if acks else "1", str(size)]


def _run_tool(argv: list[str], work: Path, timeout_s: float) -> tuple[str, int | None]:
    """Run a vendor tool's JVM in its own process group; its output and exit code. An overrun is stopped."""
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            text, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            text, _ = proc.communicate()
    return text, proc.returncode


def _vendor_topic(broker: str, endpoint: dict[str, Any], size: int, seconds: float, rate: float = 0.0) -> str:
    """A fresh topic for a vendor phase, created as the worker's are (1 partition) unless the tool declares its
    own queue (RabbitMQ)."""
    topic = f"xcheck-{uuid.uuid4().hex[:8]}"
    if broker != "rabbitmq":
        from .worker.runner import prepare_job
        prepare_job(worker_job(broker, endpoint, CLIENT_LIBRARIES[broker][0], rate, size, seconds, topic=topic))
    return topic


def run_vendor_e2e(broker: str, dist: distributions.Distribution, endpoint: dict[str, Any], size: int,
                   seconds: float, work: Path) -> tuple[ToolFigures, str]:
    """The vendor's end-to-end latency tool for about ``seconds`` (:data:`E2E_MESSAGES_PER_S` messages each)."""
    topic = _vendor_topic(broker, endpoint, size, seconds)
    messages = max(100, int(seconds * E2E_MESSAGES_PER_S))
    text, rc = _run_tool(vendor_e2e_argv(broker, dist, endpoint, topic, messages, size), work, seconds * 10 + 60)
    (work / f"{broker}-vendor-e2e-{topic}.log").write_text(text)
    figures = parse_kafka_end_to_end_latency(text)
    figures.records = messages if figures.e2e_p50_ms is not None else None
    if rc not in (0, None) and figures.e2e_p50_ms is None:
        figures.note += f"; exit {rc}: " + " | ".join(text.strip().splitlines()[-3:])[:300]
    return figures, text


def run_vendor(broker: str, dist: distributions.Distribution, endpoint: dict[str, Any], rate: float, size: int,
               seconds: float, work: Path, warmup_s: float = 0.0) -> tuple[ToolFigures, str]:
    """Run the vendor tool once; its figures and its output (kept in ``work``). The JVM is stopped
    (its process group) when it overruns."""
    topic = _vendor_topic(broker, endpoint, size, seconds, rate)
    argv = vendor_argv(broker, dist, endpoint, topic, rate, size, seconds, work, warmup_s)
    text, returncode = _run_tool(argv, work, (seconds + warmup_s) * 3 + 60)
    (work / f"{broker}-vendor-{topic}.log").write_text(text)
    figures = PARSERS[broker](text)
    if broker == "pulsar" and figures.records:
        # its "Aggregated throughput" divides by the time to its next 10-second report, not by the test's length
        figures.achieved_msg_s = figures.records / (seconds + warmup_s)
        figures.note += "; achieved = records sent / test duration"
    if warmup_s > 0:
        figures.note += (f"; first {warmup_s:g} s left out" if tool_leaves_out_warmup(broker, dist)
                         else f"; whole run: {TOOL_NAMES[broker]} {dist.version} cannot leave its first "
                              f"{warmup_s:g} s out")
    if returncode not in (0, None) and figures.achieved_msg_s is None:
        figures.note += f"; exit {returncode}: " + " | ".join(text.strip().splitlines()[-3:])[:300]
    return figures, text


def worker_job(broker: str, endpoint: dict[str, Any], library: str, rate: float, size: int,
               seconds: float, topic: str | None = None, interval_s: float | None = None,
               consumer: bool | None = None) -> Job:
    """brokerbench's job for one phase (on a fresh topic unless ``topic`` is given), built as a run builds its
    jobs (:meth:`Job.build` from the workload): producer-only for Kafka / Pulsar and the max probe, producer + 1
    consumer for RabbitMQ at a fixed rate (as PerfTest); ``consumer`` True or False decides instead (the
    end-to-end phase has one)."""
    consumers = int(consumer) if consumer is not None else (1 if (broker == "rabbitmq" and rate > 0) else 0)
    topic = topic or f"xcheck-{uuid.uuid4().hex[:8]}"
    workload = {"name": "crosscheck", "topics": 1, "partitionsPerTopic": 1, "messageSize": size,
                "subscriptionsPerTopic": consumers, "consumerPerSubscription": consumers, "producersPerTopic": 1,
                "producerRate": rate, "testDurationMinutes": seconds / 60}
    return Job.build(workload=workload, worker="crosscheck-0", phase="measure", workload_id="crosscheck",
                     broker=broker, variant="fsync-off", driver=SETTINGS[broker]["driver"], endpoint=endpoint,
                     topics=[topic], subscriptions=["sub-0"] if consumers else [], duration_s=seconds,
                     interval_s=interval_s or max(1.0, min(10.0, seconds / 3)),
                     consumers_in_subscription=consumers or None, client_library=library, probe_timeout_s=60,
                     drain_timeout_s=10, kind="latency" if consumers else "producer-only")


@contextmanager
def _package_on_path() -> Iterator[None]:
    """This package importable by the worker processes started meanwhile (a checkout run without installing
    it, as ``bench/crosscheck.py`` is)."""
    pkg_root = str(Path(__file__).resolve().parents[1])
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([pkg_root, before or ""]).rstrip(os.pathsep)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def run_worker_processes(jobs: list[Job], work: Path, timeout_s: float) -> list[tuple[int | None, Path, str | None]]:
    """One worker process per job, side by side (topics prepared by the caller), started as a run starts them
    (:meth:`~.environments.machine.runtime.Machine.run_workers`: the job files, the process group killed after
    ``timeout_s``, the output in ``<work>/workers/workers/<worker>.log``); per job its exit code, result file
    (``<work>/<worker>.jsonl``) and what went wrong (None: it ended well)."""
    from .environments.machine.runtime import Machine

    machine = Machine(f"crosscheck/{uuid.uuid4().hex[:8]}", {"state_dir": str(work / "workers")})
    outs = [work / f"{job.worker}.jsonl" for job in jobs]
    with _package_on_path():
        results = machine.run_workers([job.to_dict() for job in jobs], [str(o) for o in outs], timeout_s)
    return [(r.get("returncode"), out, r.get("error")) for r, out in zip(results, outs)]


def run_worker(job: Job, work: Path, seconds: float, warmup_s: float = 0.0, processes: int = 1) -> ToolFigures:
    """``python -m brokerbench.worker run`` for ``job`` (topics prepared first), in ``processes`` processes side
    by side on the same topic; their merged figures, achieved rates summed. Each process runs the whole job (the
    max probe's one unthrottled producer), so N processes are N producers; a fixed-rate job would be split with
    ``worker.scaleout.split_job`` instead."""
    from .worker.runner import prepare_job

    prepare_job(job)
    topic = job.topics[0]
    jobs = [job.with_(worker=f"{topic}-{i}" if processes > 1 else topic) for i in range(processes)]
    runs = run_worker_processes(jobs, work, seconds * 3 + 120)
    figures = summarise_worker_outputs([out.read_text().splitlines() if out.exists() else [] for _, out, _ in runs],
                                       warmup_s)
    failed = [error or f"exit {rc}" for rc, _, error in runs if rc != 0]
    if failed and figures.achieved_msg_s is None:
        figures.note += "; " + failed[0][:300]
    return figures


def library_version(library: str) -> str:
    """The installed version of a client library (its distribution has the library's name); the JVM engine's
    (e.g. pulsar-client-java) is the Java client's version its pom pins."""
    from importlib import metadata

    from .worker import jvm

    for broker, (lib, _) in jvm.JVM_LIBRARIES.items():
        if lib == library:
            return jvm.library_version(broker)
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return "unknown"


TOOL_NAMES = {"kafka": "ProducerPerformance", "pulsar": "PerformanceProducer", "rabbitmq": "PerfTest"}


def crosscheck(broker: str, endpoint: dict[str, Any], version: str | None, *, rates=(1000.0, 10000.0),
               sizes=(100, 1024), seconds: float = 10.0, max_probe: bool = True, drivers: tuple[str, ...] | None = None,
               work_dir: str | os.PathLike[str] | None = None, say=print, warmup_s: float = 0.0,
               max_processes: int = 1, e2e: bool = True) -> dict[str, Any]:
    """Both sides on one deployed broker, alternating; returns {"rows", "settings", "provenance"}.
    ``warmup_s``: every phase runs that much longer and its first ``warmup_s`` seconds are left out of both
    sides' figures where the vendor tool can (:func:`tool_leaves_out_warmup`); where it cannot, both sides keep
    the whole run, so that they always measure the same window (the rows' notes and ``seconds`` say which).
    ``max_processes`` > 1: the max-rate probe also runs each driver in that many worker processes at once.
    ``e2e`` (brokers of :data:`E2E_TOOLS`): an end-to-end phase of the first size, the vendor's one-at-a-time
    tool first, then each driver with one consumer at the rate the tool reached (one message per its average
    latency), both whole runs of ``seconds``."""
    work = Path(work_dir or tempfile.mkdtemp(prefix="bb-crosscheck-"))
    work.mkdir(parents=True, exist_ok=True)
    dist = tool_distribution(broker, version)
    drivers = tuple(drivers or CLIENT_LIBRARIES[broker])
    libs = dist.manifest.get("libraries_version") or dist.version
    tool = f"{TOOL_NAMES[broker]} {dist.version}" + (f" (libraries {libs})" if libs != dist.version else "")
    ms: list[Measurement] = []
    left_out = warmup_s if tool_leaves_out_warmup(broker, dist) else 0.0
    measured_s = seconds + warmup_s - left_out
    phases = [("fixed", r, s) for s in sizes for r in rates] + ([("max", 0.0, sizes[0])] if max_probe else [])
    for phase, rate, size in phases:
        label = f"{int(rate)} msg/s {size} B" if rate else f"max rate {size} B"
        t0 = time.monotonic()
        figs, _ = run_vendor(broker, dist, endpoint, rate, size, seconds, work, warmup_s)
        ms.append(Measurement(broker, VENDOR, tool, phase, rate or None, size, measured_s, figs))
        say(f"crosscheck {broker} {label}: {tool}: {figs.achieved_msg_s} msg/s, publish p50 {figs.publish_p50_ms} ms "
            f"({time.monotonic() - t0:.0f} s)")
        for lib in drivers:
            for n in sorted({1, max_processes if phase == "max" else 1}):
                t0 = time.monotonic()
                figs = run_worker(worker_job(broker, endpoint, lib, rate, size, seconds + warmup_s,
                                             interval_s=1.0 if left_out > 0 else None), work, seconds + warmup_s,
                                  left_out, processes=n)
                client = f"{lib} {library_version(lib)}" + (f" x{n} processes" if n > 1 else "")
                ms.append(Measurement(broker, BROKERBENCH, client, phase, rate or None, size, measured_s, figs))
                say(f"crosscheck {broker} {label}: brokerbench+{client}: {figs.achieved_msg_s} msg/s, publish p50 "
                    f"{figs.publish_p50_ms} ms ({time.monotonic() - t0:.0f} s)")
    if e2e and broker in E2E_TOOLS:
        size = sizes[0]
        t0 = time.monotonic()
        figs, _ = run_vendor_e2e(broker, dist, endpoint, size, seconds, work)
        e2e_tool = f"{E2E_TOOLS[broker]} {dist.version}"
        rate = float(round(figs.achieved_msg_s)) if figs.achieved_msg_s else None
        ms.append(Measurement(broker, VENDOR, e2e_tool, "e2e", rate, size, seconds, figs))
        say(f"crosscheck {broker} end-to-end {size} B: {e2e_tool}: {figs.achieved_msg_s} msg/s, e2e p50 "
            f"{figs.e2e_p50_ms} ms ({time.monotonic() - t0:.0f} s)")
        if rate is not None:  # the tool measured: the drivers at its rate
            for lib in drivers:
                t0 = time.monotonic()
                figs = run_worker(worker_job(broker, endpoint, lib, rate, size, seconds, consumer=True), work, seconds)
                client = f"{lib} {library_version(lib)}"
                ms.append(Measurement(broker, BROKERBENCH, client, "e2e", rate, size, seconds, figs))
                say(f"crosscheck {broker} end-to-end {size} B at {rate:g} msg/s: brokerbench+{client}: e2e p50 "
                    f"{figs.e2e_p50_ms} ms ({time.monotonic() - t0:.0f} s)")
    return {"rows": agreement_table(ms), "measurements": [asdict(m) for m in ms],
            "settings": {"broker": broker, "described": SETTINGS[broker]["described"],
                         "driver": SETTINGS[broker]["driver"], "seconds_per_phase": seconds, "warmup_s": warmup_s,
                         "vendor_leaves_out_warmup": tool_leaves_out_warmup(broker, dist),
                         "max_probe_worker_processes": sorted({1, max_processes}),
                         "rates_msg_s": list(rates), "sizes_B": list(sizes), "max_probe": max_probe,
                         "e2e_phase": bool(e2e and broker in E2E_TOOLS),
                         "tool_heap_mb": TOOL_HEAP_MB[broker], "variant": "fsync-off"},
            "provenance": {"broker": broker, "broker_version": version, "tool": TOOL_NAMES[broker],
                           "tool_artifact": dist.manifest.get("artifact"), "tool_version": dist.version,
                           "tool_libraries_version": libs,
                           "client_libraries": {lib: library_version(lib) for lib in drivers},
                           "work_dir": str(work)}}


def write_results(result: dict[str, Any], dest: str | os.PathLike[str]) -> dict[str, str]:
    """``agreement.csv`` and ``agreement.json`` (rows, settings, provenance) in ``dest``."""
    import csv

    d = Path(dest)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "agreement.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in result["rows"]:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    (d / "agreement.json").write_text(json.dumps({k: result[k] for k in ("rows", "settings", "provenance")},
                                                 indent=1) + "\n")
    return {"csv": str(d / "agreement.csv"), "json": str(d / "agreement.json")}


#: the leading seconds of every phase left out of both sides' figures, by default (the vendor tools measure from
#: their first message: JVM start, metadata and JIT compilation show in their tails, docs/benchmarks-harness.md)
DEFAULT_WARMUP_S = 5.0


def add_phase_arguments(ap) -> None:
    """The phase options of ``bench/crosscheck.py`` and ``brokerbench calibrate`` (an argparse parser)."""
    ap.add_argument("--seconds", type=float, default=10.0, help="measured length of each phase, s (default 10)")
    ap.add_argument("--warmup", type=float, default=DEFAULT_WARMUP_S,
                    help=f"seconds run before each phase's measured seconds and left out of both sides' figures "
                         f"where the vendor tool can; where it cannot, both keep the whole run "
                         f"(default {DEFAULT_WARMUP_S:g})")
    ap.add_argument("--rates", default="1000,10000", help="fixed rates, msg/s (default 1000,10000)")
    ap.add_argument("--sizes", default="100,1024", help="message sizes, bytes (default 100,1024)")
    ap.add_argument("--drivers", help="brokerbench drivers (default: every driver of the broker)")
    ap.add_argument("--no-max", action="store_true", help="skip the producer-only max-rate probe")
    ap.add_argument("--no-e2e", action="store_true",
                    help="skip the end-to-end phase (Kafka: EndToEndLatency, then each driver with a consumer)")
    ap.add_argument("--max-processes", type=int, default=1,
                    help="the max-rate probe also runs each driver in this many worker processes at once "
                         "(brokerbench's scale-out; default 1: one process only)")


def phase_kwargs(args) -> dict[str, Any]:
    """:func:`crosscheck`'s keyword arguments from the options of :func:`add_phase_arguments`."""
    return {"rates": tuple(float(x) for x in args.rates.split(",") if x.strip()),
            "sizes": tuple(int(x) for x in args.sizes.split(",")),
            "seconds": args.seconds, "warmup_s": args.warmup, "max_probe": not args.no_max,
            "max_processes": args.max_processes, "e2e": not args.no_e2e,
            "drivers": tuple(args.drivers.split(",")) if args.drivers else None}


#: broker JVM heaps of a local cross-check on a 2-core machine that also runs the tool and the worker, MB
LOCAL_HEAPS = {"kafka_heap_mb": 512, "pulsar_heap_mb": 768}


def calibration_dir(results_root: str | os.PathLike[str], broker: str, when: float | None = None) -> Path:
    """``<results root>/calibration/<broker>/<UTC timestamp>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when if when is not None else time.time()))
    return Path(results_root) / "calibration" / broker / stamp


def calibrate_local(broker: str, results_root: str | os.PathLike[str] | None, *,
                    settings: dict[str, Any] | None = None, say=print,
                    **kwargs: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Deploy ``broker`` with the local environment, cross-check it, tear it down, write the table into
    :func:`calibration_dir` (not with ``results_root`` None). Returns the result and the files written.

    The vendor tool is resolved before the broker starts: a tool the registry lacks fails at once
    (:class:`~.environments.machine.distributions.DistributionError`), no JVM started."""
    from .environments.local import LocalEnvironment, check_brokers

    settings = {**LOCAL_HEAPS, **(settings or {})}
    expected = check_brokers(settings, [broker])[broker]
    tool_distribution(broker, expected.get("version"))
    state = tempfile.mkdtemp(prefix="bb-calibrate-")
    env = LocalEnvironment(f"calibrate/{uuid.uuid4().hex[:8]}", {"state_dir": state, "disk_baseline_mb": 0, **settings})
    env.provision()
    try:
        ep = env.deploy(broker, {}, "fsync-off", {}).to_dict()
        say(f"{broker} {ep.get('implementation')} {ep.get('version')} deployed on loopback")
        result = crosscheck(broker, ep, ep.get("version"), work_dir=f"{state}/crosscheck", say=say, **kwargs)
        result["provenance"].update({"environment": "local", "implementation": ep.get("implementation")})
    finally:
        env.teardown()
    return result, (write_results(result, calibration_dir(results_root, broker)) if results_root is not None else {})
