"""Suspects: the brokers' own metrics and the hosts' figures that moved with a verdict's change."""

from __future__ import annotations

import random

from brokerbench import suspects
from brokerbench.ab_verdicts import verdicts as ab_verdicts
from brokerbench.metrics import Judgement
from brokerbench.regression import verdicts_for_run

WID = "1-topic-1-partition-100b"
FLUSH = "kafka_log_flush_time_p50_ms"
LOCAL = "kafka_produce_local_time_mean_ms"
GC = "kafka_gc_time_ms_per_s"
IDLE = "kafka_request_handler_idle_percent"
QUEUE = "kafka_request_queue_size_requests"


def trial_rows(a: dict[str, list], b: dict[str, list], notes_a: str = "", notes_b: str = "") -> list[dict]:
    """One row per trial and side; each column's list gives its per-trial figures (None: none)."""
    rows = []
    for side, cols, notes in (("A", a, notes_a), ("B", b, notes_b)):
        n = len(next(iter(cols.values())))
        for k in range(n):
            wid = f"{WID}{'.B' if side == 'B' else ''}.trial{k + 1}"
            rows.append({"workload": wid, "broker": "kafka", "variant": "fsync-off", "driver": "kafka-latency",
                         "broker_version": "4.1.1", "status": "ok", "client_library": "kafka-python",
                         "broker_metrics_notes": notes or None, **{c: v[k] for c, v in cols.items()}})
    return rows


def jitter(centre: float, n: int = 4, seed: int = 1, spread: float = 0.03) -> list[float]:
    rng = random.Random(seed)
    return [centre * rng.uniform(1 - spread, 1 + spread) for _ in range(n)]


def p99_verdict(rows):
    return next(v for v in ab_verdicts(rows) if v.metric == "publish_latency_p99_ms")


def test_an_ab_slowdown_names_the_metric_that_moved_first_and_clears_the_ones_that_did_not():
    # side B: fsync on. The log flush appears (no flushes at all on A), the leader's append time grows
    # eightfold, GC and the request handlers stay where they were
    a = {"publish_latency_p99_ms": jitter(10, seed=1), LOCAL: jitter(0.2, seed=2), GC: jitter(3.0, seed=3),
         IDLE: jitter(90.0, seed=4), "host_cpu_percent": jitter(40, seed=5)}
    b = {"publish_latency_p99_ms": jitter(14, seed=6), LOCAL: jitter(1.6, seed=7), GC: jitter(3.0, seed=8),
         IDLE: jitter(90.0, seed=9), "host_cpu_percent": jitter(40, seed=10), FLUSH: jitter(3.2, seed=11)}
    a[FLUSH] = [None] * 4
    v = p99_verdict(trial_rows(a, b, notes_a=f"{FLUSH}: no events during the phase"))
    assert v.verdict == Judgement.REGRESSED
    s = v.suspects
    names = [f["column"] for f in s["suspects"]]
    assert names[:2] == [FLUSH, LOCAL]  # appeared first, then the largest ratio
    assert s["suspects"][0]["direction"] == "appeared"
    flush, local = s["suspects"][0], s["suspects"][1]
    assert local["direction"] == "up" and 6 < local["ratio"] < 10 and local["ci_low"] > 1.1
    cleared = {f["column"] for f in s["cleared"]}
    assert {GC, IDLE, "host_cpu_percent"} <= cleared
    # one sentence leads the verdict: its own change with its interval, then suspects and cleared
    sentence = s["sentence"]
    assert sentence.startswith("publish_latency_p99_ms +")
    assert "%] " not in sentence and ": suspects: Kafka Log flush: p50 appeared (" in sentence
    assert "Kafka Produce: local (leader append) +" in sentence and "; cleared: " in sentence
    assert flush["change"].startswith("appeared")


def test_a_change_that_moved_nothing_on_the_brokers_says_so():
    a = {"publish_latency_p99_ms": jitter(10, seed=1), LOCAL: jitter(0.2, seed=2), GC: jitter(3.0, seed=3)}
    b = {"publish_latency_p99_ms": jitter(13, seed=4), LOCAL: jitter(0.2, seed=5), GC: jitter(3.0, seed=6)}
    s = p99_verdict(trial_rows(a, b)).suspects
    assert s["suspects"] == []
    assert suspects.NOTHING_MOVED in s["sentence"] and "cleared: Kafka Produce: local" in s["sentence"]


