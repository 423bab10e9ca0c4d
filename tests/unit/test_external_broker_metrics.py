"""The external environment's broker metrics without a cluster: the connection's metrics keys and the Prometheus
connection read and checked, a Prometheus that cannot be reached refused at validate naming the connection,
and a Prometheus answer (a stub of its HTTP API) turned into the scraper's file format, one target per
instance and role. The real thing (a Prometheus server scraping RabbitMQ, through a DAG run) is
tests/e2e/test_external_dag.py."""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.parse

import pytest

from brokerbench.environments.external import ExternalEnvironment
from brokerbench.environments.external.checks import check_plan
from brokerbench.environments.external.connections import (
    ExternalConnectionError,
    cluster_for,
    prometheus_for,
    prometheus_from,
)
from brokerbench.environments.external.prometheus import queries, read_window, write_phase
from brokerbench.environments.machine.broker import free_port
from brokerbench.spec import SpecError, build_plan, load_suite

RABBIT_URI = "amqp://bench:pw@127.0.0.1:5672/%2F"


def define(monkeypatch, conn_id: str, conn: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_a_connection_names_its_endpoints_and_its_prometheus(monkeypatch):
    define(monkeypatch, "brokerbench_kafka", {"conn_type": "kafka", "extra": {
        "bootstrap.servers": "b-1:9092", "metrics_endpoints": ["http://b-1:11001/metrics",
                                                               {"url": "http://b-2:11001/metrics", "node": "b-2"}],
        "prometheus_conn_id": "msk_prometheus", "prometheus_labels": {"job": "msk-staging"}}})
    define(monkeypatch, "msk_prometheus", {"conn_type": "http", "host": "prom.internal", "port": 9090,
                                           "schema": "https", "login": "bench", "password": "pw"})
    c = cluster_for("kafka")
    assert [(e.url, e.role, e.node) for e in c.metrics.metrics_endpoints] == [
        ("http://b-1:11001/metrics", None, None), ("http://b-2:11001/metrics", None, "b-2")]
    prom = prometheus_for(c)
    assert prom is not None and prom.url == "https://prom.internal:9090" and prom.conn_id == "msk_prometheus"
    assert prom.headers()["Authorization"].startswith("Basic ") and "pw" not in repr(prom)
    assert c.metrics.prometheus_labels == {"job": "msk-staging"}
    # a comma-separated text stands for a list (the Airflow UI's extra field)
    define(monkeypatch, "brokerbench_rabbitmq", {"conn_type": "amqp", "extra": {
        "amqp_uri": RABBIT_URI, "metrics_endpoints": "http://r1:15692/metrics, http://r2:15692/metrics"}})
    assert len(cluster_for("rabbitmq").metrics.metrics_endpoints) == 2


@pytest.mark.parametrize("extra, words", [
    ({"metrics_endpoints": ["b-1:11001"]}, "extra.metrics_endpoints.0.url: Value error, an endpoint's url is http"),
    ({"metrics_endpoints": [{"url": "http://b:1/metrics", "role": "bookie"}]}, "role 'bookie'"),
    ({"prometheus_labels": {"bad-name": "x"}}, "not a Prometheus label name: bad-name"),
    ({"metrics_endpoint": ["http://b:1/metrics"]}, "extra metrics_endpoint: not passed to the clients"),
])
def test_a_bad_metrics_key_is_refused_naming_the_connection(monkeypatch, extra, words):
    define(monkeypatch, "brokerbench_kafka", {"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9092",
                                                                              **extra}})
    with pytest.raises(ExternalConnectionError) as e:
        cluster_for("kafka")
    print(e.value)
    assert str(e.value).startswith("connection 'brokerbench_kafka': ") and words in str(e.value)


@pytest.mark.parametrize("conn, words", [
    ({"conn_type": "http"}, "needs host"),
    ({"conn_type": "http", "host": "p", "schema": "ftp"}, "schema 'ftp'"),
    ({"conn_type": "http", "extra": {"url": "https://u:secret@p/prom"}}, "carries credentials"),
    ({"conn_type": "http", "host": "p", "extra": {"headers": {}}}, "extra headers: a Prometheus connection reads"),
])
def test_a_prometheus_connection_that_cannot_work_is_refused_naming_it(conn, words):
    with pytest.raises(ExternalConnectionError) as e:
        prometheus_from("bb_prom", conn)
    assert str(e.value).startswith("connection 'bb_prom': ") and words in str(e.value)
    assert "secret" not in str(e.value)


def test_a_prometheus_url_with_a_path_prefix_and_a_token():
    prom = prometheus_from("bb_prom", {"extra": {"url": "https://mon.example.com/prometheus/", "token": "t0k"}})
    assert prom.url == "https://mon.example.com/prometheus" and prom.headers() == {"Authorization": "Bearer t0k"}


