"""brokerbench.cli: what `brokerbench bench` tells the user, and where it looks.

The subprocess tests run the real command; a refused param and a malformed
--conf stop before any DAG run exists, so no broker starts.
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from brokerbench import cli, run_guard
from brokerbench.pipeline.context import RunContext

ROOT = Path(__file__).resolve().parents[2]


def _run_cli(*args: str, env_extra: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "brokerbench.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# -- the real command ----------------------------------------------------------

def test_malformed_conf_is_one_line_and_exit_2(tmp_path):
    p = _run_cli("bench", "--suite", "smoke", "--conf", '{"brokers": [nope',
                 env_extra={"BROKERBENCH_RESULTS_ROOT": str(tmp_path)}, timeout=60)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr + p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("brokerbench: --conf is not valid JSON") and "column" in lines[0]
    assert not (tmp_path / "logs").exists()  # nothing was started


def test_conf_not_an_object_exit_2(tmp_path):
    p = _run_cli("bench", "--conf", '["rabbitmq"]', env_extra={"BROKERBENCH_RESULTS_ROOT": str(tmp_path)},
                 timeout=60)
    assert p.returncode == 2
    assert "must be a JSON object" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("conf, field, words", [
    ('{"test_duration_minute": 1}', "test_duration_minute", "did you mean 'test_duration_minutes'"),
    ('{"brokers": ["nope"]}', "brokers", "'nope' is not one of"),
    ('{"test_duration_minutes": Infinity}', "test_duration_minutes", "must be finite"),
    ('{"interval_seconds": 1e9}', "interval_seconds", "greater than the maximum of 3600"),
    # a variant that needs a broker restart cannot run on a cluster brokerbench did not deploy
    ('{"environment": "external", "brokers": ["pulsar"], "variants": ["fsync-off"]}',
     "variants.fsync-off.pulsar.broker.journalSyncData", "never restarts or reconfigures a cluster"),
])
def test_a_refused_param_is_named_before_airflow_starts(tmp_path, conf, field, words):
    home = tmp_path / "home"
    p = _run_cli("bench", "--suite", "smoke", "--conf", conf,
                 env_extra={"BROKERBENCH_RESULTS_ROOT": "s3://cli-test-bucket/some/prefix",
                            "BROKERBENCH_HOME": str(home)}, timeout=60)
    assert p.returncode == cli.EXIT_REFUSED, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"field '{field}'" in lines[0] and words in lines[0], p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    # refused before Airflow and before any log or staging directory exists; never a directory called "s3:"
    assert not home.exists()
    assert not (ROOT / "s3:").exists() and not Path("s3:").exists()


def test_flags_and_the_list_form_become_the_params_airflow_takes():
    from brokerbench.spec import load_suite
    from brokerbench.spec.run_conf import check_conf

    args = argparse.Namespace(brokers="kafka, rabbitmq", variants=None, duration=0.5, rate=2000, trials=None)
    conf = cli.conf_with_flags({"regression_gate": "never"}, args)
    assert conf == {"regression_gate": "never", "brokers": "kafka, rabbitmq", "test_duration_minutes": 0.5,
                    "rate_override_msg_s": 2000}
    conf, plan = check_conf(load_suite("smoke"), conf)
    assert conf["brokers"] == ["kafka", "rabbitmq"]  # what Airflow's schema takes
    assert {i.broker for i in plan.items} == {"kafka", "rabbitmq"}
    assert {i.workload.test_duration_minutes for i in plan.items} == {0.5}
    with pytest.raises(cli.ConfError, match="--duration 0.5 and --conf's 'test_duration_minutes' 2 disagree"):
        cli.conf_with_flags({"test_duration_minutes": 2}, args)


# -- pure helpers ----------------------------------------------------------------

def test_run_dir_for_is_the_pipelines_run_dir(tmp_path):
    run_id = "manual__2026-11-23T02:13:21.105238+00:00"
    expected = tmp_path / "runs" / "brokerbench_smoke" / "manual__2026-11-23T02_13_21.105238_00_00"
    assert cli.run_dir_for(str(tmp_path), "brokerbench_smoke", run_id) == expected
    ctx = RunContext(dag_id="brokerbench_smoke", run_id=run_id, suite="smoke",
                     params={"results_root": str(tmp_path)})
    assert cli.run_dir_for(str(tmp_path), "brokerbench_smoke", run_id) == ctx.run_dir
    assert cli.run_uri_for(str(tmp_path), "brokerbench_smoke", run_id) == str(expected)


def test_run_dir_for_s3_root_is_the_staging_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path))
    run_id = "scheduled__2026-01-02T00:00:00+00:00"
    root = "s3://bucket/bb/results/"
    assert cli.run_dir_for(root, "brokerbench_nightly_latency", run_id) == (
        tmp_path / "s3-staging" / "bucket" / "bb" / "results" / "runs" / "brokerbench_nightly_latency"
        / "scheduled__2026-01-02T00_00_00_00_00")
    assert cli.run_uri_for(root, "brokerbench_nightly_latency", run_id) == (
        "s3://bucket/bb/results/runs/brokerbench_nightly_latency/scheduled__2026-01-02T00_00_00_00_00")
    assert cli.log_dir_for(root) == tmp_path / "s3-staging" / "bucket" / "bb" / "results" / "logs"
    assert cli.log_dir_for(str(tmp_path / "r")) == tmp_path / "r" / "logs"


def test_log_names_are_unique_per_invocation(tmp_path):
    when = 1795400000.25
    a = cli.log_path_for(tmp_path, "brokerbench_smoke", when, "aaaa")
    assert a.parent == tmp_path
    assert a.name == f"brokerbench_smoke-20261123T021320.250Z-{os.getpid()}-aaaa.log"
    # same second, same process: the random part differs
    names = {cli.log_path_for(tmp_path, "brokerbench_smoke", when).name for _ in range(50)}
    assert len(names) > 1
    paths = []
    for _ in range(5):
        path, f = cli.open_log(tmp_path / "logs", "brokerbench_smoke")
        f.close()
        paths.append(path)
    assert len(set(paths)) == 5 and all(p.exists() for p in paths)


def test_parse_conf():
    assert cli.parse_conf(None) == {}
    assert cli.parse_conf('{"brokers": ["kafka"]}') == {"brokers": ["kafka"]}
    with pytest.raises(cli.ConfError, match="not valid JSON"):
        cli.parse_conf("{brokers: kafka}")
    with pytest.raises(cli.ConfError, match="JSON object"):
        cli.parse_conf("3")


_RUN_OUTPUT = """\
2026-11-23T02:13:14.6Z [info     ] creating dag run               [airflow.serialization.definitions.dag] loc=dag.py:615 run_id=manual__2026-11-23T02:13:21.105238+00:00
2026-11-23T02:13:22.0Z [info     ] [DAG TEST] starting task_id=setup.validate map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501
2026-11-23T02:13:23.0Z [info     ] Task instance state updated    [airflow.api_fastapi] new_state=success rows_affected=1
2026-11-23T02:13:24.0Z [info     ] [DAG TEST] starting task_id=setup.provision map_index=-1 [airflow.sdk.definitions.dag]
2026-11-23T02:13:29.5Z [error    ] Task failed with exception     [task] loc=task_runner.py:1676
Traceback (most recent call last):
  File "/x/operators.py", line 51, in execute
    with ctx.synced():