def test_a_host_figure_alone_is_named_after_nothing_on_the_brokers_moved():
    # a proxy on the clients' path: the latency and the host's CPU up, every broker metric where it was
    a = {"publish_latency_p99_ms": jitter(10, seed=1), LOCAL: jitter(0.2, seed=2), "host_cpu_percent": jitter(30)}
    b = {"publish_latency_p99_ms": jitter(15, seed=4), LOCAL: jitter(0.2, seed=5), "host_cpu_percent": jitter(45)}
    s = p99_verdict(trial_rows(a, b)).suspects
    assert [f["column"] for f in s["suspects"]] == ["host_cpu_percent"]
    assert f"{suspects.NOTHING_MOVED}; on the hosts: host CPU +" in s["sentence"]


def test_a_move_the_other_way_and_the_clients_load_go_with_a_slowdown_but_are_not_its_suspects():
    # Kafka behind a slower network (side B): the fetches find data waiting and take half the time, the producers
    # batch more per request; neither can make publishing slower, and the append time did not move
    fetch, requests = "kafka_fetch_consumer_total_time_mean_ms", "kafka_produce_requests_per_s"
    a = {"publish_latency_p99_ms": jitter(10, seed=1), fetch: jitter(500, seed=2), requests: jitter(300, seed=3),
         LOCAL: jitter(0.2, seed=4)}
    b = {"publish_latency_p99_ms": jitter(30, seed=5), fetch: jitter(240, seed=6), requests: jitter(170, seed=7),
         LOCAL: jitter(0.2, seed=8)}
    v = p99_verdict(trial_rows(a, b))
    assert v.verdict == Judgement.REGRESSED
    s = v.suspects
    assert s["suspects"] == []
    assert [f["column"] for f in s["with_it"]] == [fetch, requests]  # ranked by the size of the change
    assert s["sentence"].startswith("publish_latency_p99_ms +")
    assert (f": {suspects.NOTHING_MOVED}; moved with it, not as a cause: Kafka FetchConsumer: total -5"
            in s["sentence"]) and "(the other way), Kafka Produce requests -4" in s["sentence"]
    assert "(the clients' load); cleared: Kafka Produce: local (leader append)" in s["sentence"]
    # the same moves with an improvement (side A and B swapped): the fetch time's rise is not its cause either,
    # the request rate still only the load
    improved = p99_verdict(trial_rows(b, a))
    assert improved.verdict == Judgement.IMPROVED
    assert improved.suspects["suspects"] == []
    assert {f["column"] for f in improved.suspects["with_it"]} == {fetch, requests}


def test_a_move_in_the_worse_way_of_a_lower_is_worse_metric_is_a_suspect_of_a_slowdown():
    a = {"publish_latency_p99_ms": jitter(10, seed=1), IDLE: jitter(90, seed=2)}
    b = {"publish_latency_p99_ms": jitter(14, seed=3), IDLE: jitter(40, seed=4)}
    s = p99_verdict(trial_rows(a, b)).suspects
    assert [f["column"] for f in s["suspects"]] == [IDLE] and s["with_it"] == []


def test_no_metric_on_both_sides_is_no_verdict_of_nothing_moved():
    s = p99_verdict(trial_rows({"publish_latency_p99_ms": jitter(10)},
                               {"publish_latency_p99_ms": jitter(13, seed=2)})).suspects
    assert "no broker or host metric was measured on both sides" in s["sentence"]
    assert suspects.NOTHING_MOVED not in s["sentence"]


def test_a_small_but_significant_move_is_cleared_and_zeros_take_the_shift():
    # every B trial 4 % above every A trial: significant, but under the 10 % minimum effect
    a = {"publish_latency_p99_ms": jitter(10, seed=1), LOCAL: [1.00, 1.01, 1.02, 1.03]}
    b = {"publish_latency_p99_ms": jitter(13, seed=2), LOCAL: [1.05, 1.06, 1.07, 1.08], QUEUE: [3.0, 4, 5, 3]}
    a[QUEUE] = [0.0, 0.0, 0.0, 0.0]  # the request queue stayed empty on A: no ratio, the shift's interval
    s = p99_verdict(trial_rows(a, b)).suspects
    assert LOCAL in {f["column"] for f in s["cleared"]}
    (queue,) = [f for f in s["suspects"] if f["column"] == QUEUE]
    assert queue["scale"] == "shift" and queue["ci_low"] == 3.0 and queue["direction"] == "up"
    assert "Kafka Request queue 0 -> 3 requests [+3, +5 requests]" in s["sentence"]