def test_an_unreachable_prometheus_is_refused_at_validate_naming_the_connection(monkeypatch):
    define(monkeypatch, "brokerbench_rabbitmq", {"conn_type": "amqp", "extra": {
        "amqp_uri": RABBIT_URI, "prometheus_conn_id": "staging_prometheus"}})
    define(monkeypatch, "staging_prometheus", {"conn_type": "http", "host": "127.0.0.1", "port": free_port()})
    plan = build_plan(load_suite("smoke"), {"environment": "external", "brokers": ["rabbitmq"],
                                            "variants": ["fsync-off"]})
    with pytest.raises(SpecError) as e:
        check_plan(plan)
    print(e.value)
    assert e.value.field == "environmentSettings.connections.rabbitmq"
    assert "connection 'staging_prometheus': the Prometheus at http://127.0.0.1:" in str(e.value)
    assert "cannot be reached" in str(e.value) and "named by connection 'brokerbench_rabbitmq'" in str(e.value)
    # a Prometheus connection that cannot describe a server is refused the same way
    define(monkeypatch, "staging_prometheus", {"conn_type": "http"})
    with pytest.raises(SpecError, match="connection 'staging_prometheus': a Prometheus connection needs host"):
        check_plan(plan)


# -- a stub of Prometheus' HTTP API: /api/v1/query of a range selector answered with fixed raw samples ---------
class StubPrometheus:
    """Answers ``name{labels}[window]`` with the samples of ``series`` ({(name, labels): [(ts, value)]}) that
    match the selector's labels; ``up`` likewise; ``1`` as Prometheus does."""

    def __init__(self, series: dict[tuple[str, tuple], list[tuple[float, float]]]):
        self.series = series
        self.asked: list[str] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                body = stub.answer(q["query"][0])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, query: str) -> dict:
        self.asked.append(query)
        if query == "1":
            return {"status": "success", "data": {"resultType": "scalar", "result": [0, "1"]}}
        m = re.fullmatch(r"(\w+)\{(.*)\}\[\d+ms\]", query)
        assert m, query
        name, want = m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        result = [{"metric": {"__name__": n, **dict(labels)}, "values": [[ts, str(v)] for ts, v in samples]}
                  for (n, labels), samples in self.series.items()
                  if n == name and all(dict(labels).get(k) == v for k, v in want.items())]
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.fixture
def pulsar_prometheus():
    broker = (("instance", "broker-1:8080"), ("job", "pulsar"))
    bookie = (("instance", "bookie-1:8000"), ("job", "pulsar"))
    other = (("instance", "broker-9:8080"), ("job", "another-cluster"))
    stub = StubPrometheus({
        ("jvm_gc_collection_seconds_count", broker): [(100.0, 10), (101.0, 12), (102.0, 15)],
        ("jvm_gc_collection_seconds_count", other): [(100.0, 1)],
        ("bookie_journal_JOURNAL_SYNC_sum", bookie + (("success", "true"),)): [(100.5, 2.0), (101.5, 3.0)],
        ("bookie_journal_JOURNAL_SYNC_count", bookie + (("success", "true"),)): [(100.5, 20), (101.5, 30)],
        ("up", broker): [(100.0, 1), (101.0, 1), (102.0, 1), (103.0, 0)],
        ("up", bookie): [(100.5, 1), (101.5, 1)]})
    yield stub
    stub.server.shutdown()


def test_prometheus_samples_become_the_scrapers_lines_one_target_per_instance_and_role(pulsar_prometheus):
    prom = prometheus_from("bb_prom", {"extra": {"url": pulsar_prometheus.url}})
    targets, lines = read_window(prom, "pulsar", {"job": "pulsar"}, 90.0, 104.0, version="4.0.7")
    assert [(t.name, t.role, t.node, t.version) for t in targets] == [
        ("pulsar/bookie@bookie-1:8000", "bookie", "bookie-1:8000", "4.0.7"),
        ("pulsar@broker-1:8080", "broker", "broker-1:8080", "4.0.7")]
    assert "bb_prom" in targets[0].url
    by = {(line["target"], line["ts"]): line for line in lines}
    assert by[("pulsar@broker-1:8080", 101.0)]["values"] == {"pulsar_gc_collections_per_s": 12.0}
    assert by[("pulsar/bookie@bookie-1:8000", 101.5)]["values"]["pulsar_bookie_journal_sync_mean_ms"] == [3.0, 30.0]
    # the scrape Prometheus recorded as failed is a gap; the other cluster's series were never asked for
    assert by[("pulsar@broker-1:8080", 103.0)]["error"].endswith("up == 0 (its scrape of broker-1:8080 failed)")
    assert not any("broker-9" in line["target"] for line in lines)
    assert all('job="pulsar"' in q for q in pulsar_prometheus.asked)
    assert set(queries("pulsar", {})) >= {"jvm_gc_collection_seconds_count{}",
                                          'bookie_journal_JOURNAL_SYNC{quantile="0.99",success="true"}'}


