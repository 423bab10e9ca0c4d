"""brokerbench.monitoring: a run's broker metrics for the user's own Prometheus and Grafana, built from a real
scraper file: tests/unit/data/brokermetrics/rabbitmq-3.10.8-localhost.jsonl is what brokermetrics.start wrote
on the rabbitmq_prometheus endpoint of a RabbitMQ 3.10.8 node (Debian's) deployed by Machine.deploy('rabbitmq',
{}, 'fsync-off', {}), 7 scrapes 1 s apart while 600 persistent messages were published to a durable queue.

Where the Prometheus binaries are installed (Debian package ``prometheus``), promtool checks the scrape
configuration, parses every PromQL expression of the dashboards and loads the OpenMetrics text into TSDB
blocks; where they are not, those tests are skipped and say so."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from brokerbench import cli, monitoring
from brokerbench.environments.brokermetrics import CATALOG_BROKERS, catalog
from brokerbench.pipeline import analysis
from brokerbench.pipeline.context import RunContext

DATA = Path(__file__).parent / "data" / "brokermetrics" / "rabbitmq-3.10.8-localhost.jsonl"
#: where the run's pipeline puts a phase's scraper file: brokermetrics/<workload>/<driver>/<variant>/<phase>/
PHASE = ("smoke-1-topic-1-partition-100b", "rabbitmq-default", "fsync-off", "measure")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus): NOT checked by Prometheus")


def _records() -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return lines[0]["header"], lines[1:]


def _run_dir(root: Path, extra_lines: list[dict] | None = None) -> Path:
    run = root / "run"
    dest = run.joinpath("brokermetrics", *PHASE, "localhost.jsonl")
    dest.parent.mkdir(parents=True)
    text = DATA.read_text()
    if extra_lines:
        text += "".join(json.dumps(r) + "\n" for r in extra_lines)
    dest.write_text(text)
    return run


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_file_is_a_real_scrape_of_one_rabbitmq_node():
    head, recs = _records()
    assert [t["broker"] for t in head["targets"]] == ["rabbitmq"]
    assert len(recs) == 7 and all("values" in r for r in recs)


# -- OpenMetrics ----------------------------------------------------------------------------------------------------

def test_the_series_parse_as_openmetrics_with_the_values_and_timestamps_as_read(tmp_path):
    head, recs = _records()
    text = monitoring.openmetrics(_run_dir(tmp_path))
    assert text.endswith("# EOF\n")
    fams = _families(text)  # the OpenMetrics parser refuses anything out of the spec
    target = head["targets"][0]
    for m in catalog("rabbitmq").metrics:
        names = [f"brokerbench_{m.id}_sum", f"brokerbench_{m.id}_count"] if m.kind in ("timer", "ratio") \
            else [f"brokerbench_{m.id}"]
        for k, name in enumerate(names):
            fam = fams[name]
            assert fam.type == "gauge"
            assert len(fam.samples) == len(recs)
            for s, r in zip(fam.samples, recs):
                assert s.labels == {"target": target["name"], "node": target["node"], "workload": PHASE[0],
                                    "driver": PHASE[1], "variant": PHASE[2], "phase": PHASE[3]}
                assert float(s.timestamp) == pytest.approx(r["ts"], abs=1e-6)
                want = r["values"][m.id]
                assert s.value == pytest.approx(want[k] if len(names) == 2 else want)
    # the unit where the value is in it: a gauge's, never a counter's cumulative count
    assert fams["brokerbench_rabbitmq_resident_memory_mb"].unit == "mb"
    assert fams["brokerbench_rabbitmq_io_syncs_per_s"].unit == ""
    assert [s.value for s in fams["brokerbench_target_up"].samples] == [1.0] * len(recs)


def test_a_scrape_that_did_not_answer_is_a_gap_and_said_by_target_up(tmp_path):
    head, recs = _records()
    gap = {"ts": recs[-1]["ts"] + 1.0, "target": head["targets"][0]["name"],
           "error": "URLError: <urlopen error [Errno 111] Connection refused>"}
    fams = _families(monitoring.openmetrics(_run_dir(tmp_path, [gap])))
    assert [s.value for s in fams["brokerbench_target_up"].samples][-2:] == [1.0, 0.0]
    assert len(fams["brokerbench_rabbitmq_resident_memory_mb"].samples) == len(recs)


def test_a_retried_phase_appends_its_own_header_and_its_scrapes_continue_the_series(tmp_path):
    head, recs = _records()
    again = {**recs[-1], "ts": recs[-1]["ts"] + 60.0}
    fams = _families(monitoring.openmetrics(_run_dir(tmp_path, [{"header": head}, again])))
    assert len(fams["brokerbench_rabbitmq_io_sync_mean_ms_sum"].samples) == len(recs) + 1


def test_a_run_without_scraper_files_has_no_series(tmp_path):
    assert monitoring.openmetrics(tmp_path) == "# EOF\n"
    assert monitoring.export(tmp_path) == {}


# -- Prometheus -----------------------------------------------------------------------------------------------------

def test_the_scrape_config_lists_the_runs_target_with_its_labels(tmp_path):
    head, _ = _records()
    t = head["targets"][0]
    run = _run_dir(tmp_path)
    doc = yaml.safe_load(monitoring.prometheus_scrape_config(monitoring.run_targets(run), 1.0))
    (job,) = doc["scrape_configs"]
    assert job["job_name"] == "brokerbench_rabbitmq_node"
    assert job["metrics_path"] == "/metrics" and job["scheme"] == "http"
    assert job["scrape_interval"] == "1s" == doc["global"]["scrape_interval"]
    host_port = t["url"].split("//", 1)[1].split("/", 1)[0]
    assert job["static_configs"] == [{"targets": [host_port],
                                      "labels": {"broker": "rabbitmq", "role": "node", "node": t["node"]}}]


def test_one_job_per_broker_and_role():
    targets = [{"broker": "pulsar", "role": "broker", "node": "10.0.0.5", "url": "http://10.0.0.5:8080/metrics"},
               {"broker": "pulsar", "role": "broker", "node": "10.0.0.6", "url": "http://10.0.0.6:8080/metrics"},
               {"broker": "pulsar", "role": "bookie", "node": "10.0.0.7", "url": "http://10.0.0.7:8000/metrics/"}]
    doc = yaml.safe_load(monitoring.prometheus_scrape_config(targets))
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert sorted(jobs) == ["brokerbench_pulsar_bookie", "brokerbench_pulsar_broker"]
    assert [s["targets"] for s in jobs["brokerbench_pulsar_broker"]["static_configs"]] == [["10.0.0.5:8080"],
                                                                                            ["10.0.0.6:8080"]]
    assert jobs["brokerbench_pulsar_bookie"]["metrics_path"] == "/metrics/"
    assert doc["global"]["scrape_interval"] == "15s"


@needs_promtool
def test_promtool_accepts_the_scrape_config(tmp_path):
    written = monitoring.export(_run_dir(tmp_path))
    out = subprocess.run([PROMTOOL, "check", "config", str(written["prometheus.yml"])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


@needs_promtool
def test_promtool_loads_the_openmetrics_series_into_tsdb_blocks(tmp_path):
    written = monitoring.export(_run_dir(tmp_path))
    samples = sum(len(f.samples) for f in _families(written["series.openmetrics.txt"].read_text()).values())
    out = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics",
                          str(written["series.openmetrics.txt"]), str(tmp_path / "tsdb")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    # the block's line: ULID, min time, max time, duration, samples, chunks, series, size
    block = [line.split() for line in out.stdout.splitlines() if line[:1].isdigit()]
    assert len(block) == 1 and int(block[0][4]) == samples


# -- Grafana --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("broker", CATALOG_BROKERS)
def test_the_dashboard_has_a_panel_per_catalog_panel_and_a_query_per_metric(broker):
    cat = catalog(broker)
    board = monitoring.grafana_dashboard(broker)
    assert board["schemaVersion"] == monitoring.GRAFANA_SCHEMA_VERSION and board["uid"] == f"brokerbench-{broker}"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert [p["title"] for p in board["panels"]] == [p.title for p in cat.panels]
    assert len({p["id"] for p in board["panels"]}) == len(cat.panels)
    for panel, cpanel in zip(board["panels"], cat.panels):
        assert panel["type"] == "timeseries"
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        metrics = [m for m in cat.metrics if m.panel == cpanel.id]
        assert [t["expr"] for t in panel["targets"]] == [monitoring.promql(m, broker) for m in metrics]
        assert len({t["refId"] for t in panel["targets"]}) == len(metrics)
        units = {t["refId"]: panel["fieldConfig"]["defaults"]["unit"] for t in panel["targets"]}
        for o in panel["fieldConfig"]["overrides"]:
            units[o["matcher"]["options"]] = o["properties"][0]["value"]
        assert list(units.values()) == [monitoring.grafana_unit(m.unit) for m in metrics]
        stacking = panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"]
        assert stacking == ("normal" if cpanel.stacked else "none")
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert len(exprs) == len(cat.metrics)
    json.dumps(board)  # the file is plain JSON


def test_promql_per_kind():
    rmq = {m.id: m for m in catalog("rabbitmq").metrics}
    sel = 'broker="rabbitmq", role="node", node=~"$node"'
    assert monitoring.promql(rmq["rabbitmq_io_sync_mean_ms"], "rabbitmq") == (
        f"(sum by (node) (rate(rabbitmq_io_sync_time_seconds_total{{{sel}}}[1m])) / "
        f"sum by (node) (rate(rabbitmq_io_sync_ops_total{{{sel}}}[1m]))) * 1000")
    assert monitoring.promql(rmq["rabbitmq_io_syncs_per_s"], "rabbitmq") == (
        f"sum by (node) (rate(rabbitmq_io_sync_ops_total{{{sel}}}[1m]))")
    assert monitoring.promql(rmq["rabbitmq_resident_memory_mb"], "rabbitmq") == (
        f"(sum by (node) (rabbitmq_process_resident_memory_bytes{{{sel}}})) * 1e-06")
    kafka = {m.id: m for m in catalog("kafka").metrics}
    # a Kafka JMX timer: the mean attribute as read
    assert monitoring.promql(kafka["kafka_produce_local_time_mean_ms"], "kafka") == (
        'max by (node) (kafka_request_localtimems_mean{broker="kafka", role="broker", node=~"$node", '
        'request="Produce"})')
    pulsar = {m.id: m for m in catalog("pulsar").metrics}
    assert monitoring.promql(pulsar["pulsar_storage_write_latency_mean_ms"], "pulsar") == (
        'sum by (node) (pulsar_storage_write_latency_sum{broker="pulsar", role="broker", node=~"$node"}) / '
        'sum by (node) (pulsar_storage_write_latency_count{broker="pulsar", role="broker", node=~"$node"})')
    assert 'quantile="0.99"' in monitoring.promql(pulsar["pulsar_bookie_journal_sync_p99_ms"], "pulsar")
    assert 'role="bookie"' in monitoring.promql(pulsar["pulsar_bookie_journal_sync_p99_ms"], "pulsar")


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path):
    rules = [{"record": f"brokerbench:{m.id}", "expr": monitoring.promql(m, b).replace("$node", ".*")}
             for b in CATALOG_BROKERS for m in catalog(b).metrics]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "brokerbench", "rules": rules}]}))
    out = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(rules)} rules found" in out.stdout + out.stderr


# -- the files: the report step and the command ---------------------------------------------------------------------

def test_the_report_step_writes_the_monitoring_files(tmp_path, monkeypatch):
    import brokerbench.report.html as html

    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    src = _run_dir(tmp_path / "src")
    shutil.copytree(src / "brokermetrics", ctx.run_dir / "brokermetrics")
    monkeypatch.setattr(html, "build_report", lambda run_dir, **_: Path(run_dir) / "report.html")
    monkeypatch.setattr(html, "render_text_summary", lambda run_dir: "summary")
    analysis.report(ctx)
    files = sorted(p.name for p in (ctx.run_dir / "monitoring").iterdir())
    assert files == ["grafana-rabbitmq.json", "prometheus.yml", "series.openmetrics.txt"]
    board = json.loads((ctx.run_dir / "monitoring" / "grafana-rabbitmq.json").read_text())
    assert board == monitoring.grafana_dashboard("rabbitmq")


def test_a_failed_export_never_fails_the_report(tmp_path, monkeypatch, caplog):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})

    def broken(_run_dir):
        raise OSError("disk full")

    monkeypatch.setattr(monitoring, "export", broken)
    assert analysis.export_monitoring(ctx) == {}
    assert "monitoring exports not written: OSError: disk full" in caplog.text


def test_export_metrics_command(tmp_path, capsys):
    run = _run_dir(tmp_path)
    out = tmp_path / "exported"
    assert cli.main(["export-metrics", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("prometheus.yml", "grafana-rabbitmq.json", "series.openmetrics.txt"):
        assert (out / name).is_file() and f"{name}: {out / name}" in printed
    assert cli.main(["export-metrics", str(tmp_path / "exported")]) == 1
    assert "no broker metrics" in capsys.readouterr().err
    assert cli.main(["export-metrics", str(tmp_path / "missing")]) == 2


def test_grafana_command_prints_a_dashboard(capsys):
    assert cli.main(["grafana", "--broker", "kafka"]) == 0
    assert json.loads(capsys.readouterr().out)["uid"] == "brokerbench-kafka"
