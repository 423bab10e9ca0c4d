"""`brokerbench history` and `brokerbench compare` on a results root written by brokerbench's own writers
(tests/support/results_root.py: summary.parquet, run_meta.json, the history job, the verdicts task, the outcome):

    run 1 (Nov 1)  kafka 4.1.1 ok p99 18 ms      rabbitmq ok 9.0 ms    pulsar 4.0.7 ok
    run 2 (Nov 2)  kafka 4.1.1 ok p99 18.5 ms    rabbitmq ok 9.1 ms    pulsar 3.0.7 invalid (foreign load)
    run 3 (Nov 3)  kafka 3.9.1 ok p99 50 ms      rabbitmq ok 9.0 ms
    run 4 (Nov 4)  kafka 3.9.1 ok p99 51 ms      rabbitmq ok 9.1 ms
    run 5 (Nov 5)  kafka 4.1.1 invalid           rabbitmq ok 12.5 ms (regressed)

Kafka 3.9.1 was measured after 4.1.1: `compare` still puts 3.9.1 first (version order).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.results_root import summary_row, write_run  # noqa: E402

from brokerbench import cli  # noqa: E402
from tests.aws_fixtures import moto_server, s3_client  # noqa: E402, F401 - moto_server is a fixture

FOREIGN = "foreign load: mean 43.6 % CPU (of all cores) of processes not of this run on localhost during the phase"


def _run(day: int) -> str:
    return f"manual__2026-11-{day:02d}T10:00:00+00:00"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    invalid = {"status": f"invalid: {FOREIGN}", "invalid_reasons": FOREIGN}
    runs = {
        1: [summary_row("kafka", "4.1.1", p99=18.0), summary_row("rabbitmq", "3.10.8", p99=9.0),
            summary_row("pulsar", "4.0.7", p99=7.0)],
        2: [summary_row("kafka", "4.1.1", p99=18.5), summary_row("rabbitmq", "3.10.8", p99=9.1),
            summary_row("pulsar", "3.0.7", p99=7.5, **invalid)],
        3: [summary_row("kafka", "3.9.1", p99=50.0), summary_row("rabbitmq", "3.10.8", p99=9.0)],
        4: [summary_row("kafka", "3.9.1", p99=51.0), summary_row("rabbitmq", "3.10.8", p99=9.1)],
        5: [summary_row("kafka", "4.1.1", p99=30.0, **invalid), summary_row("rabbitmq", "3.10.8", p99=12.5)],
    }
    for day, rows in runs.items():
        write_run(root, _run(day), f"2026-11-{day:02d}T10:00:00+00:00", rows, min_runs=2)
    return root


def _main(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _table(out: str, heading: str) -> list[list[str]]:
    """The rows (cells split on 2+ spaces) of the table under the line starting with ``heading``."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[first + 1:]:
        if not line.startswith("  ") or line.startswith("  runs:"):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


# -- history ---------------------------------------------------------------------------------------------------

