"""The plan: a suite plus run parameters, resolved into the list of tests to run.

The plan is the validated, self-contained description of one run. It travels
between Airflow tasks as JSON (``plan.to_json()`` / ``Plan.from_json()``) and
is written to ``plan.json`` next to the results.

Precedence for workload fields: workload file < suite ``overrides`` < params.
Precedence for the client library of each broker: the broker's default < the
driver's ``clientLibrary`` < the suite's ``clientLibraries`` < the param
``client_libraries`` (spec/clients.py); each item's driver carries the choice.

Trials: with ``trials`` = N > 1 (param, else the suite's field) every measured
item becomes N items, one per trial, whose workload id is ``<id>.trial<k>``
(``util.trial_id``). They follow each other in the plan, so the measure task
runs them back to back; they share the first trial's topics and subscriptions
(``PlanItem.base_workload_id``), which alone is warmed up and prepared. With
N = 1 the plan is what it was without trials (no suffix, same result paths
and history keys).

A/B in one run: with ``compare_with`` (what side B changes: broker versions,
variants, client libraries, driver files) every workload's trials are measured for side
A (the run's own params) and side B alternately, in ABBA order (A1 B1, B2 A2,
A3 B3, ...) so a drift of the host over the run weighs on both sides alike.
Side B's workload ids are ``<id>.B.trial<k>`` (``util.side_b_id``); each side's first
trial is warmed up (where the sides' deploy params are given - broker versions,
variants - after every redeploy, pipeline.benchmark). ``compare_with.variants`` pairs
side B's variants in order with side A's: side B's items carry their own variant
(results, keys and provenance under its name) and run in side A's deployment
(``PlanItem.group_variant``), so one task group alternates both. brokerbench.abtest
judges the sides (docs/analytics.md, "A/B in one run").
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, field_validator, model_validator

from ..util import side_b_id, split_side, split_trial, trial_id
from .clients import choose_client_library, client_library_problem, default_client_library, engine_kind_problem
from .common import SUPPORTED_BROKERS, is_path, path_safe
from .driver import DriverSpec, load_driver
from .errors import FieldValueError, MissingFileError, SpecError, from_validation_error
from .params import (
    AB_DEFAULT_TRIALS,
    AB_MIN_TRIALS,
    MAX_DURATION_MINUTES,
    MAX_INTERVAL_SECONDS,
    MAX_RATE_MSG_S,
    MAX_SWEEP_PUBLISH_P99_MS,
    MAX_TRIALS,
    trials_number,
)
from .roots import default_results_root
from .suite import Suite, load_driver_ref, load_variant_ref, load_workload_ref
from .variant import apply_variant
from .workload import Workload, load_workload, normalize_workload_keys

PLAN_FORMAT_VERSION = 1


def _comma_list(v: Any) -> Any:
    """Accept "kafka,pulsar" as well as ["kafka", "pulsar"] (handy in the Airflow UI)."""
    if isinstance(v, str):
        return [part.strip() for part in v.split(",") if part.strip()]
    return v


def _library_choice(v: dict[str, str] | None) -> dict[str, str] | None:
    for broker, library in (v or {}).items():
        problem = client_library_problem(broker, library)
        if problem:
            raise FieldValueError(broker, problem)
    return v


def _absolute_paths(v: list[str] | None) -> list[str] | None:
    for path in v or []:
        if not os.path.isabs(path):
            raise ValueError(f"{path!r} is not an absolute path (the run's tasks do not start in the "
                             f"directory it is relative to; brokerbench bench --workload/--driver make it absolute)")
    return v


class CompareWith(BaseModel):
    """Side B of an A/B run (param ``compare_with``): the params it changes from the run's own (side A).

    On the clients' side, the client library and the driver file (producer / consumer settings): both sides
    run on one deployed broker. ``broker_versions``: side B's trials run on another version of the broker;
    ``variants``: on another variant (its driver overrides, broker settings and JVM options), paired in order
    with side A's. With either, the broker is deployed afresh (and warmed up) at every change of side, equal
    values or not; an environment that deploys nothing (external clusters) refuses both. The same values as
    side A make an A/A run, the check that the method finds no difference where there is none.
    """

    model_config = ConfigDict(extra="forbid")

    client_libraries: dict[str, str] | None = None
    driver_files: list[str] | None = Field(default=None, min_length=1)
    broker_versions: dict[str, str] | None = None
    #: side B's variants (names, or absolute paths of variant files), paired in order with side A's
    variants: list[str] | None = Field(default=None, min_length=1)

    _lists = field_validator("driver_files", "variants", mode="before")(_comma_list)
    _libraries = field_validator("client_libraries")(_library_choice)
    _absolute = field_validator("driver_files")(_absolute_paths)

    @field_validator("variants")
    @classmethod
    def _variants(cls, v: list[str] | None) -> list[str] | None:
        for name in v or []:
            if is_path(name) and not os.path.isabs(name):
                raise ValueError(f"{name!r} is a relative path (the run's tasks do not start in the directory it "
                                 "is relative to): give a variant's name or an absolute path")
        if v is not None and len(set(v)) != len(v):
            twice = sorted({n for n in v if v.count(n) > 1})
            raise ValueError(f"names {', '.join(twice)} twice: each of side B's variants pairs with one of side "
                             "A's, and two of one name would file their results in one place")
        return v

    @model_validator(mode="before")
    @classmethod
    def _deploy_level(cls, v: Any) -> Any:
        if isinstance(v, dict) and "broker_implementations" in v:
            raise FieldValueError("broker_implementations", "side B of an A/B run may change client_libraries, "
                                  "driver_files, broker_versions and variants; compare broker implementations "
                                  "across runs (brokerbench compare)")
        return v

    @field_validator("broker_versions")
    @classmethod
    def _versions(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for broker, version in (v or {}).items():
            if broker not in SUPPORTED_BROKERS:
                raise FieldValueError(broker, f"unknown broker; supported brokers: {', '.join(SUPPORTED_BROKERS)}")
            if not isinstance(version, str) or not version.strip() or len(version) > 40:
                raise FieldValueError(broker, f"{version!r} is no version (1 to 40 characters, e.g. 4.0.0)")
        return v


class RunParams(BaseModel):
    """Run parameters (Airflow params); every one optional, None = the suite's choice."""

    model_config = ConfigDict(extra="forbid")

    brokers: list[str] | None = Field(default=None, min_length=1)
    workloads: list[str] | None = Field(default=None, min_length=1)
    variants: list[str] | None = Field(default=None, min_length=1)
    test_duration_minutes: float | None = Field(default=None, gt=0, le=MAX_DURATION_MINUTES, allow_inf_nan=False)
    warmup_duration_minutes: float | None = Field(default=None, ge=0, le=MAX_DURATION_MINUTES, allow_inf_nan=False)
    rate_override_msg_s: int | None = Field(default=None, ge=0, le=MAX_RATE_MSG_S)
    sweep_max_publish_p99_ms: float | None = Field(default=None, gt=0, le=MAX_SWEEP_PUBLISH_P99_MS,
                                                   allow_inf_nan=False)
    environment: Literal["local", "aws", "external"] | None = None
    results_root: str | None = None
    interval_seconds: int | None = Field(default=None, gt=0, le=MAX_INTERVAL_SECONDS)
    trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    #: OMB workload / driver YAML files anywhere on disk (absolute paths), see build_plan
    workload_files: list[str] | None = Field(default=None, min_length=1)
    driver_files: list[str] | None = Field(default=None, min_length=1)
    #: broker -> client library (spec/clients.py), over the suite's clientLibraries and the driver's clientLibrary
    client_libraries: dict[str, str] | None = None
    #: side B of an A/B run (see the module docstring)
    compare_with: CompareWith | None = None

    _lists = field_validator("brokers", "workloads", "variants", "workload_files", "driver_files",
                             mode="before")(_comma_list)

    _trials = field_validator("trials", mode="before")(trials_number)

    @field_validator("brokers")
    @classmethod
    def _brokers(cls, v: list[str] | None) -> list[str] | None:
        for broker in v or []:
            if broker not in SUPPORTED_BROKERS:
                raise ValueError(f"unknown broker {broker!r}; supported brokers: {', '.join(SUPPORTED_BROKERS)}")
        return v

    _libraries = field_validator("client_libraries")(_library_choice)
    _absolute = field_validator("workload_files", "driver_files")(_absolute_paths)

    @field_validator("results_root")
    @classmethod
    def _results_root(cls, v: str | None) -> str | None:
        if v is None:
            return v
        v = v.strip()
        if not v:
            raise ValueError("must be a directory path or s3://bucket/prefix")
        if v.startswith("s3://") and not v[len("s3://"):].split("/")[0]:
            raise ValueError(f"names no bucket (expected s3://bucket/prefix, got {v!r})")
        return v.rstrip("/") or "/"

    def workload_overrides(self) -> dict[str, Any]:
        """The params that replace workload fields, under their OMB names."""
        pairs = {"testDurationMinutes": self.test_duration_minutes,
                 "warmupDurationMinutes": self.warmup_duration_minutes,
                 "producerRate": self.rate_override_msg_s,
                 "sweepMaxPublishP99Ms": self.sweep_max_publish_p99_ms}
        return {k: v for k, v in pairs.items() if v is not None}


