"""An external cluster's own metrics read from its Prometheus (docs/external.md, "The brokers' own metrics").

After each phase, one instant query per catalog sample name (``include/metrics/<broker>.yaml``: the names the
scraper reads from a /metrics text, the catalog's labels as matchers, plus the connection's
``prometheus_labels``) over a range selector ``name{...}[<window>]`` at the phase's end: Prometheus answers
with the raw samples and the time of the scrape that took each one. Every Prometheus ``instance`` is a node,
one :class:`~..brokermetrics.Target` per instance and catalog role it serves; the samples of one scrape (one
instance, one timestamp) become one line of the scraper's own file format (:mod:`..brokermetrics`: its
header, then ``{"ts", "target", "values"}`` per target and scrape), so the aggregation reads them as it reads
a scrape. A scrape Prometheus recorded as failed (``up == 0``) is a line with an ``error`` (a gap); a
Prometheus that does not answer at the end of the phase gives an ``error`` line per interval of the window.

Raw samples rather than a ``query_range`` grid: a grid repeats the last sample at every step (counters would
look flat, then jump), while the raw samples carry their own scrape times, so rates are exact over the
Prometheus' own scrape interval (which bounds the figures' resolution: a phase of a few of its intervals has
few readings).
"""

from __future__ import annotations

import json
import math
import ssl
import statistics
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from typing import Any

from ..brokermetrics import Target, catalog, extract, header
from .connections import ExternalConnectionError, PrometheusConnection

#: how far before the phase's start the window reaches: a reading before the workers' first interval is the
#: counters' starting point (a Prometheus scrapes every 15 to 60 s as a rule), s
LOOKBACK_S = 60.0


def _get(prom: PrometheusConnection, path: str, params: dict[str, str]) -> Any:
    """GET ``<url>/api/v1/<path>``; the answer's ``data``. Raises OSError / ValueError with what went wrong."""
    url = f"{prom.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    req = urllib.request.Request(url, headers={"Accept": "application/json", **prom.headers()})
    context = ssl.create_default_context(cafile=prom.ca_file) if prom.ca_file else None
    try:
        with urllib.request.urlopen(req, timeout=prom.timeout_s, context=context) as r:
            body = r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        said = " ".join(e.read().decode(errors="replace").split())[:300]
        raise OSError(f"HTTP {e.code} {e.reason}" + (f": {said}" if said else "")
                      + (" (the connection's credentials were refused)" if e.code in (401, 403) else "")) from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise ValueError(f"not Prometheus' HTTP API: the answer is not JSON ({body[:120]!r})") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise ValueError(f"Prometheus answered {answer.get('errorType', '') if isinstance(answer, dict) else ''}: "
                         f"{answer.get('error', answer) if isinstance(answer, dict) else answer}")
    return answer.get("data")


def check(prom: PrometheusConnection) -> str:
    """Ask the server for the scalar 1 (any server of Prometheus' API answers it); its build version when it
    tells it. Raises ExternalConnectionError naming the connection when it cannot be reached or is no
    Prometheus."""
    try:
        data = _get(prom, "query", {"query": "1"})
        if not isinstance(data, dict) or data.get("resultType") != "scalar":
            raise ValueError(f"not Prometheus' HTTP API: /api/v1/query?query=1 answered {str(data)[:120]!r}")
    except (OSError, ValueError) as e:
        raise ExternalConnectionError(f"the Prometheus at {prom.url} cannot be reached: {type(e).__name__}: {e}",
                                      prom.conn_id) from None
    try:
        return str((_get(prom, "status/buildinfo", {}) or {}).get("version") or "unknown")
    except (OSError, ValueError):
        return "unknown"  # Thanos, Mimir...: the query API without the status one


def selector(name: str, labels: dict[str, str]) -> str:
    """``name{k="v",...}`` with the values escaped as PromQL strings."""
    quoted = ",".join(f'{k}={json.dumps(v)}' for k, v in sorted(labels.items()))
    return f"{name}{{{quoted}}}"


def queries(broker: str, labels: dict[str, str]) -> list[str]:
    """One selector per catalog sample name and label set of ``broker`` (the connection's ``labels`` added)."""
    out: list[str] = []
    for m in catalog(broker).metrics:
        for name in (m.series, m.sum, m.mean, m.count):
            if name:
                q = selector(name, {**m.labels, **labels})
                if q not in out:
                    out.append(q)
    return out


def _window(start: float, end: float) -> str:
    return f"{max(1, int(math.ceil((end - start) * 1000)))}ms"