def test_history_lists_each_tracks_runs_with_version_status_figures_and_verdicts(results, capsys):
    code, out, _ = _main(capsys, "history", "--results-root", str(results))
    assert code == 0
    assert out.startswith(f"history: {results}/history (12 row(s) of 5 run(s); oldest first)")
    kafka = _table(out, "kafka / smoke-1-topic-1-partition-100b / fsync-off / local")
    assert kafka[0] == ["run_time_utc", "run_id", "broker_version", "status", "publish_msg_s", "publish_p99_ms",
                        "e2e_p99_ms", "verdicts"]
    assert [r[:4] for r in kafka[2:]] == [
        ["2026-11-01 10:00", _run(1), "4.1.1", "ok"], ["2026-11-02 10:00", _run(2), "4.1.1", "ok"],
        ["2026-11-03 10:00", _run(3), "3.9.1", "ok"], ["2026-11-04 10:00", _run(4), "3.9.1", "ok"],
        ["2026-11-05 10:00", _run(5), "4.1.1", "invalid: foreign load on a host"]]
    assert [r[4:7] for r in kafka[2:4]] == [["1,000", "18", "36"], ["1,000", "18.5", "37"]]
    # the verdicts of each row, as the verdicts task wrote them: no baseline until 2 earlier runs of the version
    assert [r[7] for r in kafka[2:]] == ["11 insufficient history", "11 insufficient history",
                                         "11 insufficient history", "11 insufficient history", "not judged: invalid"]
    rabbitmq = _table(out, "rabbitmq / smoke-1-topic-1-partition-100b / fsync-off / local")
    assert [r[7] for r in rabbitmq[2:]] == [
        "11 insufficient history", "11 insufficient history", "11 unchanged", "11 unchanged",
        "8 regressed: publish_latency_p99_ms +38.1 %, e2e_latency_p99_ms +38.1 % and 6 more; 3 unchanged"]
    assert "(suite smoke; driver rabbitmq-default, client library pika, target 1,000 msg/s; 5 run(s))" in out
    assert out.rstrip().splitlines()[-1] == (f"latest run {_run(5)}: OUTCOME: REGRESSION: 8 metric(s) regressed in "
                                             f"1 of 2 track(s) (1 judged)")


def test_history_filters_and_the_last_runs(results, capsys):
    code, out, _ = _main(capsys, "history", "--results-root", str(results), "--broker", "rabbitmq", "--last", "2")
    assert code == 0
    assert "kafka /" not in out and "pulsar /" not in out
    assert "5 run(s), the last 2 shown: --last 0 for all)" in out
    assert [r[1] for r in _table(out, "rabbitmq /")[2:]] == [_run(4), _run(5)]
    code, out, _ = _main(capsys, "history", "--results-root", str(results), "--broker", "kafka", "--version", "3.9.1")
    assert code == 0 and [r[1] for r in _table(out, "kafka /")[2:]] == [_run(3), _run(4)]
    code, out, _ = _main(capsys, "history", "--results-root", str(results), "--variant", "fsync-on")
    assert (code, out.strip()) == (0, f"brokerbench: no run in {results}/history matches --variant fsync-on")
    code, out, _ = _main(capsys, "history", "--results-root", str(results / "nothing"))
    assert code == 0 and out.startswith(f"brokerbench: no runs in {results}/nothing/history yet")


@pytest.mark.parametrize("args, said", [
    (["--broker", "kafak"], "--broker 'kafak' is not a known broker; did you mean 'kafka'? "
                            "(brokers: kafka, pulsar, rabbitmq)"),
    (["--variant", "fsync-onn"], "--variant 'fsync-onn' is not a known variant; did you mean 'fsync-on'"),
    (["--suite", "smok"], "--suite 'smok' is not a known suite; did you mean 'smoke'?"),
    (["--broker", "kafka", "--version", "3.9"], "--version '3.9' is not a known kafka version; did you mean "
                                                "'3.9.1'? (kafka versions: 3.9.1, 4.1.1)"),
    (["--last", "-1"], "--last must be 0 (all runs) or more (got -1)"),
])
def test_history_refuses_an_argument_naming_nothing(results, capsys, args, said):
    code, out, err = _main(capsys, "history", "--results-root", str(results), *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"brokerbench: {said}")


# -- compare ---------------------------------------------------------------------------------------------------