def test_a_phase_file_is_the_scrapers_format_and_a_silent_prometheus_a_gap(pulsar_prometheus, tmp_path):
    prom = prometheus_from("bb_prom", {"extra": {"url": pulsar_prometheus.url}})
    out = tmp_path / "p.jsonl"
    written = write_phase(str(out), "prometheus-bb_prom", prom, "pulsar", {"job": "pulsar"}, 101.2, 104.0)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    head = lines[0]["header"]
    assert head["host"] == "prometheus-bb_prom" and head["interval_s"] == 1.0
    # the phase's scrapes and the last one before it (the counters' starting point), not the whole window
    assert [(line["target"], line["ts"]) for line in lines[1:]] == [
        ("pulsar/bookie@bookie-1:8000", 100.5), ("pulsar@broker-1:8080", 101.0), ("pulsar/bookie@bookie-1:8000", 101.5),
        ("pulsar@broker-1:8080", 102.0), ("pulsar@broker-1:8080", 103.0)]
    assert {m["broker"] for m in head["catalog"]} == {"pulsar"} and len(head["targets"]) == 2
    assert written["scrapes"] == len(lines) - 1 and "error" not in written
    # no series of the catalog with these labels: an error line per interval of the phase, never a failure
    written = write_phase(str(out), "prometheus-bb_prom", prom, "pulsar", {"job": "nothing"}, 100.0, 104.0)
    lines = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert len(lines) == 5 and all("holds no sample of the pulsar catalog" in line["error"] for line in lines)
    assert written["targets"] == ["pulsar@prometheus"]


def test_the_environment_reads_the_phase_broker_from_its_prometheus(pulsar_prometheus, tmp_path, monkeypatch):
    define(monkeypatch, "brokerbench_pulsar", {"conn_type": "pulsar", "extra": {
        "service_url": "pulsar://broker-1:6650", "admin_url": "http://broker-1:8080",
        "prometheus_conn_id": "bb_prom", "prometheus_labels": {"job": "pulsar"}}})
    define(monkeypatch, "bb_prom", {"extra": {"url": pulsar_prometheus.url}})
    env = ExternalEnvironment("test/metrics", {"state_dir": str(tmp_path / "state")}, brokers=["pulsar"])
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "clusters.json").write_text(json.dumps({
        "rabbitmq": {"connection": "x", "address": "a", "deployed_at": 1.0},
        "pulsar": {"connection": "brokerbench_pulsar", "address": "b", "deployed_at": 2.0, "version": "4.0.7"}}))
    started = env.start_broker_metrics("w__d__v__measure")
    assert started is not None and started["broker"] == "pulsar" and started["prometheus"] == "bb_prom"
    # the stub's samples are at t=100..103: the phase "started" just after them
    record = tmp_path / "state" / "metrics" / "w__d__v__measure.brokers.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "start": 102.0}))
    monkeypatch.setattr("brokerbench.environments.external.prometheus.time.time", lambda: 104.0)
    files = env.stop_broker_metrics("w__d__v__measure", str(tmp_path / "dest"))
    assert list(files) == ["prometheus-bb_prom"]
    lines = (tmp_path / "dest" / "prometheus-bb_prom.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["header"]["targets"][1]["version"] == "4.0.7" and len(lines) > 3
    assert "secret" not in record.read_text()


def test_a_connection_that_names_no_metrics_asks_nothing(tmp_path, monkeypatch):
    define(monkeypatch, "brokerbench_rabbitmq", {"conn_type": "amqp", "extra": {"amqp_uri": RABBIT_URI}})
    env = ExternalEnvironment("test/none", {"state_dir": str(tmp_path / "state")}, brokers=["rabbitmq"])
    assert env.start_broker_metrics("w__d__v__warmup") is None  # nothing deployed yet
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "clusters.json").write_text(json.dumps({
        "rabbitmq": {"connection": "brokerbench_rabbitmq", "address": "a", "deployed_at": 1.0}}))
    assert env.start_broker_metrics("w__d__v__warmup") is None
    assert env.stop_broker_metrics("w__d__v__warmup", str(tmp_path / "dest")) == {}
    assert not (tmp_path / "state" / "metrics").exists() and not (tmp_path / "dest").exists()
