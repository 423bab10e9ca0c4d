"""The brokers' own metrics during a phase: a scraper beside the host sampler.

Each broker's catalog (``include/metrics/<broker>.yaml``, :func:`catalog`) names the figures brokerbench
reads from the broker's Prometheus endpoint, with their unit, kind and which way is worse:

- Apache Kafka: the Prometheus JMX exporter java agent (``io.prometheus.jmx:jmx_prometheus_javaagent``,
  resolved from Maven Central into the broker cache like the brokers, :mod:`.machine.exporters`), started with
  the broker's JVM and limited by ``include/metrics/kafka-jmx-exporter.yaml`` to the MBeans of the catalog;
- Apache Pulsar: the broker's ``/metrics`` (in standalone the embedded bookie's series are there too) and on a
  cluster each bookie's;
- RabbitMQ: the ``rabbitmq_prometheus`` plugin's ``/metrics`` (port 15692), enabled by the deploy.

One scraper process per host (``python -m brokerbench.environments.brokermetrics scrape``) lives and dies with
the phase like :mod:`.hostmetrics`: started by ``before_phase``, stopped by ``after_phase``, recorded in the
run's state directory (a teardown stops it), and ending by itself when the task that started it is gone.
Every ``--interval`` it reads every target once, parses the text with ``prometheus_client``'s parser and
writes one JSON line per target with the catalog's raw values (cumulative counters as read: rates are made by
the aggregation, which also sees a broker restart as a counter reset). The file's first line is its header:
the catalog entries and the targets, so the aggregation needs nothing but the file::

    {"header": {"host": "localhost", "interval_s": 1.0, "targets": [...], "catalog": [...]}}
    {"ts": 1764620000.123, "target": "kafka@127.0.0.1:41234", "scrape_ms": 7.1, "values": {"<id>": 12.5, ...}}
    {"ts": 1764620001.124, "target": "kafka@127.0.0.1:41234", "error": "URLError: [Errno 111] Connection refused"}

A value is a number, or for a ``timer`` and a ``ratio`` ``[sum, count]``, or for a ``quantile`` that names its
``count`` ``[quantile, count]``; a catalog metric with no matching series in a scrape is absent from its ``values``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..resources import data_dir

#: the kinds of catalog metric (docs/results-format.md, "Broker metrics")
Kind = Literal["gauge", "counter", "timer", "quantile", "ratio"]


class CatalogMetric(BaseModel):
    """One figure of a broker's catalog: where it is read and how it becomes a per-interval figure."""

    model_config = ConfigDict(extra="forbid")

    #: the column name: broker prefix, what, unit suffix (``kafka_produce_total_time_mean_ms``)
    id: str
    title: str
    unit: str
    #: gauge: the value read; counter: its rate per second; timer: the increase of a cumulative sum over the
    #: increase of its count in the interval (a mean per event); quantile: the broker's own quantile as read
    #: (never averaged: the phase figure is the highest); ratio: a sum over a count that the broker itself
    #: keeps per window of its own (Pulsar's per-minute topic stats), as read
    kind: Kind
    #: which target serves it: broker, bookie (Pulsar), node (RabbitMQ)
    role: str = "broker"
    #: the sample name (gauge, counter, quantile)
    series: str | None = None
    #: timer: the cumulative sum's sample, or the cumulative mean's (Kafka's JMX timers), and the count's;
    #: ratio: the window's sum and count; quantile: the count of the events it is a quantile of (its labels less
    #: ``quantile``), which its phase figure needs ``min_events`` of
    sum: str | None = None
    mean: str | None = None
    count: str | None = None
    #: quantile with a ``count``: the fewest events during a phase for its phase figure. The broker's quantile
    #: is of its own reservoir or window (Kafka's: biased to the last 5 minutes, whatever came before the phase
    #: included): a phase of a few flushes reads the quantile of the flushes before it, which is no figure of
    #: the phase (a 3-s trial of fsync-off with a handful of flushes read a log flush p99 87 % above the other
    #: side's, a cause the run never had). 100: one event beyond a p99
    min_events: int = 100
    #: labels a sample must carry (a subset of its labels)
    labels: dict[str, str] = Field(default_factory=dict)
    #: several samples match (GC collectors, queues): add them, or take the highest
    combine: Literal["sum", "max"] = "sum"
    #: multiplies the value read into ``unit``
    scale: float = 1.0
    #: the phase figure of a gauge: the mean of the intervals or the highest
    phase: Literal["mean", "max"] = "mean"
    #: several nodes: the worst node (the highest, or the lowest where lower is worse), or their sum
    across: Literal["worst", "sum"] = "worst"
    #: which way is worse
    worse: Literal["higher", "lower"] = "higher"
    #: a figure of the work the clients gave the broker (requests, bytes, messages per second): it follows the
    #: load and the clients' batching, so it is never a suspect of a change (brokerbench.suspects)
    load: bool = False
    #: the report panel that draws it (include/metrics/<broker>.yaml's ``panels``)
    panel: str
    #: what it means, for ``brokerbench list`` and the docs
    means: str
    #: what must exist for the broker to expose it (e.g. quorum queues): said with "not exposed"
    only: str | None = None

    @model_validator(mode="after")
    def _sources(self) -> "CatalogMetric":
        if self.kind == "timer":
            if not self.count or not (self.sum or self.mean) or (self.sum and self.mean):
                raise ValueError(f"{self.id}: a timer reads `count` and one of `sum` or `mean`")
        elif self.kind == "ratio":
            if not (self.sum and self.count):
                raise ValueError(f"{self.id}: a ratio reads `sum` and `count`")
        elif not self.series:
            raise ValueError(f"{self.id}: a {self.kind} reads `series`")
        if not self.id.endswith("_" + self.unit.replace("/", "_per_").replace("%", "percent")):
            raise ValueError(f"{self.id}: the id ends with its unit ({self.unit})")
        return self


