"""brokerbench.worker.job: the job's defaults live in the model, a job file holds what the pipeline set, and a
bad job names every bad field before the worker connects anywhere."""

import pytest

from brokerbench.worker.job import DELAY_P99_BOUND_MS, Job, JobError, check_job
from brokerbench.worker.runner import as_job

MINIMAL = {"worker": "localhost-0", "phase": "measure", "broker": "rabbitmq", "workload": {"messageSize": 100},
           "driver": {"name": "rabbitmq"}, "endpoint": {"broker": "rabbitmq"}, "topics": ["t0"], "duration_s": 30}


def test_the_model_holds_every_default_the_runner_reads():
    job = Job(**MINIMAL)
    assert (job.interval_s, job.rate_msg_s, job.producers_per_topic, job.consumers_per_subscription) == \
        (10.0, 0.0, 0, 0)
    assert (job.probe_timeout_s, job.drain_timeout_s, job.consumer_idle_s) == (60.0, 10.0, 5.0)
    assert (job.sweep_max_delay_p99_ms, job.sweep_stop_after_unstable) == (DELAY_P99_BOUND_MS, 1)
    assert job.subscriptions == [] and job.switch_interval_s == 0.001 and job.consumers_in_subscription is None


def test_a_job_file_keeps_only_what_was_set():
    job = Job(**MINIMAL, interval_s=5)
    assert job.to_dict() == {**MINIMAL, "interval_s": 5}
    assert as_job(job.to_dict()) == job
    assert as_job(job) is job


def test_a_bad_job_names_each_field():
    with pytest.raises(JobError) as e:
        check_job({**MINIMAL, "duration_s": "long", "topics": "t0"})
    assert "duration_s" in str(e.value) and "topics" in str(e.value) and "2 problem(s)" in str(e.value)
    with pytest.raises(JobError):
        as_job({**MINIMAL, "interval_s": None})
