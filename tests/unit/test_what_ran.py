"""What ran, said first: summary.csv's first columns, the run report's first table and the terminal summary name
each row's broker implementation and version and its client library, and the rows of two versions of one broker
are adjacent, the older first. The run is built with the product's own writers (tests/support/aggregation.py):
worker files, the deploy task's provenance record per broker x variant, and the aggregation job's own code."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.aggregation import measured_run  # noqa: E402

from brokerbench.changepoint import version_key  # noqa: E402
from brokerbench.report.html import build_report, render_text_summary  # noqa: E402

#: one run whose Kafka rows ran two versions (the variant's provenance names the version that served it)
WHAT_RAN = {
    ("kafka", "as-configured"): ("apache-kafka", "4.1.1"),
    ("kafka", "fsync-off"): ("apache-kafka", "3.9.1"),
    ("kafka", "fsync-on"): ("apache-kafka", "4.1.1"),
    ("pulsar", "as-configured"): ("apache-pulsar", "4.0.7"),
    ("pulsar", "fsync-off"): ("apache-pulsar", "4.0.7"),
    ("pulsar", "fsync-on"): ("apache-pulsar", "4.0.7"),
}
#: broker, implementation, version, client library, its version, variant: by broker, version (older first), variant
ORDER = [
    ("kafka", "apache-kafka", "3.9.1", "kafka-python", "3.0.12", "fsync-off"),
    ("kafka", "apache-kafka", "4.1.1", "kafka-python", "3.0.12", "as-configured"),
    ("kafka", "apache-kafka", "4.1.1", "kafka-python", "3.0.12", "fsync-on"),
    ("pulsar", "apache-pulsar", "4.0.7", "pulsar-client", "3.13.0", "as-configured"),
    ("pulsar", "apache-pulsar", "4.0.7", "pulsar-client", "3.13.0", "fsync-off"),
    ("pulsar", "apache-pulsar", "4.0.7", "pulsar-client", "3.13.0", "fsync-on"),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return measured_run(tmp_path_factory.mktemp("results") / "runs" / "brokerbench_smoke" / "manual__1", WHAT_RAN)


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def test_the_spark_package_orders_versions_as_brokerbench_does():
    from brokerbench_spark import phase_tables

    versions = [None, "4.1.1", "3.9.1", "3.10.0", "4.0.0-rc1", "4.0", "4.0.0", "3.10.8-1.1", "3.10.8", "v2.8.0",
                "2.8.0-SNAPSHOT", "unknown", "package", "", "0.6.0"]
    assert [phase_tables.version_key(v) for v in versions] == [version_key(v) for v in versions]
    assert sorted(versions[1:4], key=phase_tables.version_key) == ["3.9.1", "3.10.0", "4.1.1"]


def test_summary_csv_names_what_ran_first_and_keeps_the_versions_of_a_broker_together(run):
    import pyarrow.parquet as pq

    columns, rows = _csv(run / "summary" / "summary.csv")
    assert columns[:8] == ["broker", "broker_implementation", "broker_version", "client_library",
                           "client_library_version", "variant", "workload", "driver"]
    assert [tuple(r[c] for c in columns[:6]) for r in rows] == ORDER
    # summary.parquet: the same columns in the same order (the history job reads it)
    part = next((run / "summary" / "summary.parquet").glob("part-*.parquet"))
    assert pq.read_schema(part).names == columns


def test_the_reports_first_table_says_what_ran_in_summary_order(run):
    page = build_report(run).read_text()
    key = page.split('<section id="key-figures">')[1].split("</section>")[0]
    headers = [re.sub(r"<[^>]+>", " ", h).split() for h in re.findall(r"<th[^>]*>(.*?)</th>", key.split("</thead>")[0])]
    assert headers[:4] == [["broker"], ["implementation,", "version"], ["client", "library"], ["variant"]]
    cells = re.findall(r'<tr[^>]*><td>(\w+)</td>\s*<td class="what">([^<]*)</td><td class="what">([^<]*)</td>'
                       r'\s*<td>([\w-]+)', key)
    assert cells == [(b, f"{impl} {version}", f"{lib} {lib_version}", variant)
                     for b, impl, version, lib, lib_version, variant in ORDER]
    # the folded key-results table starts with the same columns
    results = page.split("<summary>Key results")[1].split("</thead>")[0]
    assert re.findall(r'<th title="(\w+)">', results)[:7] == [
        "broker", "broker_implementation", "broker_version", "client_library", "client_library_version", "variant",
        "workload"]


def test_the_terminal_summary_says_what_ran_first(run):
    lines = render_text_summary(run).splitlines()
    assert lines[1].split()[:5] == ["broker", "implementation", "client", "variant", "workload"]
    assert [tuple(line.split()[:6]) for line in lines[3:9]] == [
        (b, impl, version, lib, lib_version, variant) for b, impl, version, lib, lib_version, variant in ORDER]


def test_a_summary_written_in_another_order_is_shown_in_summary_order(run, tmp_path):
    """A summary.csv written before the aggregation sorted its rows so (workload, broker, driver, variant)."""
    columns, rows = _csv(run / "summary" / "summary.csv")
    old = tmp_path / "runs" / "brokerbench_smoke" / "manual__0"
    (old / "summary").mkdir(parents=True)
    with (old / "summary" / "summary.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["workload", "driver", *[c for c in columns if c not in
                                                                        ("workload", "driver")]])
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: (r["workload"], r["broker"], r["driver"], r["variant"])))
    lines = render_text_summary(old).splitlines()
    assert [tuple(line.split()[:3]) for line in lines[3:6]] == [b[:3] for b in ORDER[:3]]