def test_compare_two_versions_older_first_whatever_order_they_were_measured(results, capsys):
    code, out, _ = _main(capsys, "compare", "--results-root", str(results), "--broker", "kafka",
                         "--versions", "4.1.1", "3.9.1")
    assert code == 0
    assert out.startswith("compare: kafka 3.9.1 and 4.1.1 (older broker version first")
    table = _table(out, "kafka / smoke-1-topic-1-partition-100b / fsync-off / local")
    assert table[0] == ["broker_version", "run_time_utc", "status", "publish_msg_s", "publish_p50_ms",
                        "publish_p99_ms", "publish_p999_ms", "e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms"]
    # 3.9.1's latest ok run (Nov 4) against 4.1.1's (Nov 2: Nov 5's is invalid), the older version first
    assert table[2][:3] == ["3.9.1", "2026-11-04 10:00", "ok"] and table[3][:3] == ["4.1.1", "2026-11-02 10:00", "ok"]
    assert table[2][5] == "51" and table[3][5] == "18.5"
    assert table[4] == ["3.9.1 -> 4.1.1", "change", "+0.0 %", *["-63.7 % better"] * 6]
    assert f"  runs: brokerbench_smoke/{_run(4)} -> brokerbench_smoke/{_run(2)}" in out
    assert ("kafka / smoke-1-topic-1-partition-100b / fsync-off / local: 1 later run(s) of 4.1.1 left out, not ok "
            "(invalid: foreign load on a host)") in out
    page = results / "comparisons" / "kafka-3.9.1-vs-4.1.1" / "comparison.html"
    assert out.rstrip().splitlines()[-1] == f"brokerbench: comparison page: {page}"
    html = page.read_text()
    assert "<title>brokerbench comparison: kafka 3.9.1 and 4.1.1</title>" in html
    assert "4.1.1" in html and "3.9.1" in html and "rabbitmq" not in html  # the versions compared, nothing else


def test_compare_two_runs_row_by_row(results, capsys, tmp_path):
    code, out, _ = _main(capsys, "compare", "--results-root", str(results), _run(5), "manual__2026-11-01",
                         "--out", str(tmp_path))
    assert code == 0
    assert out.startswith(f"compare: runs brokerbench_smoke/{_run(5)} and brokerbench_smoke/{_run(1)}")
    rabbitmq = _table(out, "rabbitmq / smoke-1-topic-1-partition-100b / fsync-off / local")
    assert [r[:3] for r in rabbitmq[2:4]] == [["3.10.8", "2026-11-01 10:00", "ok"], ["3.10.8", "2026-11-05 10:00", "ok"]]
    assert rabbitmq[4][:5] == ["earlier -> later", "change", "+0.0 %", "+38.9 % worse", "+38.9 % worse"]
    kafka = _table(out, "kafka / smoke-1-topic-1-partition-100b / fsync-off / local")
    assert kafka[3][2] == "invalid: foreign load on a host"
    assert (f"pulsar / smoke-1-topic-1-partition-100b / fsync-off / local: not compared: only in run "
            f"brokerbench_smoke/{_run(1)}") in out
    assert (tmp_path / "comparison.html").exists()  # --out: there, not in the results root
    assert not list((results / "comparisons").glob("runs-*"))


def test_compare_without_a_page(results, capsys):
    before = sorted((results / "comparisons").rglob("*")) if (results / "comparisons").exists() else []
    code, out, _ = _main(capsys, "compare", "--results-root", str(results), _run(3), _run(4), "--broker", "kafka",
                         "--no-page")
    assert code == 0 and "brokerbench: comparison page" not in out and "rabbitmq /" not in out
    assert _table(out, "kafka /")[4][0] == "earlier -> later"
    assert (sorted((results / "comparisons").rglob("*")) if (results / "comparisons").exists() else []) == before


def test_nothing_to_compare_says_why_and_exits_1(results, capsys):
    code, out, err = _main(capsys, "compare", "--results-root", str(results), "--broker", "pulsar",
                           "--versions", "3.0.7", "4.0.7", "--no-page")
    assert code == 1
    assert ("pulsar / smoke-1-topic-1-partition-100b / fsync-off / local: not compared: no ok run of 3.0.7 "
            "(1 run(s): invalid: foreign load on a host)") in out
    assert err.startswith("brokerbench: nothing to compare")