brokerbench.lease.LeaseLost: run X does not hold the lease
2026-11-23T02:13:29.6Z [info     ] Task instance state updated    [airflow.api_fastapi] new_state=failed rows_affected=1
2026-11-23T02:13:46.1Z [info     ] [DAG TEST] starting task_id=run_outcome map_index=-1 [airflow.sdk]
Traceback (most recent call last):
  File "/x/operators.py", line 320, in execute
airflow.sdk.exceptions.AirflowFailException: a task of this run failed
2026-11-23T02:13:46.2Z [info     ] Task instance state updated    [airflow.api_fastapi] new_state=failed rows_affected=1
2026-11-23T02:13:46.3Z [info     ] DagRun Finished: dag_id=brokerbench_smoke, logical_date=2026-11-23 02:13:14+00:00, run_id=manual__2026-11-23T02:13:21.105238+00:00, state=failed
"""

_REFUSAL_OUTPUT = """\
2026-11-23T02:11:35.1Z [info     ] creating dag run               [airflow.serialization.definitions.dag] run_id=manual__2026-11-23T02:11:32.145688+00:00
Traceback (most recent call last):
  File "/v/airflow/serialization/definitions/param.py", line 151, in _validate_one
    raise ParamValidationError(f"Invalid input for param {k}: {e}") from None