class PlanItem(BaseModel):
    """One test: a workload against one broker's driver under one variant."""

    workload: Workload
    driver: DriverSpec
    broker: Literal["kafka", "pulsar", "rabbitmq"]
    variant: str
    variant_description: str = ""
    durability_level: str | None = None
    driver_overrides: dict[str, Any] = Field(default_factory=dict)
    broker_settings: dict[str, Any] = Field(default_factory=dict)
    #: which trial (1..trials) this item is; None when the run has one trial
    trial: int | None = None
    #: trials of this workload in the run (per side in an A/B run)
    trials: int = 1
    #: the side of an A/B run ("A": the run's own params, "B": compare_with); None in other runs
    side: Literal["A", "B"] | None = None
    #: flags for the broker's JVM, from the variant's ``jvmOptions`` ([]: the environment's defaults)
    jvm_options: list[str] = Field(default_factory=list)
    #: the variant of the deployment (task group) the item runs in: its own, except for side B of an A/B run on
    #: another variant (compare_with.variants), which alternates with side A in side A's
    group_variant: str = ""

    @model_validator(mode="after")
    def _own_group(self) -> "PlanItem":
        if not self.group_variant:
            self.group_variant = self.variant
        return self

    @property
    def client_library(self) -> str:
        """The client library the workers use for this item (chosen by build_plan, in the driver)."""
        return self.driver.client_library or default_client_library(self.broker)

    @property
    def base_workload_id(self) -> str:
        """The workload's own id (without a trial suffix): its topics, subscriptions and track."""
        if self.trial is None:
            return self.workload.id
        return split_side(split_trial(self.workload.id)[0])[0] if self.side == "B" else split_trial(self.workload.id)[0]

    @property
    def warms_up(self) -> bool:
        """Only the first trial (of each side) is warmed up; it prepares the topics the later trials reuse."""
        return self.trial is None or self.trial == 1

    @computed_field  # type: ignore[prop-decorator]
    @property
    def key(self) -> str:
        """``<workload id>/<driver name>/<variant>``, each part path-safe: where results go."""
        return "/".join(path_safe(p) for p in (self.workload.id, self.driver.name, self.variant))