def read_window(prom: PrometheusConnection, broker: str, labels: dict[str, str], start: float, end: float,
                implementation: str = "external", version: str = "") -> tuple[list[Target], list[dict[str, Any]]]:
    """(targets, lines): the catalog's samples of ``broker`` that Prometheus took between ``start`` and ``end``
    (unix s), as the scraper's lines (one per target and scrape, in time order). Raises OSError / ValueError
    when Prometheus does not answer."""
    cat = catalog(broker)
    window = _window(start, end)
    at = f"{end:.3f}"
    # instance -> ts (ms) -> sample name -> [(labels, value)]
    scrapes: dict[str, dict[int, dict[str, list[tuple[dict[str, str], float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    seen: set[tuple] = set()
    for q in queries(broker, labels):
        data = _get(prom, "query", {"query": f"{q}[{window}]", "time": at})
        for series in (data or {}).get("result", []):
            metric = dict(series.get("metric") or {})
            name = metric.pop("__name__", "")
            instance = metric.get("instance", "")
            for ts, value in series.get("values", []):
                key = (instance, name, tuple(sorted(metric.items())), ts)
                if key in seen:  # a series two selectors both match
                    continue
                seen.add(key)
                scrapes[instance][int(round(float(ts) * 1000))][name].append((metric, float(value)))
    # the scrapes Prometheus recorded as failed, for the instances that serve the catalog
    if not scrapes:
        raise ValueError(f"it holds no sample of the {broker} catalog's series"
                         + (f" with {selector('', labels)}" if labels else "") + " in the phase's window")
    down: dict[str, list[int]] = defaultdict(list)
    if scrapes:
        data = _get(prom, "query", {"query": f"{selector('up', labels)}[{window}]", "time": at})
        for series in (data or {}).get("result", []):
            instance = (series.get("metric") or {}).get("instance", "")
            if instance in scrapes:
                down[instance] += [int(round(float(ts) * 1000)) for ts, v in series.get("values", [])
                                   if float(v) == 0]
    targets: list[Target] = []
    lines: list[dict[str, Any]] = []
    for instance in sorted(scrapes):
        names = {n for by_name in scrapes[instance].values() for n in by_name}
        for role in dict.fromkeys(m.role for m in cat.metrics):
            wanted = cat.for_role(role)
            if not any(n in names for m in wanted for n in (m.series, m.sum, m.mean, m.count) if n):
                continue
            t = Target(broker, role, instance, f"{prom.url} (Prometheus connection {prom.conn_id!r}, "
                                               f"instance {instance!r})", implementation, version)
            targets.append(t)
            for ts_ms, samples in scrapes[instance].items():
                lines.append({"ts": ts_ms / 1000, "target": t.name, "values": extract(dict(samples), wanted)})
            for ts_ms in down.get(instance, []):
                lines.append({"ts": ts_ms / 1000, "target": t.name,
                              "error": f"Prometheus {prom.conn_id!r}: up == 0 (its scrape of {instance} failed)"})
    lines.sort(key=lambda line: (line["ts"], line["target"]))
    return targets, lines


def from_start(lines: list[dict[str, Any]], start: float) -> list[dict[str, Any]]:
    """The lines from ``start`` on, and each target's last one before it (the counters' starting point: the
    scraper's first scrape, made before the workers start, is the same)."""
    last_before: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line["ts"] < start and "values" in line:
            last_before[line["target"]] = line
    keep = {id(line) for line in last_before.values()}
    return [line for line in lines if line["ts"] >= start or id(line) in keep]


def spacing(lines: list[dict[str, Any]], default: float) -> float:
    """The median time between two scrapes of a target: the interval of the file's header."""
    by: dict[str, list[float]] = defaultdict(list)
    for line in lines:
        by[line["target"]].append(line["ts"])
    gaps = [b - a for ts in by.values() for a, b in zip(sorted(ts), sorted(ts)[1:]) if b > a]
    return round(statistics.median(gaps), 3) if gaps else default


def write_phase(out: str, host: str, prom: PrometheusConnection, broker: str, labels: dict[str, str],
                start: float, end: float | None = None, interval: float = 1.0, implementation: str = "external",
                version: str = "") -> dict[str, Any]:
    """The phase's file (the scraper's format) at ``out`` from Prometheus' samples of the window ``start -
    LOOKBACK_S`` to ``end`` (now): those from ``start`` on, and the last before it (:func:`from_start`). When
    Prometheus does not answer, or holds none of the catalog's series, an ``error`` line per ``interval`` of
    the phase (a gap the row names). Returns what was written."""
    end = time.time() if end is None else end
    try:
        targets, lines = read_window(prom, broker, labels, start - LOOKBACK_S, end, implementation, version)
        lines = from_start(lines, start)
        error = None
    except (OSError, ValueError) as e:
        error = f"Prometheus {prom.conn_id!r} at {prom.url}: {type(e).__name__}: {e}"[:300]
        t = Target(broker, "node" if broker == "rabbitmq" else "broker", "prometheus",
                   f"{prom.url} (Prometheus connection {prom.conn_id!r})", implementation, version)
        targets = [t]
        steps = max(1, int((end - start) // max(interval, 0.1)))
        lines = [{"ts": round(start + i * (end - start) / steps, 3), "target": t.name, "error": error}
                 for i in range(steps + 1)]
    with open(out, "w") as f:
        f.write(json.dumps(header(host, spacing(lines, interval) if not error else interval, targets)) + "\n")
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return {"host": host, "file": out, "targets": [t.name for t in targets], "scrapes": len(lines),
            **({"error": error} if error else {})}
