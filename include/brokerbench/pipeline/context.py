"""The run a task works on: :class:`RunContext` names the DAG run and its params, and finds the run's
files (the results directory, ``plan.json``, ``provenance/``) and its environment from them."""

from __future__ import annotations

import copy
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from brokerbench.environments.base import Environment
from brokerbench.environments.registry import EnvironmentKind, environment_kind
from brokerbench.spec import Plan, load_suite
from brokerbench.spec.roots import default_results_root
from brokerbench.storage import S3Sync, is_s3, staging_root, synced
from brokerbench.util import run_key, write_json_atomic

log = logging.getLogger("brokerbench")

#: What a task does not download from an s3:// results store unless it reads it (RunContext.synced).
RUN_BULK = ("raw/", "hostmetrics/", "brokermetrics/")

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
    #: plan.json, parsed once (plan())
    _plan: Plan | None = field(default=None, init=False, repr=False, compare=False)
    #: the s3:// store's S3Sync while a synced() block runs (None for a local root, and outside the block)
    sync: S3Sync | None = field(default=None, init=False, repr=False, compare=False)

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
        (also when it fails), push what the task wrote. Yields the S3Sync, or None for a local root; the
        block's steps find it as ``sync``."""
        run = f"runs/{self.run_key}/"

        def more() -> list[str]:  # after the run's small files came: they name what else to pull
            extra = [run + r.strip("/") + "/" for r in (raw(self) if raw else [])]
            return extra + (self.history_prefixes() if history else [])

        with synced(self.results_root, [run], push=[run], exclude=tuple(run + b for b in RUN_BULK),
                    more=more) as sync:
            outer, self.sync = self.sync, sync
            try:
                yield sync
            finally:
                self.sync = outer

    def history_prefixes(self) -> list[str]:
        """The history partitions (relative to the results root) this run's verdicts and report read: one
        per broker of the plan (history/broker=<b>/), not the whole history."""
        plan = self.plan_or_none()
        brokers = sorted({i.broker for i in plan.items}) if plan is not None else []
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

    def plan(self, *, reread: bool = False) -> Plan:
        """The run's plan, parsed from ``plan.json`` once per context (``reread``: parsed again from the file).
        FileNotFoundError before the validate task wrote it."""
        if self._plan is None or reread:
            if not self.plan_path.exists():
                raise FileNotFoundError(f"{self.plan_path} is missing: the validate task has not run for this run")
            self._plan = Plan.from_json(self.plan_path.read_text())
        return self._plan

    def write_plan(self, plan: Plan) -> None:
        """Write the run's ``plan.json`` (the validate task) and keep ``plan`` as this context's plan."""
        self.plan_path.write_text(plan.to_json())
        self._plan = plan

    def plan_or_none(self) -> Plan | None:
        """The plan once the validate task wrote it, else None."""
        return self.plan() if self._plan is not None or self.plan_path.exists() else None

    def environment_name(self) -> str:
        """The plan's environment; before the validate task ran, the params' or the suite's."""
        plan = self.plan_or_none()
        if plan is not None:
            return plan.environment
        if self.params.get("environment"):
            return self.params["environment"]
        return load_suite(self.suite).environment

    def environment_kind(self) -> type[EnvironmentKind]:
        """The run's environment in the registry (:mod:`brokerbench.environments.registry`)."""
        return environment_kind(self.environment_name())

    def environment(self, side: str | None = None) -> Environment:
        """The run's environment object; it loads its own machinery (the aws one boto3 and paramiko). ``side``
        "B": with side B's broker versions of an A/B run (Plan.side_environment_settings)."""
        plan = self.plan_or_none()
        settings = plan.side_environment_settings(side) if side == "B" and plan is not None else \
            self.environment_settings()
        return self.environment_kind().create(self.run_key, settings, plan)

    def environment_settings(self) -> dict[str, Any]:
        """The plan's ``environment_settings`` (suite environmentSettings refined by params); {} before the
        validate task ran. A copy: the environment may change it, never the plan."""
        plan = self.plan_or_none()
        return copy.deepcopy(plan.environment_settings) if plan is not None else {}

    def write_json(self, relpath: str, data: Any) -> Path:
        return write_json_atomic(self.run_dir / relpath, data)

    def read_json(self, relpath: str) -> Any:
        return json.loads((self.run_dir / relpath).read_text())