class Plan(BaseModel):
    """What one run measures. Items are ordered by broker, then variant, then
    workload, so each broker is deployed once per variant."""

    format_version: int = PLAN_FORMAT_VERSION
    suite: str
    description: str = ""
    environment: Literal["local", "aws", "external"]
    environment_settings: dict[str, Any] = Field(default_factory=dict)
    results_root: str
    interval_seconds: int = Field(gt=0)
    #: measured phases per workload (docs/analytics.md, "Trials"); per side in an A/B run
    trials: int = 1
    #: what side B of an A/B run changes (RunParams.compare_with); None when the run is no A/B run
    compare_with: dict[str, Any] | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    items: list[PlanItem]

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Plan":
        return cls.model_validate_json(text)

    def redeploys_sides(self, broker: str) -> bool:
        """Whether this A/B run deploys ``broker`` afresh at every change of side: the sides' deploy params are
        given (side B's ``broker_versions`` for ``broker``, or side B's ``variants``, the only way a side changes
        broker settings or JVM options), equal to side A's or not - an A/A check takes the path of the A/B run
        it vouches for."""
        side_b = self.compare_with or {}
        return broker in (side_b.get("broker_versions") or {}) or bool(side_b.get("variants"))

    def side_variant(self, broker: str, group_variant: str, side: str | None) -> str:
        """The variant ``side`` runs in the deployment of ``broker`` x ``group_variant`` (side A's): side B's own
        with compare_with.variants, else ``group_variant``."""
        for item in self.items:
            if item.broker == broker and item.group_variant == group_variant and (side is None or item.side == side):
                return item.variant
        return group_variant

    def side_a_variants(self) -> dict[tuple[str, str], str]:
        """(broker, side B's variant) -> the side A variant it is compared with, for every side B variant that
        differs from its side A's (compare_with.variants); {} in other runs. What pairs a side B trial row with side
        A's rows, whose variants differ."""
        return {(i.broker, i.variant): i.group_variant for i in self.items
                if i.side == "B" and i.variant != i.group_variant}

    def side_environment_settings(self, side: str | None) -> dict[str, Any]:
        """The environment settings a side deploys with: the plan's, with side B's broker versions over them."""
        settings = copy.deepcopy(self.environment_settings)
        versions = (self.compare_with or {}).get("broker_versions") or {}
        if side == "B" and versions:
            settings["broker_versions"] = {**(settings.get("broker_versions") or {}), **versions}
        return settings

    def deployments(self) -> list[tuple[str, str]]:
        """(broker, variant) pairs in run order: one broker deployment each."""
        seen: dict[tuple[str, str], None] = {}
        for item in self.items:
            seen.setdefault((item.broker, item.group_variant), None)
        return list(seen)

    def items_for(self, broker: str, variant: str) -> list[PlanItem]:
        """The items of the deployment of ``broker`` x ``variant`` (side A's variant: side B's items of an A/B run
        on another variant included)."""
        return [i for i in self.items if i.broker == broker and i.group_variant == variant]