@pytest.mark.parametrize("args, said", [
    (["--broker", "kafak", "--versions", "3.9.1", "4.1.1"], "--broker 'kafak' is not a known broker; did you mean "
                                                            "'kafka'?"),
    (["--broker", "kafka", "--versions", "3.9.0", "4.1.1"], "--versions '3.9.0' is not a known kafka version; "
                                                            "did you mean '3.9.1'? (kafka versions: 3.9.1, 4.1.1)"),
    (["--broker", "kafka", "--versions", "4.1.1", "4.1.1"], "--versions: '4.1.1' twice"),
    (["--versions", "3.9.1", "4.1.1"], "--versions needs --broker"),
    (["--broker", "kafka", "--versions", "3.9.1", "4.1.1", "--variant", "fsync-on"],
     "--broker kafka: no run of kafka in the history with --variant fsync-on"),
    ([_run(1)], "give two runs (RUN_A RUN_B"),
    ([_run(1), "manual__2026-12-01"], "RUN_B 'manual__2026-12-01' is no run in the history"),
    (["manual__2026-11-0", _run(1)], "RUN_A 'manual__2026-11-0' names 5 runs: "),
    ([_run(1), _run(1)], "RUN_A"),
    ([_run(1), _run(2), "--broker", "kafka", "--versions", "3.9.1", "4.1.1"], "give two runs (RUN_A RUN_B) or "),
])
def test_compare_refuses_an_argument_naming_nothing(results, capsys, args, said):
    code, out, err = _main(capsys, "compare", "--results-root", str(results), "--no-page", *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"brokerbench: {said}"), err


def test_history_and_compare_from_a_plain_shell_start_no_airflow(results):
    """The command line from a plain shell, its results root from BROKERBENCH_RESULTS_ROOT as `bench`'s: no
    Airflow imported (none started), the answer comes from the files."""
    code = ("import sys; from brokerbench import cli\n"
            "for args in (['history', '--broker', 'kafka'], "
            "['compare', '--broker', 'kafka', '--versions', '3.9.1', '4.1.1', '--no-page']):\n"
            "    assert cli.main(args) == 0, args\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'airflow'], 'airflow imported'\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
           "BROKERBENCH_RESULTS_ROOT": str(results)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(f"history: {results}/history")
    assert "compare: kafka 3.9.1 and 4.1.1" in p.stdout


def test_an_s3_results_root_is_read_through_its_staging_copy(results, moto_server, capsys, tmp_path, monkeypatch):
    """history and compare on ``s3://``: the history and the listed runs' verdicts and outcomes pulled into an
    empty staging copy (a machine that never ran a task), the page pushed back."""
    client = s3_client(moto_server)
    client.create_bucket(Bucket="brokerbench-cli")
    for path in [*(results / "history").rglob("*"), *(results / "runs").glob("*/*/summary/*.json")]:
        if path.is_file():  # the history, and what the commands read of each run
            client.upload_file(str(path), "brokerbench-cli", f"team/{path.relative_to(results)}")
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))  # an empty staging copy
    root = "s3://brokerbench-cli/team"
    code, out, _ = _main(capsys, "history", "--results-root", root, "--broker", "rabbitmq")
    out = out[out.index("history: "):]  # (this process's Airflow logs at INFO; a command line's at WARNING)
    assert code == 0 and out.startswith(f"history: {root}/history (5 row(s) of 5 run(s); oldest first)")
    assert _table(out, "rabbitmq /")[6][7].startswith("8 regressed: ")  # the verdicts came with the summaries
    code, out, _ = _main(capsys, "compare", "--results-root", root, "--broker", "kafka", "--versions", "3.9.1",
                         "4.1.1")
    assert code == 0 and _table(out, "kafka /")[4][0] == "3.9.1 -> 4.1.1"
    page = client.get_object(Bucket="brokerbench-cli", Key="team/comparisons/kafka-3.9.1-vs-4.1.1/comparison.html")
    assert b"<title>brokerbench comparison: kafka 3.9.1 and 4.1.1</title>" in page["Body"].read()