airflow.sdk.exceptions.ParamValidationError: Invalid input for param brokers: 'nope' is not one of ['kafka']

Failed validating 'enum' in schema['items']:
    {'type': 'string', 'enum': ['kafka']}
"""


def test_output_scan_of_a_failed_run():
    scan = cli.OutputScan()
    for line in _RUN_OUTPUT.splitlines(keepends=True):
        scan.feed(line)
    assert scan.run_id == "manual__2026-11-23T02:13:21.105238+00:00"
    assert scan.run_started
    # the watcher's failure only repeats the provision failure
    assert scan.failed_tasks() == {"setup.provision": "LeaseLost: run X does not hold the lease"}


def test_output_scan_of_a_refusal():
    scan = cli.OutputScan()
    for line in _REFUSAL_OUTPUT.splitlines(keepends=True):
        scan.feed(line)
    assert not scan.run_started  # "creating dag run" is logged before the params are validated
    assert scan.reason == ["ParamValidationError: Invalid input for param brokers: 'nope' is not one of ['kafka']"]


def test_a_stopped_bench_tears_its_run_down_and_gives_the_lease_back(tmp_path, monkeypatch):
    """What `brokerbench bench` does after Ctrl-C / SIGTERM (run_guard.stop_run): workers and every process the
    run started stop, the environment's lease is released, the results stay."""
    import time

    from brokerbench import lease
    from brokerbench.environments.processes import MARKER_BROKER, MARKER_STATE
    from brokerbench.pipeline import environment_lease, setup

    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BROKERBENCH_LOCK_DIR", str(tmp_path / "locks"))
    conf = {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "results_root": str(tmp_path / "results")}
    ctx = RunContext(dag_id="brokerbench_smoke", run_id="manual__1", suite="smoke", params=conf)
    setup.validate(ctx)
    assert environment_lease.acquire_environment(ctx) is None
    state = ctx.environment().state_dir
    state.mkdir(parents=True)
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                              env=dict(os.environ, **{MARKER_STATE: str(state), MARKER_BROKER: role}))
             for role in ("worker", "rabbitmq")]
    try:
        time.sleep(0.5)
        said = run_guard.stop_run("smoke", "brokerbench_smoke", "manual__1", conf)
        assert "1 worker(s) stopped" in said and "lease released" in said and str(ctx.run_dir) in said
        assert all(p.wait(timeout=30) is not None for p in procs)
        assert lease.holders(environment_lease.lease_scope(ctx)[0]) == {}
        assert ctx.plan_path.exists()  # what was there is kept
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("verdict, rc, code, strict, headline", [
    ("regressed", 0, 3, 3, "REGRESSION: 1 metric(s) regressed in 1 of 1 track(s) (1 judged)"),
    ("unchanged", 0, 0, 0, "NO REGRESSION: 1 of 1 track(s) judged, none regressed"),
    ("insufficient history", 0, 0, 4,
     "NOT JUDGED: no baseline yet (1 of 1 track(s) have too few earlier valid runs)"),
    ("not judged: invalid (foreign load)", 0, 0, 4,
     "NOT JUDGED: no valid measurement (1 of 1 track(s) invalid, partial or without data)"),
])
@pytest.mark.parametrize("fail_on", ["regression", "not-judged"])
def test_the_exit_code_is_the_runs_outcome(tmp_path, capsys, verdict, rc, code, strict, headline, fail_on):
    """A run that was not judged (a first run: no baseline yet) exits 0 and says so last; --fail-on not-judged
    gives the strict code (4). outcome.json keeps the strict code either way."""
    import json

    from brokerbench.outcome import outcome_of, write_outcome

    run_id = "manual__2026-11-24T08:00:00+00:00"
    run_dir = cli.run_dir_for(str(tmp_path), "brokerbench_smoke", run_id)
    (run_dir / "summary").mkdir(parents=True)
    (run_dir / "report.html").write_text("<html></html>")
    write_outcome(run_dir, outcome_of([{"workload": "w", "broker": "kafka", "variant": "fsync-on",
                                        "metric": "publish_latency_p99_ms", "verdict": verdict}]))
    scan = cli.OutputScan()
    scan.feed(f"2026-11-24T08:00:00Z [info ] creating dag run [x] run_id={run_id}\n")
    assert cli._report_outcome(rc, scan, "brokerbench_smoke", "", str(tmp_path), tmp_path / "x.log",
                               fail_on) == (strict if fail_on == "not-judged" else code)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"brokerbench: OUTCOME: {headline}"  # the last line says it
    said_exit_0 = "brokerbench: not judged is not a failure of the run: exit code 0 (--fail-on not-judged: 4)"
    assert (out[-2] == said_exit_0) == (headline.startswith("NOT JUDGED") and fail_on == "regression")
    assert json.loads((run_dir / "summary" / "outcome.json").read_text())["exit_code"] == strict