def test_a_change_below_the_units_floor_is_no_suspect_however_significant():
    remote = "kafka_produce_remote_time_mean_ms"  # a single node: no followers, the remote time stays near 0
    a = {"publish_latency_p99_ms": jitter(10, seed=1), remote: [0.0, 0.0, 0.0, 0.0]}
    b = {"publish_latency_p99_ms": jitter(13, seed=2), remote: [0.01, 0.012, 0.011, 0.013]}
    s = p99_verdict(trial_rows(a, b)).suspects
    assert s["suspects"] == [] and remote in {f["column"] for f in s["cleared"]}


def test_a_side_at_zero_counts_as_its_floor_in_the_ranking():
    # measured with fsync on (side B): the disk went from idle to 7 % busy, the log flushes from 2.5 to 300 per
    # second: the flushes' change is the larger (x120 against 7 floors of 1 %) and ranks first
    flushes = "kafka_log_flushes_per_s"
    a = {"publish_latency_p99_ms": jitter(10, seed=1), flushes: jitter(2.5, seed=2), "host_disk_util_percent": [0.0] * 4}
    b = {"publish_latency_p99_ms": jitter(14, seed=3), flushes: jitter(300, seed=4),
         "host_disk_util_percent": jitter(7.3, seed=5)}
    s = p99_verdict(trial_rows(a, b)).suspects
    assert [f["column"] for f in s["suspects"]] == [flushes, "host_disk_util_percent"]


def test_equal_sides_have_no_verdict_and_so_no_suspects():
    a = {"publish_latency_p99_ms": jitter(10, seed=1), LOCAL: jitter(0.2, seed=2)}
    b = {"publish_latency_p99_ms": jitter(10, seed=3), LOCAL: jitter(0.4, seed=4)}
    v = p99_verdict(trial_rows(a, b))
    assert v.verdict == Judgement.UNCHANGED and v.suspects is None


def history_rows(values: list[tuple[float, float | None]], notes: str = "") -> list[dict]:
    rows = []
    for i, (p99, flush) in enumerate(values):
        rows.append({"run_key": f"r{i}", "run_ts": f"2026-11-{i + 1:02d}T00:00:00", "workload": WID,
                     "broker": "kafka", "broker_version": "4.1.1", "variant": "fsync-on", "environment": "local",
                     "driver": "kafka-latency", "client_library": "kafka-python", "target_rate_msg_s": 100.0,
                     "status": "ok", "publish_latency_p99_ms": p99, FLUSH: flush,
                     GC: 3.0 + 0.01 * (i % 3), "broker_metrics_notes": notes or None})
    return rows


def test_a_regression_against_history_names_the_metric_whose_series_moved_with_it():
    rows = history_rows([(10.0 + 0.05 * (i % 3), 3.0 + 0.02 * (i % 4)) for i in range(8)] + [(16.0, 9.5)])
    vs = verdicts_for_run([rows[-1]], rows)
    suspects.attach_history(vs, [rows[-1]], rows)
    v = next(v for v in vs if v.metric == "publish_latency_p99_ms")
    assert v.verdict == Judgement.REGRESSED
    s = v.suspects
    assert [f["column"] for f in s["suspects"]] == [FLUSH]
    assert s["suspects"][0]["direction"] == "up" and 3.0 < s["suspects"][0]["ratio"] < 3.3
    assert GC in {f["column"] for f in s["cleared"]}
    assert s["sentence"].startswith("publish_latency_p99_ms +") and "vs the median of 8 runs" in s["sentence"]
    assert "suspects: Kafka Log flush: p50 +2" in s["sentence"]
    # an unchanged metric carries none
    assert all(x.suspects is None for x in vs if x.verdict != Judgement.REGRESSED and x.verdict != "improved")


def test_a_quantile_of_too_few_events_on_one_side_is_not_compared_and_never_appeared():
    # side A flushed, a few times a trial: too few for its flush quantile to be of the phase (the aggregation's
    # note), which is no sign that flushes appeared on side B
    rows = trial_rows(*fsync_a_b(), notes_a=f"{FLUSH}: too few events during the phase (6; its quantile needs 100)")
    s = p99_verdict(rows).suspects
    assert [f["column"] for f in s["suspects"]] == [LOCAL], s
    assert FLUSH in s["not_compared"], s


def test_a_flush_that_appears_against_a_history_without_flushes_is_named():
    quiet = f"{FLUSH}: no events during the phase"
    rows = history_rows([(10.0 + 0.05 * (i % 3), None) for i in range(6)], notes=quiet) + \
        history_rows([(16.0, 3.1)])[:1]
    rows[-1].update(run_key="now", run_ts="2026-11-30T00:00:00")
    vs = verdicts_for_run([rows[-1]], rows)
    suspects.attach_history(vs, [rows[-1]], rows)
    v = next(v for v in vs if v.metric == "publish_latency_p99_ms")
    assert v.suspects["suspects"][0]["column"] == FLUSH
    assert v.suspects["suspects"][0]["direction"] == "appeared"


