"""A stand-in environment for the pipeline's A/B steps: it deploys nothing, runs no worker, and records each deploy,
undeploy and phase in one log shared by the objects of both sides (``ctx.environment(side)``)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path


class RecordingEnv:
    """Records ``("deploy", side, ...)``, ``("undeploy", broker)`` and one entry per worker job; subclasses say what
    a deploy records (:meth:`deploy_entry`), what it returns (:meth:`endpoint`) and what a job records
    (:meth:`job_entry`)."""

    def __init__(self, log, side):
        self.log, self.side = log, side

    def deploy_entry(self, variant, broker_settings, jvm_options) -> tuple:
        return ("deploy", self.side or "A")

    def endpoint(self, broker, variant, driver_overrides, jvm_options):
        from brokerbench.environments.base import BrokerEndpoint

        return BrokerEndpoint(broker, "apache-kafka", "4.1.1", bootstrap_servers="127.0.0.1:9092")

    def job_entry(self, job) -> tuple:
        return (job["phase"], job["workload_id"])

    def stop_workers(self):
        return []

    def health(self, broker):
        pass

    def before_phase(self, phase, label):
        return None

    def start_broker_metrics(self, label):
        return None

    def deploy(self, broker, broker_settings, variant, driver_overrides, *, jvm_options=None):
        self.log.append(self.deploy_entry(variant, broker_settings, jvm_options))
        return self.endpoint(broker, variant, driver_overrides, jvm_options)

    def undeploy(self, broker):
        self.log.append(("undeploy", broker))

    def record_created(self, broker, names):
        pass

    def client_secrets(self):
        return contextlib.nullcontext()

    def run_workers(self, jobs, outs, timeout_s):
        for job, out in zip(jobs, outs):
            self.log.append(self.job_entry(job))
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps({"record": "end", "status": "ok"}) + "\n")
        return [{"worker": j["worker"], "returncode": 0} for j in jobs]
