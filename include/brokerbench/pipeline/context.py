"""The run a task works on: :class:`RunContext` names the DAG run and its params, and finds the run's
files (the results directory, ``plan.json``, ``provenance/``) and its environment from them."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from brokerbench.spec import Plan, load_suite

# ANALYSIS_PARAMS: read by the analysis steps only; ENVIRONMENT_PARAMS: refine the plan's environment_settings
from brokerbench.spec.roots import default_results_root
from brokerbench.storage import is_s3, staging_root, synced
from brokerbench.util import run_key, write_json_atomic

log = logging.getLogger("brokerbench")

#: What a task does not download from an s3:// results store unless it reads it (RunContext.synced).
RUN_BULK = ("raw/", "hostmetrics/")

#: Repository root (include/brokerbench/pipeline/context.py -> parents[3]).
PROJECT_ROOT = Path(__file__).resolve().parents[3]


class NotSelected(Exception):
    """This task's broker x variant is not part of the run (params chose others)."""


@dataclass
class RunContext:
    dag_id: str
    run_id: str
    suite: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def results_root(self) -> str:
        return self.params.get("results_root") or default_results_root()

    @property
    def run_key(self) -> str:
        return run_key(self.dag_id, self.run_id)

    @property
    def local_results_root(self) -> Path:
        """The results root, or its local staging copy when it is s3:// (see brokerbench.storage)."""
        return staging_root(self.results_root)

    @property
    def run_dir(self) -> Path:
        return self.local_results_root / "runs" / self.run_key

    @contextmanager
    def synced(self, *, history: bool = False, raw: Callable[["RunContext"], list[str]] | None = None):
        """For s3:// results (nothing to do for a local root): before the block, pull what the task reads into
        the staging copy - the run's small files (plan, provenance, summary; not the bulky ``raw/`` and
        ``hostmetrics/``), then ``raw(ctx)`` (result directories relative to the run dir, e.g. those a
        retried phase checks) and, with ``history``, the history partitions of the run's brokers; after it
        (also when it fails), push what the task wrote. Yields the S3Sync, or None for a local root."""
        run = f"runs/{self.run_key}/"

        def more() -> list[str]:  # after the run's small files came: they name what else to pull
            extra = [run + r.strip("/") + "/" for r in (raw(self) if raw else [])]
            return extra + (self.history_prefixes() if history else [])

        with synced(self.results_root, [run], push=[run], exclude=tuple(run + b for b in RUN_BULK),
                    more=more) as sync:
            yield sync

    def history_prefixes(self) -> list[str]:
        """The history partitions (relative to the results root) this run's verdicts and report read: one
        per broker of the plan (history/broker=<b>/), not the whole history."""
        brokers = sorted({i.broker for i in self.plan().items}) if self.plan_path.exists() else []
        return [f"history/broker={b}/" for b in brokers]

    @property
    def results_uri(self) -> str:
        """The run's directory in the results store: ``s3://.../runs/<dag>/<run>`` or the local path."""
        if is_s3(self.results_root):
            return f"{self.results_root.rstrip('/')}/runs/{self.run_key}"
        return str(self.run_dir)

    @property
    def plan_path(self) -> Path:
        return self.run_dir / "plan.json"

    def plan(self):
        if not self.plan_path.exists():
            raise FileNotFoundError(f"{self.plan_path} is missing: the validate task has not run for this run")
        return Plan.from_json(self.plan_path.read_text())

    def environment_name(self) -> str:
        if self.plan_path.exists():
            return self.plan().environment
        if self.params.get("environment"):
            return self.params["environment"]
        return load_suite(self.suite).environment

    def environment(self):
        name = self.environment_name()
        if name == "local":
            # each environment loads its own machinery (the aws one boto3 and paramiko): only the one used
            from brokerbench.environments.local import LocalEnvironment

            return LocalEnvironment(self.run_key, self._env_settings())
        if name == "aws":
            from brokerbench.environments.aws.environment import AwsEnvironment

            return AwsEnvironment(self.run_key, self._env_settings(),
                                  plan=self.plan() if self.plan_path.exists() else None)
        if name == "external":
            from brokerbench.environments.external import ExternalEnvironment

            plan = self.plan() if self.plan_path.exists() else None
            brokers = sorted({i.broker for i in plan.items}) if plan is not None else []
            return ExternalEnvironment(self.run_key, self._env_settings(), brokers=brokers, plan=plan)
        raise NotImplementedError(f"environment {name!r} is not available in this version of brokerbench")

    def _env_settings(self) -> dict[str, Any]:
        if self.plan_path.exists():
            return dict(getattr(self.plan(), "environment_settings", {}) or {})
        return {}

    def write_json(self, relpath: str, data: Any) -> Path:
        return write_json_atomic(self.run_dir / relpath, data)

    def read_json(self, relpath: str) -> Any:
        return json.loads((self.run_dir / relpath).read_text())
