"""brokerbench.bisect and `brokerbench bisect`: the releases from Maven metadata served on 127.0.0.1, the binary
search with canned A/B verdicts (no broker runs), the record, and the command line's output."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from brokerbench import bisect as bs
from brokerbench import cli
from brokerbench.spec.params import AB_DEFAULT_TRIALS

KAFKA_PATH = "/maven2/org/apache/kafka/kafka_2.13/maven-metadata.xml"
PULSAR_PATH = "/maven2/org/apache/pulsar/pulsar-broker/maven-metadata.xml"
#: out of order on purpose, with what is not a final release
KAFKA_VERSIONS = ["3.9.1", "3.10.0", "4.0.0-rc1", "3.7.0", "3.7.1", "3.8.0", "4.0.0", "3.9.0", "4.1.1", "4.1.0",
                  "3.8.1", "4.1.0-SNAPSHOT", "4.0.1", "3.7.2", "5.0.0-M1", "2.0.0-rc1-incubating",
                  "1.22.0-incubating", "4.2.0"]
FINAL = ["3.7.0", "3.7.1", "3.7.2", "3.8.0", "3.8.1", "3.9.0", "3.9.1", "3.10.0", "4.0.0", "4.0.1", "4.1.0",
         "4.1.1", "4.2.0"]


def metadata(group: str, artifact: str, versions: list[str]) -> str:
    items = "".join(f"<version>{v}</version>" for v in versions)
    return (f'<?xml version="1.0" encoding="UTF-8"?><metadata><groupId>{group}</groupId><artifactId>{artifact}'
            f"</artifactId><versioning><latest>4.2.0</latest><release>4.2.0</release><versions>{items}</versions>"
            f"</versioning></metadata>")


@pytest.fixture
def maven(monkeypatch):
    """A Maven repository on 127.0.0.1 with Kafka's and Pulsar's metadata; BROKERBENCH_MAVEN_MIRROR names it."""
    files = {KAFKA_PATH: metadata("org.apache.kafka", "kafka_2.13", KAFKA_VERSIONS),
             PULSAR_PATH: metadata("org.apache.pulsar", "pulsar-broker", ["4.0.0", "4.0.7", "3.3.6", "4.1.0-rc2"])}
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            asked.append(self.path)
            body = files.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write((body or "not found").encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/maven2"
    monkeypatch.setenv("BROKERBENCH_MAVEN_MIRROR", base + "/")
    yield asked
    server.shutdown()
    server.server_close()


# -- the releases ----------------------------------------------------------------------------------------------


def test_the_releases_are_the_final_ones_in_version_order(maven):
    assert bs.fetch_releases("kafka") == FINAL  # 3.10.0 after 3.9.1; no -rc, -SNAPSHOT, -M1, -incubating
    assert bs.fetch_releases("pulsar") == ["3.3.6", "4.0.0", "4.0.7"]
    assert maven == [KAFKA_PATH, PULSAR_PATH]


def test_the_range_is_inclusive_and_in_version_order(maven):
    releases = bs.fetch_releases("kafka")
    assert bs.releases_between(releases, "3.9.1", "4.1.0") == ["3.9.1", "3.10.0", "4.0.0", "4.0.1", "4.1.0"]
    assert bs.releases_between(releases, "4.1.1", "4.2.0") == ["4.1.1", "4.2.0"]


@pytest.mark.parametrize("good, bad, words", [
    ("3.7.5", "4.1.1", ["--good '3.7.5' is not a final kafka release", "close releases: 3.7.0, 3.7.1, 3.7.2, 3.8.0"]),
    ("3.7.0", "4.1.3", ["--bad '4.1.3' is not a final kafka release", "4.1.1, 4.2.0"]),
    ("3.7.0", "4.0.0-rc1", ["--bad '4.0.0-rc1' is not a final kafka release", "4.0.0"]),
    ("4.1.1", "3.7.0", ["--good 4.1.1 is not older than --bad 3.7.0"]),
    ("4.1.1", "4.1.1", ["--good 4.1.1 is not older than --bad 4.1.1"]),
])
def test_unknown_or_misordered_versions_are_refused_naming_the_argument(maven, good, bad, words):
    with pytest.raises(bs.Refused) as e:
        bs.releases_between(bs.fetch_releases("kafka"), good, bad, "kafka")
    for w in words:
        assert w in str(e.value)


def test_rabbitmq_is_refused_its_versions_come_from_the_debian_package():
    with pytest.raises(bs.Refused, match=r"--broker rabbitmq: .*Debian package"):
        bs.metadata_url("rabbitmq")


def test_the_url_is_maven_central_unless_the_mirror_is_set(monkeypatch):
    monkeypatch.delenv("BROKERBENCH_MAVEN_MIRROR", raising=False)
    assert bs.metadata_url("kafka") == "https://repo1.maven.org/maven2/org/apache/kafka/kafka_2.13/maven-metadata.xml"
    assert bs.metadata_url("pulsar").endswith("/org/apache/pulsar/pulsar-broker/maven-metadata.xml")


def test_an_unreachable_repository_names_the_url(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there now
    monkeypatch.setenv("BROKERBENCH_MAVEN_MIRROR", f"http://127.0.0.1:{port}/m2")
    with pytest.raises(bs.ReleasesUnavailable, match=rf"could not read http://127.0.0.1:{port}/m2/org/apache/kafka"):
        bs.fetch_releases("kafka", timeout=5)


# -- the search ------------------------------------------------------------------------------------------------


class Canned:
    """A step runner with canned verdicts: B regressed when it is at or after ``first_bad`` (and A before it);
    ``not_judged``: (A, B) pairs not judged that many times first."""

    def __init__(self, releases, first_bad, not_judged=None, exit_code=None):
        self.releases, self.first_bad = list(releases), first_bad
        self.not_judged = dict(not_judged or {})
        self.exit_code = exit_code
        self.calls: list[tuple[str, str]] = []

    def __call__(self, a, b):
        self.calls.append((a, b))
        if self.exit_code is not None:
            return bs.StepResult("not judged: the run was refused before it started (exit 2)", exit_code=2)
        if self.not_judged.get((a, b), 0) > 0:
            self.not_judged[(a, b)] -= 1
            return bs.StepResult("not judged: too few valid trials", run_dir=f"/runs/{len(self.calls)}",
                                 exit_code=0)
        i = self.releases.index
        bad = self.first_bad is not None and i(b) >= i(self.first_bad) > i(a)
        return bs.StepResult("regressed" if bad else "unchanged", median_a=10.0, median_b=12.5 if bad else 10.1,
                             ratio=1.25 if bad else 1.01, ci_low=1.2 if bad else 0.97, ci_high=1.3 if bad else 1.04,
                             confidence=0.971, run_dir=f"/runs/{len(self.calls)}", exit_code=3 if bad else 0,
                             evidence=f"{b} against {a}")


@pytest.mark.parametrize("first_bad", ["3.9.1", "3.10.0"])
def test_three_releases_take_the_end_points_and_one_step(first_bad):
    releases = ["3.9.0", "3.9.1", "3.10.0"]
    runner = Canned(releases, first_bad)
    b = bs.bisect(releases, runner, "kafka", "publish_latency_p99_ms")
    assert (b.status, b.exit_code, b.first_bad) == ("found", 0, first_bad)
    assert b.last_good == releases[releases.index(first_bad) - 1]
    # side A: the last release known good; when the search ended on two releases no step measured together
    # (3.9.1 unchanged, so 3.10.0 by elimination), one more step measures them
    confirm = [("3.9.1", "3.10.0")] if first_bad == "3.10.0" else []
    assert runner.calls == [("3.9.0", "3.10.0"), ("3.9.0", "3.9.1"), *confirm]
    assert [s.role for s in b.steps] == ["end points", "search"] + ["confirm"] * len(confirm)
    assert len(b.steps) <= bs.max_steps(3) == 3
    assert b.message == f"first release with the change: {first_bad} (last without: {b.last_good})"


@pytest.mark.parametrize("first_bad", FINAL[1:9])
def test_nine_releases_take_the_end_points_and_log2_steps(first_bad):
    releases = FINAL[:9]
    runner = Canned(releases, first_bad)
    b = bs.bisect(releases, runner, "kafka", "publish_latency_p99_ms")
    assert (b.first_bad, b.last_good) == (first_bad, releases[releases.index(first_bad) - 1])
    # the end points, log2(8) = 3 searching steps, and the two neighbours measured together unless a step did
    searched = 1 + math.log2(len(releases) - 1)
    assert [s.role for s in b.steps[:4]] == ["end points", "search", "search", "search"]
    assert [s.role for s in b.steps[4:]] in ([], ["confirm"]) and len(b.steps) <= bs.max_steps(9) == searched + 1
    assert [s.step for s in b.steps] == list(range(1, len(b.steps) + 1))
    assert any((s.version_a, s.version_b, s.result.verdict) == (b.last_good, b.first_bad, "regressed")
               for s in b.steps)  # the answer is always a measured pair
    for s in b.steps[1:]:  # A is always a release known without the change, B a candidate after it
        assert releases.index(s.version_a) < releases.index(first_bad) or s.version_a == releases[0]
        assert releases.index(s.version_a) < releases.index(s.version_b)


def test_a_change_no_pair_of_neighbours_shows_is_not_put_on_one_release():
    """The end points differ, but every searching step and the confirming one find nothing (a change spread over
    several releases, or end points that differed by chance): not in one release, exit 1."""
    releases = FINAL[:5]

    class EndsOnly(Canned):
        def __call__(self, a, b):
            self.calls.append((a, b))
            bad = (a, b) == (releases[0], releases[-1])
            return bs.StepResult("regressed" if bad else "unchanged", ratio=1.2 if bad else 1.03,
                                 ci_low=1.02 if bad else 0.8, ci_high=1.6 if bad else 1.3, confidence=0.968)

    runner = EndsOnly(releases, None)
    b = bs.bisect(releases, runner, "kafka", "publish_latency_p50_ms")
    assert (b.status, b.exit_code, b.first_bad, b.last_good) == ("not in one release", 1, None, None)
    assert runner.calls == [("3.7.0", "3.8.1"), ("3.7.0", "3.7.2"), ("3.7.2", "3.8.0"), ("3.8.0", "3.8.1")]
    assert [s.role for s in b.steps] == ["end points", "search", "search", "confirm"]
    assert b.message.startswith("not in one release at this power: the end points differed (3.8.1 against 3.7.0: "
                                "1.200 [1.020, 1.600] 96.8%, regressed)")
    assert "3.8.1 against 3.8.0 neither (unchanged)" in b.message
    assert "(confirm)" in bs.steps_table(b)


def test_a_step_not_judged_is_repeated_once_then_the_search_goes_on():
    releases = FINAL[:9]
    runner = Canned(releases, "3.8.1", not_judged={("3.7.0", "3.8.1"): 1})
    b = bs.bisect(releases, runner, "kafka", "publish_latency_p99_ms")
    assert (b.status, b.first_bad) == ("found", "3.8.1")
    assert runner.calls.count(("3.7.0", "3.8.1")) == 2
    again = [s for s in b.steps if s.attempt == 2]
    assert len(again) == 1 and again[0].step == 2 and again[0].result.verdict == "regressed"


def test_a_step_not_judged_twice_stops_undecided_with_exit_1():
    releases = FINAL[:9]
    runner = Canned(releases, "3.8.1", not_judged={("3.7.0", "3.8.1"): 2})
    seen = []
    b = bs.bisect(releases, runner, "kafka", "publish_latency_p99_ms", on_step=lambda s, _: seen.append(s))
    assert (b.status, b.exit_code, b.first_bad) == ("undecided", 1, None)
    assert runner.calls == [("3.7.0", "4.0.0"), ("3.7.0", "3.8.1"), ("3.7.0", "3.8.1")]
    assert [(s.step, s.attempt) for s in b.steps] == [(1, 1), (2, 1), (2, 2)] and seen == b.steps
    assert "could not decide: A 3.7.0 vs B 3.8.1 was not judged twice" in b.message


def test_no_regression_between_the_end_points_stops_after_one_step():
    releases = FINAL[:9]
    runner = Canned(releases, None)
    b = bs.bisect(releases, runner, "kafka", "publish_latency_p99_ms")
    assert (b.status, b.exit_code, b.first_bad) == ("no regression", 0, None)
    assert runner.calls == [("3.7.0", "4.0.0")]
    assert b.message.startswith("no regression between good and bad at this power")


def test_a_refused_run_stops_at_once_with_exit_2():
    runner = Canned(FINAL[:3], "3.7.1", exit_code=2)
    b = bs.bisect(FINAL[:3], runner, "kafka", "publish_latency_p99_ms")
    assert (b.status, b.exit_code, len(runner.calls)) == ("refused", 2, 1)


def test_the_dry_run_plan_names_the_first_steps():
    lines = bs.planned_steps(FINAL[:9])
    assert lines[0] == "step 1: A 3.7.0 vs B 4.0.0 (the end points: B must show the change)"
    assert lines[1] == "step 2: A 3.7.0 vs B 3.8.1"
    assert lines[2] == "step 3: if 3.8.1 regressed: A 3.7.0 vs B 3.7.2; else: A 3.8.1 vs B 3.9.1"
    assert "at most 5 A/B run(s)" in lines[3]
    # where the search would end on two releases no step measured together, the plan says the one more step
    assert bs.planned_steps(FINAL[:3])[2] == ("step 3: if 3.7.1 regressed: done (3.7.1 is the first with the change); "
                                              "else: A 3.7.1 vs B 3.7.2 (the two the search ends on, measured together)")


# -- one step as an A/B run --------------------------------------------------------------------------------------


def ab_verdict(workload, verdict, metric="publish_latency_p99_ms", variant="fsync-off", broker="kafka", ratio=1.2):
    return {"workload": workload, "broker": broker, "variant": variant, "metric": metric, "verdict": verdict,
            "rule": "A/B", "value": 12.0, "baseline_median": 10.0, "evidence": f"{workload}: {verdict}",
            "interval": {"ratio": ratio, "ci_low": ratio - 0.05, "ci_high": ratio + 0.05, "confidence": 0.971,
                         "n_a": 5, "n_b": 5}}


def write_run(run_dir: Path, verdicts: list[dict]) -> Path:
    (run_dir / "summary").mkdir(parents=True)
    (run_dir / "summary" / "regression.json").write_text(json.dumps({"run_key": "x", "verdicts": verdicts}))
    return run_dir


def test_a_bench_step_asks_one_ab_run_and_reads_its_verdict(tmp_path):
    asked = []

    def bench(conf):
        asked.append(conf)
        return 3, write_run(tmp_path / "run1", [
            ab_verdict("w1", "unchanged"), ab_verdict("w2", "regressed", ratio=1.3),
            ab_verdict("w2", "regressed", metric="e2e_latency_p99_ms"), ab_verdict("w2", "improved", variant="fsync-on"),
            {**ab_verdict("w3", "regressed"), "rule": "change point"}])

    steps = bs.BenchSteps(bench, "kafka", "publish_latency_p99_ms", "fsync-off", conf={"trials": 6})
    r = steps("3.9.1", "4.0.0")
    assert asked == [{"trials": 6, "brokers": ["kafka"], "variants": ["fsync-off"],
                      "broker_versions": {"kafka": "3.9.1"}, "compare_with": {"broker_versions": {"kafka": "4.0.0"}}}]
    assert (r.verdict, r.ratio, r.median_a, r.median_b, r.exit_code) == ("regressed", 1.3, 10.0, 12.0, 3)
    assert r.run_dir == str(tmp_path / "run1") and r.evidence.startswith("workload w2 (of 2 judged)")
    assert bs.BenchSteps(bench, "kafka", "m", "v", workload="w1").conf_for("a", "b")["workloads"] == ["w1"]


def test_a_bench_step_without_its_verdict_is_not_judged(tmp_path):
    r = bs.BenchSteps(lambda conf: (1, tmp_path / "nothing"), "kafka", "publish_latency_p99_ms", "fsync-off")("a", "b")
    assert r.verdict == "not judged: no regression.json (the run failed: exit 1)" and r.exit_code == 1
    r = bs.BenchSteps(lambda conf: (2, None), "kafka", "publish_latency_p99_ms", "fsync-off")("a", "b")
    assert r.exit_code == 2 and "refused" in r.verdict
    run = write_run(tmp_path / "run2", [ab_verdict("w1", "unchanged", metric="e2e_latency_p99_ms")])
    r = bs.BenchSteps(lambda conf: (0, run), "kafka", "publish_latency_p99_ms", "fsync-off")("a", "b")
    assert r.verdict == "not judged: no A/B verdict of publish_latency_p99_ms on kafka in regression.json"


# -- the record ------------------------------------------------------------------------------------------------


def test_the_record_has_every_step_and_the_result(tmp_path):
    releases = FINAL[:3]
    b = bs.bisect(releases, Canned(releases, "3.7.2", not_judged={("3.7.0", "3.7.1"): 1}), "kafka",
                  "publish_latency_p99_ms")
    out = bs.record_dir(tmp_path, "kafka", "3.7.0", "3.7.2")
    assert out.parent == tmp_path / "bisect" and out.name.startswith("kafka-3.7.0-3.7.2-") and out.name.endswith("Z")
    path = bs.write_record(out, b, {"broker": "kafka", "good": "3.7.0", "bad": "3.7.2", "suite": "smoke"})
    doc = json.loads(path.read_text())
    assert (doc["status"], doc["first_with_change"], doc["last_without_change"]) == ("found", "3.7.2", "3.7.1")
    assert doc["releases"] == releases and doc["params"]["suite"] == "smoke" and doc["exit_code"] == 0
    assert [(s["step"], s["attempt"], s["version_a"], s["version_b"], s["result"]["verdict"]) for s in doc["steps"]] == [
        (1, 1, "3.7.0", "3.7.2", "regressed"), (2, 1, "3.7.0", "3.7.1", "not judged: too few valid trials"),
        (2, 2, "3.7.0", "3.7.1", "unchanged"), (3, 1, "3.7.1", "3.7.2", "regressed")]
    assert doc["steps"][0]["result"]["ratio"] == 1.25 and doc["steps"][0]["result"]["run_dir"] == "/runs/1"
    page = (out / "bisect.html").read_text()
    assert "first release with the change: 3.7.2 (last without: 3.7.1)" in page
    assert page.count("<tr><td>") == 4 and "<td>2 again</td>" in page and "<td>1 (end points)</td>" in page
    assert "<td>3 (confirm)</td>" in page
    assert "<td>1.250 [1.200, 1.300] 97.1%</td>" in page and "<td>/runs/1</td>" in page
    assert "<script" not in page and "src=" not in page and "http" not in page.replace("http-equiv", "")


def test_the_table_line_of_a_step(tmp_path):
    releases = FINAL[:3]
    b = bs.bisect(releases, Canned(releases, "3.7.2"), "kafka", "publish_latency_p99_ms")
    lines = bs.steps_table(b).splitlines()
    assert lines[0].split() == ["step", "side_a", "side_b", "a_median_ms", "b_median_ms", "ratio_b_a", "[interval]",
                                "verdict", "run_dir"]
    assert lines[2].split() == ["1", "(end", "points)", "3.7.0", "3.7.2", "10", "12.5", "1.250", "[1.200,",
                                "1.300]", "97.1%", "regressed", "/runs/1"]


# -- the command line --------------------------------------------------------------------------------------------


@pytest.fixture
def no_airflow_defaults(monkeypatch):
    monkeypatch.setattr(cli.local_airflow, "apply_defaults", lambda: [])

    def no_run(args):
        raise AssertionError("bisect started a run")

    monkeypatch.setattr(cli, "bench_run", no_run)


def test_dry_run_lists_the_releases_and_the_first_steps(maven, no_airflow_defaults, capsys):
    assert cli.main(["bisect", "--broker", "kafka", "--good", "3.7.0", "--bad", "4.0.0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("brokerbench: 9 kafka releases from 3.7.0 to 4.0.0 (http://127.0.0.1:" in out
            and ": 3.7.0, 3.7.1, 3.7.2, 3.8.0, 3.8.1, 3.9.0, 3.9.1, 3.10.0, 4.0.0\n" in out)
    assert "each step: one A/B run of suite smoke, kafka, variant fsync-off, judged on publish_latency_p99_ms" in out
    assert "brokerbench: step 1: A 3.7.0 vs B 4.0.0 (the end points: B must show the change)" in out
    assert "brokerbench: step 2: A 3.7.0 vs B 3.8.1" in out
    assert out.rstrip().endswith("brokerbench: dry run: nothing was run")


@pytest.mark.parametrize("argv, words", [
    (["--broker", "kafka", "--good", "3.7.5", "--bad", "4.0.0"], "--good '3.7.5' is not a final kafka release"),
    (["--broker", "rabbitmq", "--good", "3.13.7", "--bad", "4.0.5"], "Debian package"),
    (["--broker", "kafka", "--good", "3.7.0", "--bad", "4.0.0", "--metric", "publish_latency_p99"],
     "--metric 'publish_latency_p99' is not a judged metric; did you mean 'publish_latency_p99_ms'"),
    (["--broker", "kafka", "--good", "3.7.0", "--bad", "4.0.0", "--conf", '{"brokers": ["kafka"]}'],
     "--conf's 'brokers': bisect sets them itself"),
    (["--broker", "kafka", "--good", "3.7.0", "--bad", "4.0.0", "--workload", "nope"], "--workload 'nope' is not"),
])
def test_refused_arguments_exit_2_naming_the_argument(maven, no_airflow_defaults, capsys, argv, words):
    assert cli.main(["bisect", *argv, "--dry-run"]) == 2
    assert words in capsys.readouterr().err


def test_a_bisection_through_the_command_line(maven, monkeypatch, tmp_path, capsys):
    """Each step is a `bench` run (here: its results directory written as the verdicts step would), the first
    release with the change is named, and the record is in the results root."""
    monkeypatch.setattr(cli.local_airflow, "apply_defaults", lambda: [])
    monkeypatch.setenv("BROKERBENCH_RESULTS_ROOT", str(tmp_path))
    first_bad = "3.9.0"
    asked = []

    def bench_run(args):
        conf = json.loads(args.conf)
        asked.append(conf)
        a, b = conf["broker_versions"]["kafka"], conf["compare_with"]["broker_versions"]["kafka"]
        bad = FINAL.index(b) >= FINAL.index(first_bad) > FINAL.index(a)
        run = write_run(tmp_path / "runs" / f"run{len(asked)}", [ab_verdict("w", "regressed" if bad else "unchanged",
                                                                             ratio=1.2 if bad else 1.0)])
        return (3 if bad else 0), run

    monkeypatch.setattr(cli, "bench_run", bench_run)
    code = cli.main(["bisect", "--broker", "kafka", "--good", "3.7.0", "--bad", "4.0.0", "--trials", "6"])
    out = capsys.readouterr().out
    assert code == 0
    assert [(c["broker_versions"]["kafka"], c["compare_with"]["broker_versions"]["kafka"]) for c in asked] == [
        ("3.7.0", "4.0.0"), ("3.7.0", "3.8.1"), ("3.8.1", "3.9.1"), ("3.8.1", "3.9.0")]
    assert all(c["trials"] == 6 and c["brokers"] == ["kafka"] and c["variants"] == ["fsync-off"] for c in asked)
    assert "brokerbench: bisect step 4: A 3.8.1 vs B 3.9.0: regressed" in out
    assert "brokerbench: first release with the change: 3.9.0 (last without: 3.8.1)" in out
    records = list((tmp_path / "bisect").glob("kafka-3.7.0-4.0.0-*/bisect.json"))
    assert len(records) == 1 and (records[0].parent / "bisect.html").is_file()
    doc = json.loads(records[0].read_text())
    assert doc["first_with_change"] == "3.9.0" and len(doc["steps"]) == 4
    assert doc["steps"][0]["result"]["run_dir"] == str(tmp_path / "runs" / "run1")


def test_the_trials_default_to_the_ab_default(maven, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli.local_airflow, "apply_defaults", lambda: [])
    monkeypatch.setenv("BROKERBENCH_RESULTS_ROOT", str(tmp_path))
    asked = []
    monkeypatch.setattr(cli, "bench_run", lambda args: (asked.append(json.loads(args.conf)), (1, None))[1])
    assert cli.main(["bisect", "--broker", "kafka", "--good", "3.7.0", "--bad", "3.7.1"]) == 1
    assert len(asked) == 2 and asked[0]["trials"] == AB_DEFAULT_TRIALS  # not judged, repeated once, then undecided
    assert "could not decide" in capsys.readouterr().out


# -- resuming, and the manual DAG -------------------------------------------------------------------------------


def test_resuming_from_the_steps_so_far_asks_the_pair_the_search_would_run_next():
    releases = FINAL[:9]
    runner = Canned(releases, "3.9.0")
    whole = bs.bisect(releases, runner, "kafka", "publish_latency_p99_ms")
    recorded = [(s.version_a, s.version_b, s.result) for s in whole.steps]
    for k in range(len(recorded)):
        so_far, pair = bs.resume(releases, recorded[:k], "kafka", "publish_latency_p99_ms")
        assert pair == runner.calls[k] and len(so_far.steps) == k and so_far.status == "running"
    done, pair = bs.resume(releases, recorded, "kafka", "publish_latency_p99_ms")
    assert pair is None and done.status == "found" and done.first_bad == "3.9.0"
    with pytest.raises(ValueError, match="A 3.7.0 vs B 3.8.0 is not the one this bisection asks for next"):
        bs.resume(releases, [("3.7.0", "3.8.0", recorded[0][2])], "kafka", "publish_latency_p99_ms")


def test_the_plan_refuses_naming_the_param_in_the_dag_and_the_flag_on_the_command_line(maven):
    with pytest.raises(bs.Refused, match=r"^params\.good '3\.7\.5' is not a final kafka release"):
        bs.plan("kafka", "3.7.5", "4.0.0", "publish_latency_p99_ms", label=bs.dag_label)
    with pytest.raises(bs.Refused, match=r"^params\.conf's 'compare_with': bisect sets them itself"):
        bs.plan("kafka", "3.7.0", "4.0.0", "publish_latency_p99_ms", conf={"compare_with": {}}, label=bs.dag_label)
    with pytest.raises(bs.Refused, match=r"^--suite: "):
        bs.plan("kafka", "3.7.0", "4.0.0", "publish_latency_p99_ms", suite="no-such-suite")
    p = bs.plan("kafka", "3.7.0", "3.8.0", "publish_latency_p50_ms", conf={"results_root": "/r"})
    assert p.releases == ["3.7.0", "3.7.1", "3.7.2", "3.8.0"] and p.variant == "fsync-off"
    assert p.conf == {"results_root": "/r", "trials": AB_DEFAULT_TRIALS} and bs.BisectPlan.from_dict(p.to_dict()) == p


class FakeTI:
    """The XComs of one DAG run, by task id (what the operators pull)."""

    def __init__(self):
        self.xcoms: dict[str, object] = {}

    def xcom_pull(self, task_ids):
        return self.xcoms.get(task_ids)


def test_the_manual_dag_runs_one_ab_run_per_step_task_and_records_the_release(maven, monkeypatch, tmp_path):
    """brokerbench_bisect's tasks in their order, each with the XComs of those before it (an A/B run per step is a
    `bench` run writing its regression.json, the difference injected at 3.7.2): the steps after the end skip
    themselves, and the record names the release."""
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from brokerbench.dag_factory import build_bisect_dag

    dag = build_bisect_dag()
    dag.validate()
    assert dag.schedule is None and dag.max_active_runs == 1
    ids = [t.task_id for t in dag.tasks]
    assert ids == ["releases", *(f"step_{k}" for k in range(1, bs.DAG_STEPS + 1)), "record"]
    assert dag.get_task("record").trigger_rule == "all_done"
    params = ParamsDict(dag.params).validate()
    assert params["metric"] == "publish_latency_p99_ms" and params["trials"] == AB_DEFAULT_TRIALS
    with pytest.raises(Exception, match="trials"):
        ParamsDict(dag.params).update({"trials": 3})

    asked = []

    def bench_run(args):
        conf = json.loads(args.conf)
        asked.append(conf)
        a, b = conf["broker_versions"]["kafka"], conf["compare_with"]["broker_versions"]["kafka"]
        bad = FINAL.index(b) >= FINAL.index("3.7.2") > FINAL.index(a)
        return (3 if bad else 0), write_run(tmp_path / "runs" / f"run{len(asked)}",
                                            [ab_verdict("w", "regressed" if bad else "unchanged")])

    monkeypatch.setattr(cli, "bench_run", bench_run)
    ti = FakeTI()
    context = {"ti": ti, "params": {**params, "good": "3.7.0", "bad": "3.8.0",
                                    "conf": {"results_root": str(tmp_path)}}}
    ran, skipped = [], []
    for task in dag.tasks:
        try:
            ti.xcoms[task.task_id] = task.execute(context)
            ran.append(task.task_id)
        except AirflowSkipException:
            skipped.append(task.task_id)
    assert asked[0]["compare_with"] == {"broker_versions": {"kafka": "3.8.0"}} and asked[0]["trials"] == AB_DEFAULT_TRIALS
    assert [(c["broker_versions"]["kafka"], c["compare_with"]["broker_versions"]["kafka"]) for c in asked] == [
        ("3.7.0", "3.8.0"), ("3.7.0", "3.7.1"), ("3.7.1", "3.7.2")]
    assert ran == ["releases", "step_1", "step_2", "step_3", "record"]
    assert skipped == [f"step_{k}" for k in range(4, bs.DAG_STEPS + 1)]
    assert ti.xcoms["record"]["first_with_change"] == "3.7.2" and ti.xcoms["record"]["status"] == "found"
    doc = json.loads(Path(ti.xcoms["record"]["record"]).read_text())
    assert [s["version_b"] for s in doc["steps"]] == ["3.8.0", "3.7.1", "3.7.2"]
    assert doc["params"]["conf"]["results_root"] == str(tmp_path)

    # a step that failed (its task measured nothing): the record says what is known and fails the run
    ti.xcoms["step_2"] = None
    with pytest.raises(AirflowFailException, match="could not decide: step task 2 measured nothing"):
        dag.get_task("record").execute(context)
    # refused params fail the first task, naming the param
    with pytest.raises(AirflowFailException, match=r"params\.bad '3\.8\.5' is not a final kafka release"):
        dag.get_task("releases").execute({"ti": FakeTI(), "params": {**params, "bad": "3.8.5"}})