class Panel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    #: stack the panel's series (the parts of one whole, e.g. a request's time)
    stacked: bool = False


class Catalog(BaseModel):
    """A broker's catalog file."""

    model_config = ConfigDict(extra="forbid")

    broker: str
    title: str
    #: where the broker exposes them and how brokerbench turns the endpoint on
    endpoint: str
    panels: list[Panel]
    metrics: list[CatalogMetric]

    @model_validator(mode="after")
    def _panels(self) -> "Catalog":
        known = {p.id for p in self.panels}
        for m in self.metrics:
            if m.panel not in known:
                raise ValueError(f"{m.id}: panel {m.panel!r} is not one of the catalog's panels ({sorted(known)})")
            if not m.id.startswith(self.broker + "_"):
                raise ValueError(f"{m.id}: the id starts with the broker's name ({self.broker}_)")
        ids = [m.id for m in self.metrics]
        if len(ids) != len(set(ids)):
            raise ValueError(f"{self.broker}: metric ids repeat")
        return self

    def for_role(self, role: str) -> list[CatalogMetric]:
        return [m for m in self.metrics if m.role == role]


#: the brokers that have a catalog
CATALOG_BROKERS = ("kafka", "pulsar", "rabbitmq")


def catalog_path(broker: str) -> Path:
    return data_dir("metrics") / f"{broker}.yaml"


@lru_cache(maxsize=None)
def catalog(broker: str) -> Catalog:
    """The broker's catalog (``include/metrics/<broker>.yaml``), validated; ValueError naming the file."""
    path = catalog_path(broker)
    try:
        return Catalog.model_validate(yaml.safe_load(path.read_text()))
    except Exception as e:  # noqa: BLE001 - the file is named with whatever is wrong in it
        raise ValueError(f"{path}: {e}") from None


# -- the endpoints --------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """One endpoint to scrape: a broker's role on one node."""

    broker: str
    role: str
    node: str
    url: str
    implementation: str = ""
    version: str = ""

    @property
    def name(self) -> str:
        """``<broker>[/<role>]@<node>``: the line key of the raw file"""
        role = "" if self.role in ("broker", "node") else f"/{self.role}"
        return f"{self.broker}{role}@{self.node}"

    def to_dict(self) -> dict[str, str]:
        return {"broker": self.broker, "role": self.role, "node": self.node, "url": self.url,
                "implementation": self.implementation, "version": self.version, "name": self.name}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Target":
        return cls(**{k: str(d.get(k) or "") for k in ("broker", "role", "node", "url", "implementation",
                                                          "version")})