def test_bench_takes_fail_on_and_its_help_has_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "--fail-on {regression,not-judged}" in out
    assert re.search(r"not judged: no baseline yet .*\s0\s+4\n", out)
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--fail-on", "nothing"])
    assert e.value.code == 2 and "invalid choice: 'nothing'" in capsys.readouterr().err


def test_a_run_without_its_outcome_is_failed(tmp_path, capsys):
    run_id = "manual__2026-11-24T08:00:00+00:00"
    scan = cli.OutputScan()
    scan.feed(f"2026-11-24T08:00:00Z [info ] creating dag run [x] run_id={run_id}\n")
    assert cli._report_outcome(1, scan, "brokerbench_smoke", "", str(tmp_path), tmp_path / "x.log") == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("brokerbench: OUTCOME: FAILED:")


def test_a_run_without_its_outcome_names_the_failed_task_last(tmp_path, capsys):
    scan = cli.OutputScan()
    for line in _RUN_OUTPUT.splitlines(keepends=True):
        scan.feed(line)
    assert cli._report_outcome(1, scan, "brokerbench_smoke", "", str(tmp_path), tmp_path / "x.log") == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("brokerbench: OUTCOME: FAILED: setup.provision failed "
                    "(the run ended without its outcome: run_outcome did not run)")


def test_the_ticker_says_what_is_running_after_silence():
    scan = cli.OutputScan()
    said: list[str] = []
    ticker = cli.Ticker(scan, every_s=0.2, out=said.append)
    assert ticker.line().startswith("brokerbench: Airflow is starting (parsing the DAGs)")
    scan.feed("2026-11-23T02:13:22.0Z [info ] [DAG TEST] starting task_id=analysis.aggregate map_index=-1 [x]\n")
    with ticker:
        import time

        time.sleep(1.6)
    assert said and said[-1].startswith("brokerbench: analysis.aggregate running for ")