def parse_params(params: dict[str, Any] | None) -> RunParams:
    """Validate run params; a problem is a SpecError with file None and field = the param.

    None and "" (an empty Airflow form field) both mean "the suite's choice".
    """
    given = {k: v for k, v in (params or {}).items() if v is not None and v != ""}
    try:
        return RunParams.model_validate(given)
    except ValidationError as e:
        raise from_validation_error(e, None) from None


def build_plan(suite: Suite, params: dict[str, Any] | None = None) -> Plan:
    """Resolve ``suite`` and run ``params`` into a validated Plan (see the module docstring)."""
    p = parse_params(params)
    file: Path | None = suite.source

    brokers = p.brokers or list(suite.brokers)
    for broker in brokers:
        if broker not in suite.brokers:
            raise SpecError(f"broker {broker!r} is not in suite {suite.name!r} "
                            f"(it has: {', '.join(suite.brokers)})", field="brokers")
    # workload files replace the suite's workloads (with the workloads param, they come after them)
    workload_names = p.workloads or ([] if p.workload_files else suite.workloads)
    variant_names = p.variants or suite.variants
    # Params name specs by name: a missing one is a param error (file None).
    workloads = [load_workload_ref(n, None, "workloads") for n in dict.fromkeys(workload_names)]
    workloads += workload_files(p.workload_files or [], taken={w.id for w in workloads})
    variants = [load_variant_ref(n, None, "variants") for n in dict.fromkeys(variant_names)]
    drivers, driver_of = _drivers(suite, p, brokers, file)
    sides = {"A": drivers}
    if p.compare_with is not None:
        b = p.compare_with
        side_b = p.model_copy(update={"client_libraries": {**(p.client_libraries or {}), **(b.client_libraries or {})},
                                      "driver_files": b.driver_files or p.driver_files})
        try:
            sides["B"] = _drivers(suite, side_b, brokers, file)[0]
        except SpecError as e:
            raise SpecError(e.message, file=e.file, field=f"compare_with.{e.field}" if e.field else "compare_with") \
                from None
        for broker in b.broker_versions or {}:
            if broker not in brokers:
                raise SpecError(f"broker {broker!r} is not benchmarked by this run (it runs: {', '.join(brokers)})",
                                field=f"compare_with.broker_versions.{broker}")
    # side B's variant of each of side A's, in order (side A's own without compare_with.variants)
    variants_b = variants
    if p.compare_with is not None and p.compare_with.variants is not None:
        names_b = p.compare_with.variants
        variants_b = [load_variant_ref(n, None, "compare_with.variants") for n in names_b]
        if len(names_b) != len(variants):
            raise SpecError(f"pairs side B's variants in order with side A's ({', '.join(v.name for v in variants)}"
                            f"): it names {len(names_b)}, side A runs {len(variants)}", field="compare_with.variants")
        if len({v.name for v in variants_b}) != len(variants_b):
            raise SpecError(f"names two variants called {_twice([v.name for v in variants_b])} (a variant's name is "
                            "its file's name): their results would be filed in one place", field="compare_with.variants")

    suite_overrides = normalize_workload_keys(suite.overrides, file=file, field_prefix="overrides")
    resolved = []
    for w in workloads:
        w = w.with_overrides(suite_overrides, file=file, field_prefix="overrides")
        try:
            w = w.with_overrides(p.workload_overrides())
        except SpecError as e:
            raise SpecError(f"{e.message} (workload {w.id!r})", field=_PARAM_OF.get(e.field or "", e.field)) from None
        resolved.append(w)

    trials = _trials(p, suite)
    items = []
    for broker in drivers:
        for variant, variant_b in zip(variants, variants_b):
            of_side = {"A": variant, "B": variant_b}
            section = variant.for_broker(broker)
            applied = {side: apply_variant(ds[broker], of_side[side]) for side, ds in sides.items()}
            for workload in resolved:
                for side, side_driver in applied.items():
                    if side_driver.exchange_type == "FANOUT" and workload.partitions_per_topic != 1:
                        raise SpecError(f"driver {driver_of[broker]!r} has exchangeType FANOUT (variant "
                                        f"{of_side[side].name!r}), which sends every message to every queue, so it "
                                        f"needs partitionsPerTopic 1; workload {workload.id!r} has "
                                        f"{workload.partitions_per_topic} (use DIRECT or TOPIC)", file=file,
                                        field=f"brokers.{broker}" if side == "A" else "compare_with.variants")
                    problem = engine_kind_problem(str(side_driver.client_library), workload.kind,
                                                  workload.consumer_backlog_size_gb)
                    if problem:
                        raise SpecError(f"workload {workload.id!r}: {problem}", file=file,
                                        field=f"compare_with.client_libraries.{broker}" if side == "B"
                                        else f"client_libraries.{broker}")
                item = PlanItem(
                    workload=workload, driver=applied["A"], broker=broker, variant=variant.name,  # type: ignore[arg-type]
                    variant_description=variant.description, durability_level=variant.durability_level,
                    driver_overrides=section.driver_overrides, broker_settings=section.broker_settings,
                    jvm_options=section.jvm_options, group_variant=variant.name)
                # side B: its own variant's fields, in side A's deployment group
                section_b = variant_b.for_broker(broker)
                own = {"A": {}, "B": {"variant": variant_b.name, "variant_description": variant_b.description,
                                      "durability_level": variant_b.durability_level,
                                      "driver_overrides": section_b.driver_overrides,
                                      "broker_settings": section_b.broker_settings,
                                      "jvm_options": section_b.jvm_options}}
                if trials == 1:
                    items.append(item)
                    continue
                for k in range(1, trials + 1):
                    # ABBA: side A first in odd trials, side B first in even ones
                    for side in (sorted(sides) if k % 2 else sorted(sides, reverse=True)):
                        wid = workload.id if len(sides) == 1 or side == "A" else side_b_id(workload.id)
                        items.append(item.model_copy(update={
                            "workload": workload.model_copy(update={"id": trial_id(wid, k)}),
                            "driver": applied[side], "trial": k, "trials": trials,
                            "side": side if len(sides) > 1 else None, **own[side]}))

    return Plan(
        suite=suite.name,
        description=suite.description,
        environment=p.environment or suite.environment,
        environment_settings=suite.environment_settings,
        results_root=p.results_root or default_results_root(),
        interval_seconds=p.interval_seconds or suite.interval_seconds,
        trials=trials,
        compare_with=p.compare_with.model_dump(exclude_none=True) if p.compare_with is not None else None,
        params=p.model_dump(exclude_none=True),
        items=items,
    )