def fsync_a_b() -> tuple[dict, dict]:
    """Per-trial figures of side A (fsync off: no flush figure) and side B (fsync on)."""
    a = {"publish_latency_p99_ms": jitter(10, seed=1), LOCAL: jitter(0.2, seed=2), GC: jitter(3.0, seed=3),
         FLUSH: [None] * 4}
    b = {"publish_latency_p99_ms": jitter(14, seed=6), LOCAL: jitter(1.6, seed=7), GC: jitter(3.0, seed=8),
         FLUSH: jitter(3.2, seed=11)}
    return a, b


def fsync_rows() -> list[dict]:
    return trial_rows(*fsync_a_b(), notes_a=f"{FLUSH}: no events during the phase")


def test_the_sentence_leads_the_report_the_terminal_summary_regression_json_and_csv(tmp_path):
    import csv
    import json

    from brokerbench.regression import Rule
    from brokerbench.report.html import build_report, render_text_summary
    from brokerbench.report.verdict_table import write_verdicts

    run_dir = tmp_path / "run"
    (run_dir / "summary").mkdir(parents=True)
    rows = fsync_rows()
    columns = list(dict.fromkeys(c for r in rows for c in r))
    with open(run_dir / "summary" / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    write_verdicts(run_dir, ab_verdicts(rows), Rule(), "k")
    doc = json.loads((run_dir / "summary" / "regression.json").read_text())
    (v,) = [v for v in doc["verdicts"] if v["metric"] == "publish_latency_p99_ms"]
    sentence = v["suspects"]["sentence"]
    assert "suspects: Kafka Log flush: p50 appeared" in sentence
    with open(run_dir / "summary" / "regression.csv") as f:
        assert sentence in {r["suspects"] for r in csv.DictReader(f)}
    text = render_text_summary(run_dir)
    assert f"{WID} kafka fsync-off (A/B): {sentence}" in text
    html = build_report(run_dir).read_text()
    first = html[:html.index('id="key-figures"')]
    assert "<ul class='suspects' id='suspects'>" in first  # under the headline, before the key figures
    assert first.count("Kafka Log flush: p50 appeared") >= 3  # the headline, the percentile table, the A/B row
    # the percentile table: one row per broker, B/A [interval] per percentile, what moved beside it
    table = first[first.index('id="ab-percentiles"'):]
    table = table[:table.index("</table>")]
    assert "publish p99" in table and "\u00d71.4" in table and "suspects: Kafka Log flush: p50 appeared" in table


def test_notifications_and_bisect_steps_carry_the_sentence(tmp_path):
    from brokerbench import bisect
    from brokerbench.notify import regression_message
    from brokerbench.regression import Rule
    from brokerbench.report.verdict_table import write_verdicts

    run_dir = tmp_path / "runs" / "d" / "r"  # where the run's params say its files are
    verdicts = ab_verdicts(fsync_rows())
    write_verdicts(run_dir, verdicts, Rule(), "k")
    msg = regression_message({"dag": {"dag_id": "d"}, "run_id": "r", "params": {"results_root": str(tmp_path)}})
    sentence = next(v.suspects["sentence"] for v in verdicts if v.metric == "publish_latency_p99_ms")
    assert any(sentence in line for line in msg.lines), msg.lines
    assert any(sentence in line for line in msg.payload()["suspects"])
    step = bisect.step_from_verdicts({"verdicts": [v.to_dict() for v in verdicts]}, "kafka", "publish_latency_p99_ms")
    assert step.verdict == Judgement.REGRESSED and step.suspects == sentence


def test_compare_of_two_versions_names_what_moved_between_them():
    from brokerbench.results_view import compare_versions, comparison_text

    rows = []
    for i in range(8):
        old = i < 4
        rows += history_rows([(10.0 + 0.1 * i if old else 15.0 + 0.1 * i, 3.0 + 0.01 * i if old else 9.0 + 0.01 * i)])
        rows[-1].update(run_key=f"r{i}", run_ts=f"2026-11-{i + 1:02d}T00:00:00",
                        broker_version="3.9.1" if old else "4.1.1", dag_id="d", run_id=f"r{i}")
    text = comparison_text(compare_versions(rows, "kafka", ["3.9.1", "4.1.1"]))
    assert "3.9.1 -> 4.1.1: suspects: Kafka Log flush: p50 +" in text and "cleared: Kafka GC time" in text