# -- one scrape --------------------------------------------------------------------------------

def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """sample name -> [(labels, value)] of an exposition text (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, float(s.value)))
    return out


def sample_names(metrics: Iterable[CatalogMetric]) -> set[str]:
    """The sample names the catalog's ``metrics`` read (with prometheus_client's ``_total`` of a counter)."""
    names = {n for m in metrics for n in (m.series, m.sum, m.mean, m.count) if n}
    return names | {f"{n}_total" for n in names}


def only(text: str, names: set[str]) -> str:
    """The exposition text's sample lines of ``names`` alone (no comments): what the parser then reads is a few
    dozen lines instead of the whole endpoint (Pulsar's and RabbitMQ's are about 1,000)."""
    keep = []
    for line in text.splitlines():
        if line and line[0] != "#":
            end = len(line)
            for sep in ("{", " "):
                i = line.find(sep)
                if 0 < i < end:
                    end = i
            if line[:end] in names:
                keep.append(line)
    return "\n".join(keep) + "\n"


def _pick(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, labels: dict[str, str],
          combine: str) -> float | None:
    # the catalog names a sample as the endpoint exposes it (and as a Prometheus server stores it);
    # prometheus_client's parser calls a counter's sample <name>_total when the endpoint did not
    found = samples.get(name) or samples.get(f"{name}_total") or []
    vals = [v for lab, v in found if all(lab.get(k) == want for k, want in labels.items()) and not math.isnan(v)]
    if not vals:
        return None
    return sum(vals) if combine == "sum" else max(vals)


def extract(samples: dict[str, list[tuple[dict[str, str], float]]] | str,
            metrics: Iterable[CatalogMetric]) -> dict[str, Any]:
    """The catalog's raw values in one scrape (its text, or its samples as :func:`_samples` reads them): id ->
    value (scaled into the unit), or ``[sum, count]`` for a timer (the sum scaled), or ``[quantile, count]`` for a
    quantile that names its count (the quantile scaled; without its count in the scrape, the quantile alone); a
    metric without its series is left out."""
    if isinstance(samples, str):
        samples = _samples(samples)
    out: dict[str, Any] = {}
    for m in metrics:
        if m.kind in ("timer", "ratio"):
            count = _pick(samples, str(m.count), m.labels, m.combine if m.combine == "sum" else "sum")
            if count is None:
                continue
            if m.sum:
                total = _pick(samples, m.sum, m.labels, "sum")
            else:
                # Kafka's JMX timers: a cumulative mean and count; their product is the cumulative sum
                mean = _pick(samples, str(m.mean), m.labels, "max")
                total = None if mean is None else mean * count
            if total is not None:
                out[m.id] = [total * m.scale, count]
        else:
            v = _pick(samples, str(m.series), m.labels, m.combine)
            if v is None:
                continue
            count = None
            if m.kind == "quantile" and m.count:
                count = _pick(samples, m.count, {k: x for k, x in m.labels.items() if k != "quantile"}, "sum")
            out[m.id] = v * m.scale if count is None else [v * m.scale, count]
    return out


def scrape(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode("utf-8", errors="replace")


def header(host: str, interval: float, targets: list[Target]) -> dict[str, Any]:
    brokers = sorted({t.broker for t in targets})
    return {"header": {"host": host, "interval_s": interval, "targets": [t.to_dict() for t in targets],
                       "catalog": [{**m.model_dump(), "broker": b} for b in brokers for m in catalog(b).metrics],
                       "panels": {b: [p.model_dump() for p in catalog(b).panels] for b in brokers}}}


def scrape_forever(out: str, interval: float, host: str, targets: list[Target], watch_pid: int | None = None) -> None:
    """Append one line per target per ``interval`` to ``out`` until SIGTERM or until ``watch_pid`` is gone."""
    import psutil

    from .processes import alive, process_entry

    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))
    watched = None
    if watch_pid:
        try:
            watched = process_entry(psutil.Process(watch_pid), "brokermetrics", "phase task")
        except psutil.Error:
            return
    wanted = {t.name: catalog(t.broker).for_role(t.role) for t in targets}
    by_url: dict[str, list[Target]] = {}
    for t in targets:  # one read per endpoint (a Prometheus exporter may serve several roles' series)
        by_url.setdefault(t.url, []).append(t)
    names = {url: sample_names(m for t in group for m in wanted[t.name]) for url, group in by_url.items()}
    timeout = max(0.2, min(2.0, interval * 0.8))
    with open(out, "a") as f:
        f.write(json.dumps(header(host, interval, targets)) + "\n")
        f.flush()
        next_at = time.monotonic()
        left = 0.0
        while not stop["flag"]:
            for url, group in by_url.items():
                t0, ts = time.monotonic(), round(time.time(), 3)
                try:
                    samples = _samples(only(scrape(url, timeout), names[url]))
                    recs = [{"ts": ts, "target": t.name, "values": extract(samples, wanted[t.name])} for t in group]
                except Exception as e:  # noqa: BLE001 - a target that does not answer is a gap, never a failure
                    recs = [{"ts": ts, "target": t.name, "error": f"{type(e).__name__}: {e}"[:300]} for t in group]
                took = round((time.monotonic() - t0) * 1000, 2)
                for rec in recs:
                    f.write(json.dumps({**rec, "scrape_ms": took}) + "\n")
            f.flush()
            next_at += interval
            while not stop["flag"]:
                left = next_at - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.2))
                if watched is not None and not alive(watched):
                    stop["flag"] = True
            if left < -interval:  # scrapes took longer than an interval: keep the schedule, skip what is past
                next_at = time.monotonic()


# -- start and stop (the phase's) ---------------------------------------------------------------

def start(state_dir: str, out: str, host: str, interval: float, targets: list[Target],
          watch_pid: int | None = None) -> dict[str, Any]:
    """Start a detached scraper of ``targets`` writing to ``out``, recorded and marked in ``state_dir`` like
    every process of a run (a teardown stops it); it also ends when ``watch_pid`` is gone."""
    import psutil

    from .processes import MARKER_BROKER, MARKER_STATE, process_entry, record_processes

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    state = str(Path(state_dir).resolve())
    env = dict(os.environ, **{MARKER_STATE: state, MARKER_BROKER: "brokermetrics"})
    argv = [sys.executable, "-m", "brokerbench.environments.brokermetrics", "scrape", "--out", out,
            "--interval", str(interval), "--host", host,
            "--targets", json.dumps([t.to_dict() for t in targets])]
    if watch_pid:
        argv += ["--watch-pid", str(watch_pid)]
    with open(out + ".log", "ab") as errors:  # the scraper's own failures, if any
        proc = subprocess.Popen(argv, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errors)
    record_processes(Path(state), [process_entry(psutil.Process(proc.pid), "brokermetrics", "scraper")])
    Path(out + ".pid").write_text(str(proc.pid))
    return {"pid": proc.pid, "out": out, "targets": [t.name for t in targets]}


def stop(out: str) -> dict[str, Any]:
    """Stop the scraper started for ``out`` (idempotent)."""
    from .processes import stop_phase_process

    return stop_phase_process(out, "brokerbench.environments.brokermetrics")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m brokerbench.environments.brokermetrics")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scrape", help="append one JSON line per target and interval to --out until SIGTERM")
    s.add_argument("--out", required=True)
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--host", default=socket.gethostname())
    s.add_argument("--targets", required=True, help="JSON list of {broker, role, node, url, implementation, version}")
    s.add_argument("--watch-pid", type=int, help="end when this process is gone (the task that started it)")
    a = ap.parse_args(argv)
    if a.cmd == "scrape":
        scrape_forever(a.out, a.interval, a.host, [Target.from_dict(d) for d in json.loads(a.targets)], a.watch_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