def _drivers(suite: Suite, p: RunParams, brokers: list[str], file: Path | None) -> tuple[dict, dict[str, str]]:
    """Each broker's driver for params ``p`` (the suite's, or a driver file's, with the client library chosen), and
    how errors name each one (its file or reference)."""
    drivers = {b: load_driver_ref(suite.brokers[b], file, f"brokers.{b}") for b in dict.fromkeys(brokers)}
    driver_of = {b: suite.brokers[b] for b in drivers}  # how errors name each broker's driver
    for path, driver in driver_files(p.driver_files or [], brokers):
        drivers[str(driver.broker)], driver_of[str(driver.broker)] = driver, path
    for broker in p.client_libraries or {}:
        if broker not in suite.brokers:
            raise SpecError(f"broker {broker!r} is not in suite {suite.name!r} "
                            f"(it has: {', '.join(suite.brokers)})", field=f"client_libraries.{broker}")
    # the client library: param > suite > driver file > the broker's default (spec/clients.py)
    for broker, driver in drivers.items():
        library = choose_client_library(broker, p.client_libraries, suite.client_libraries, driver.client_library)
        drivers[broker] = driver.model_copy(update={"client_library": library})
    named: dict[str, str] = {}
    for broker, driver in drivers.items():  # a driver's name files its results: raw/<workload>/<driver>/...
        if driver.name in named:
            raise SpecError(f"the drivers of {named[driver.name]} ({driver_of[named[driver.name]]}) and {broker} "
                            f"({driver_of[broker]}) are both named {driver.name!r}: their results would be filed "
                            f"under one name; rename one", field="driver_files" if p.driver_files else "brokers")
        named[driver.name] = broker
    return drivers, driver_of


