"""Workload kinds, scale-out split, and histograms that merge like the raw samples."""

import json
import random
import time

import pytest

from brokerbench.histogram import LogHistogram
from brokerbench.worker.job import Job
from brokerbench.worker.recorder import IntervalWriter, Recorder
from brokerbench.worker.runner import workload_kind
from brokerbench.worker.scaleout import split_job

BASE = {"topics": 1, "partitionsPerTopic": 1, "messageSize": 100, "subscriptionsPerTopic": 1,
        "consumerPerSubscription": 1, "producersPerTopic": 1, "producerRate": 1000}


@pytest.mark.parametrize("change, kind", [
    ({}, "latency"),
    ({"producerRate": 0}, "throughput-sweep"),
    ({"subscriptionsPerTopic": 0}, "producer-only"),
    ({"producersPerTopic": 0}, "consumer-only"),
    ({"consumerBacklogSizeGB": 1}, "backlog"),
])
def test_kind_derived_from_omb_fields(change, kind):
    assert workload_kind({**BASE, **change}) == kind


def test_kind_from_job_wins_and_is_checked():
    assert workload_kind(BASE, "mixed") == "mixed"
    with pytest.raises(ValueError, match="not one of"):
        workload_kind(BASE, "fastest")


def _job(**fields):
    return Job.build(workload=BASE, worker="w", phase="measure", broker="kafka", driver={}, endpoint={},
                     topics=["t"], duration_s=10, **fields)


def test_split_keeps_rate_and_consumers_and_shares_one_start():
    job = _job(producers_per_topic=1, consumers_per_subscription=1, rate_msg_s=50_000)
    jobs = split_job(job, 2)
    assert [j.worker for j in jobs] == ["localhost-0", "localhost-1"]
    assert sum(j.rate_msg_s for j in jobs) == 50_000
    assert [j.consumers_per_subscription for j in jobs] == [1, 0]
    assert len({j.start_at_ns for j in jobs}) == 1 and jobs[0].start_at_ns > time.time_ns()
    job = _job(producers_per_topic=4, consumers_per_subscription=3, rate_msg_s=40_000)
    jobs = split_job(job, 2, hosts=["a", "b"])
    assert [j.worker for j in jobs] == ["a-0", "a-1", "b-0", "b-1"]
    assert sum(j.producers_per_topic for j in jobs) == 4 and sum(j.rate_msg_s for j in jobs) == 40_000
    assert [j.consumer_index_offset for j in jobs] == [0, 1, 2, 3]
    assert all(j.consumers_in_subscription == 3 for j in jobs)
    assert split_job(job, 1)[0].rate_msg_s == 40_000
    # what a process's file says it runs: the fields the split set, as set
    assert {"producers_per_topic", "consumer_index_offset", "start_at_ns"} <= set(jobs[0].to_dict())


def test_a_sweep_splits_its_rates_by_the_processes_producers():
    jobs = split_job(_job(producers_per_topic=2, sweep_rates_msg_s=[1000, 2000]), 2)
    assert [j.sweep_rates_msg_s for j in jobs] == [[500, 1000], [500, 1000]]


def test_interval_histograms_merge_to_the_histogram_of_all_samples(tmp_path):
    rng = random.Random(7)
    rec = Recorder()
    out = tmp_path / "w.jsonl"
    w = IntervalWriter(str(out), {"interval_s": 3600, "phase": "measure", "worker": "t-0"}, rec,
                       subscriptions=1, progress=lambda s: None)
    w.start(time.time_ns(), 1)
    raw = []
    for _ in range(5):  # five intervals of log-normal latencies, from 1 µs to minutes
        vals = [int(rng.lognormvariate(14, 2.5)) for _ in range(20_000)]
        raw += vals
        rec.s.e2e_ns += vals
        w.close_interval()
    w.finish()
    recs = [json.loads(line) for line in open(out)]
    m = LogHistogram()
    for r in recs:
        if r["record"] == "interval":
            m.merge(LogHistogram.from_dict(r["e2e_latency_us"]))
    whole = LogHistogram.from_values([(v + 500) // 1000 for v in raw])
    assert m.to_dict() == whole.to_dict()
    for p in (50, 90, 99, 99.9, 99.99, 100):
        assert m.percentile(p) == whole.percentile(p)
