"""brokerbench.worker.job: the job's defaults live in the model, a job file holds what the pipeline set, and a
bad job names every bad field before the worker connects anywhere."""

import json

import pytest

from brokerbench.worker.job import DELAY_P99_BOUND_MS, LEAD_IN_MAX_S, Job, JobError, check_job, job_json, read_job
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


def test_a_measured_phase_of_a_constant_rate_starts_with_a_lead_in_of_a_tenth_of_it():
    def lead_in(phase: str, rate: float, duration_s: float, **fields) -> float:
        return Job.build(workload={"messageSize": 100, "producerRate": rate}, worker="w", phase=phase,
                         broker="kafka", driver={}, endpoint={}, topics=["t"], duration_s=duration_s,
                         **fields).lead_in_s

    assert lead_in("measure", 5000, 120) == 12.0  # the nightly suite's 2-minute trial
    assert lead_in("measure", 5000, 900) == LEAD_IN_MAX_S == 15.0
    assert lead_in("measure", 5000, 4) == 0.4
    assert lead_in("warmup", 5000, 60) == 0.0  # a warm-up records nothing that is judged
    assert lead_in("measure", 0, 120) == 0.0  # a sweep: each step has its own settling
    assert lead_in("measure", 5000, 120, lead_in_s=0) == 0.0  # given: kept
    assert Job(**MINIMAL).lead_in_s == 0.0  # a job file without it (an older pipeline's): none


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


def test_the_parts_are_typed_and_their_file_keeps_omb_keys_as_given(tmp_path):
    workload = {"name": "w", "messageSize": 1024, "partitionsPerTopic": 3, "producerRate": 500,
                "useRandomizedPayloads": True, "testDurationMinutes": 1}  # a key the worker does not read: kept
    driver = {"name": "pulsar", "client": {"ioThreads": 2, "persistence": {"ensembleSize": 3}},
              "producer": {"batchingEnabled": False}, "replicationFactor": 3}
    endpoint = {"broker": "pulsar", "implementation": "apache-pulsar", "version": "4.0.7",
                "service_url": "pulsar://h:6650", "durability": {"honoured": True}}
    job = Job.build(workload=workload, worker="h-0", phase="measure", broker="pulsar", driver=driver,
                    endpoint=endpoint, topics=["t"], duration_s=60)
    assert (job.workload.message_size, job.workload.partitions_per_topic, job.workload.randomized_payload_pool_size) \
        == (1024, 3, 1000)
    assert (job.driver.client.io_threads, job.driver.client.persistence.ensemble_size,
            job.driver.producer.batching_enabled, job.driver.producer.pending_queue_size) == (2, 3, False, 10000)
    assert (job.endpoint.service_url, job.endpoint.where()) == ("pulsar://h:6650", "pulsar://h:6650")
    # built from the workload: its rate, producers and consumers, its kind
    assert (job.rate_msg_s, job.producers_per_topic, job.consumers_per_subscription, job.kind) == \
        (500, 1, 1, "latency")
    # one serialiser to the file, one parser back: the file holds the parts as given (the JVM engine reads it)
    path = tmp_path / "job.json"
    path.write_text(job.to_json())
    data = json.loads(path.read_text())
    assert data["workload"] == workload and data["driver"] == driver and data["endpoint"] == endpoint
    assert read_job(path) == job
    assert json.loads(job_json(data)) == data


def test_a_job_file_that_is_no_job_is_refused_with_its_reason(tmp_path):
    path = tmp_path / "job.json"
    path.write_text("{not json")
    with pytest.raises(JobError, match="not JSON"):
        read_job(path)
    path.write_text(json.dumps({**MINIMAL, "driver": {"replicationFactor": "three"}}))
    with pytest.raises(JobError, match="driver.replicationFactor"):
        read_job(path)