def _twice(names: list[str]) -> str:
    return ", ".join(sorted({repr(n) for n in names if names.count(n) > 1}))


def _trials(p: RunParams, suite: Suite) -> int:
    """Trials per workload (per side in an A/B run: at least AB_MIN_TRIALS, default AB_DEFAULT_TRIALS)."""
    if p.compare_with is None:
        return p.trials or suite.trials
    if p.trials is not None and p.trials < AB_MIN_TRIALS:
        raise SpecError(f"an A/B run (compare_with) needs at least {AB_MIN_TRIALS} trials per side for a 95 % "
                        f"interval of an exact rank test (got {p.trials}); the default is {AB_DEFAULT_TRIALS}",
                        field="trials")
    return p.trials or max(suite.trials, AB_DEFAULT_TRIALS)


_PARAM_OF = {"testDurationMinutes": "test_duration_minutes",
             "warmupDurationMinutes": "warmup_duration_minutes",
             "producerRate": "rate_override_msg_s",
             "sweepMaxPublishP99Ms": "sweep_max_publish_p99_ms"}


# -- workload and driver files from anywhere on disk --------------------------------------


def _load_file(kind: str, loader, path: str, field: str):
    """A workload or driver file named by a param; any problem is a SpecError naming the path and the param."""
    try:
        return loader(Path(path))
    except MissingFileError:
        raise SpecError(f"{kind} file {path} not found (or not a file)", field=field) from None
    except SpecError as e:
        raise SpecError(f"{kind} file {path} is invalid: {e}", field=field) from None


def workload_files(paths: list[str], taken: set[str]) -> list[Workload]:
    """The workloads of the ``workload_files`` param, validated, each once.

    A workload's id (its results path, file names and history track) is the file's stem;
    when that id is already taken (by a named workload or another file of the same name in
    another directory) it gets the first 8 hex digits of the SHA-256 of the file's absolute
    path: ``<stem>-<hash>``, the same for the same path in every run."""
    out = []
    taken = set(taken)
    for path in dict.fromkeys(str(Path(p).resolve()) for p in paths):
        workload = _load_file("workload", load_workload, path, "workload_files")
        if workload.id in taken:
            digest = hashlib.sha256(path.encode()).hexdigest()[:8]
            workload = workload.model_copy(update={"id": f"{workload.id}-{digest}"})
        taken.add(workload.id)
        out.append(workload)
    return out


def driver_files(paths: list[str], brokers: list[str]) -> list[tuple[str, DriverSpec]]:
    """(path, driver) of the ``driver_files`` param, validated: each replaces the suite's driver of
    its broker (OMB's ``driverClass`` says which), so its broker must be one the run benchmarks and
    two files may not drive the same broker."""
    out: list[tuple[str, DriverSpec]] = []
    by_broker: dict[str, str] = {}
    for path in dict.fromkeys(str(Path(p).resolve()) for p in paths):
        driver = _load_file("driver", load_driver, path, "driver_files")
        broker = str(driver.broker)
        if broker not in brokers:
            raise SpecError(f"driver file {path} drives {broker}, which this run does not benchmark "
                            f"(brokers: {', '.join(brokers)})", field="driver_files")
        if broker in by_broker:
            raise SpecError(f"driver files {by_broker[broker]} and {path} both drive {broker}: "
                            f"a run has one driver per broker", field="driver_files")
        by_broker[broker] = path
        out.append((path, driver))
    return out


def conf_with_files(conf: dict[str, Any], workloads: list[str] | tuple[str, ...] = (),
                    drivers: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """``conf`` (a run's params) with workload and driver files added, for the command line
    (``brokerbench bench --workload PATH --driver PATH``).

    Paths are made absolute against the current directory and each file is loaded and
    validated now (a SpecError names the path and the param), so a typo fails before Airflow
    starts; the run's plan validates them again and carries their content (plan.json)."""
    out = dict(conf)
    for key, kind, loader, paths in (("workload_files", "workload", load_workload, workloads),
                                     ("driver_files", "driver", load_driver, drivers)):
        if not paths:
            continue
        absolute = [str(Path(p).expanduser().resolve()) for p in paths]
        for path in absolute:
            _load_file(kind, loader, path, key)
        given = out.get(key) or []
        given = _comma_list(given) if isinstance(given, str) else list(given)
        out[key] = list(dict.fromkeys([*given, *absolute]))
    return out

