"""Suites: which workloads, brokers and variants one DAG runs, and when.

Each suite file becomes the DAG ``brokerbench_<name>``. Loading a suite loads
and validates every workload, driver and variant it names, so a bad reference
fails when the suite is loaded (at DAG parse time), not mid-run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .bounds import MAX_INTERVAL_SECONDS, MAX_TRIALS, Description, Name, Tag, at_most
from .clients import client_library_problem
from .common import SUPPORTED_BROKERS, read_yaml, resolve
from .driver import DriverSpec, load_driver
from .errors import FieldValueError, MissingFileError, SpecError, display_path, from_validation_error
from .params import trials_number
from .variant import Variant, apply_variant, load_variant
from .workload import Workload, load_workload, normalize_workload_keys

_DAG_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")
SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly",
                    "@quarterly", "@yearly", "@annually")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?#LW-]+$")


class Suite(BaseModel):
    """A suite file. Keys are camelCase in YAML (``intervalSeconds``), snake_case here."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", allow_inf_nan=False)

    name: Name
    description: Description = ""
    schedule: str | None = None
    tags: list[Tag] = Field(default_factory=list)
    environment: Literal["local", "aws", "external"] = "local"
    workloads: list[str] = Field(min_length=1)
    brokers: dict[str, str] = Field(min_length=1)
    #: broker -> client library (spec/clients.py): over the driver's clientLibrary, under the param client_libraries
    client_libraries: dict[str, str] = Field(default_factory=dict, alias="clientLibraries")
    variants: list[str] = Field(min_length=1)
    overrides: dict[str, Any] = Field(default_factory=dict)
    interval_seconds: Annotated[int, at_most(MAX_INTERVAL_SECONDS)] = Field(default=10, alias="intervalSeconds", gt=0)
    #: measured phases per workload in a run (param ``trials`` overrides); docs/analytics.md, "Trials"
    trials: Annotated[int, at_most(MAX_TRIALS)] = Field(default=1, ge=1)
    environment_settings: dict[str, Any] = Field(default_factory=dict, alias="environmentSettings")

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _DAG_SAFE.match(v):
            raise ValueError(f"must use only letters, digits, '.', '_' and '-': it becomes a DAG id (got {v!r})")
        return v

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str | None) -> str | None:
        if v is None or v in SCHEDULE_PRESETS:
            return v
        fields = v.split()
        if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError(f"must be null, a preset ({', '.join(SCHEDULE_PRESETS)}) "
                             f"or a 5-field cron expression (got {v!r})")
        return v

    _trials = field_validator("trials", mode="before")(trials_number)

    @field_validator("workloads", "variants")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        duplicates = sorted({x for x in v if v.count(x) > 1})
        if duplicates:
            raise ValueError(f"lists {', '.join(duplicates)} more than once")
        return v

    @model_validator(mode="after")
    def _client_libraries(self) -> "Suite":
        for broker, library in self.client_libraries.items():
            if broker not in self.brokers:
                raise FieldValueError(f"clientLibraries.{broker}", f"{broker!r} is not a broker of this suite "
                                      f"(brokers: {', '.join(self.brokers)})")
            problem = client_library_problem(broker, library)
            if problem:
                raise FieldValueError(f"clientLibraries.{broker}", problem)
        return self

    @property
    def dag_id(self) -> str:
        return f"brokerbench_{self.name}"

    @property
    def source(self) -> Path | None:
        """The file this suite was loaded from (None when built in code)."""
        return self._source


def _reference(kind: str, name: str, loader, file: Path | None, field: str):
    """Load a referenced spec; failures become a SpecError naming the suite file."""
    try:
        return loader(name)
    except MissingFileError as e:
        raise SpecError(f"{kind} {name!r} not found ({display_path(e.file or name)})", file=file, field=field) from None
    except SpecError as e:
        raise SpecError(f"{kind} {name!r} is invalid: {e}", file=file, field=field) from None


def load_workload_ref(name: str, file: Path | None = None, field: str = "workloads") -> Workload:
    return _reference("workload", name, load_workload, file, field)


def load_driver_ref(name: str, file: Path | None = None, field: str = "brokers") -> DriverSpec:
    return _reference("driver", name, load_driver, file, field)


def load_variant_ref(name: str, file: Path | None = None, field: str = "variants") -> Variant:
    return _reference("variant", name, load_variant, file, field)


def check_references(suite: Suite, file: Path | None) -> None:
    """Load every workload, driver and variant ``suite`` names and check they fit together."""
    overrides = normalize_workload_keys(suite.overrides, file=file, field_prefix="overrides")
    for name in suite.workloads:
        workload = load_workload_ref(name, file)
        try:
            workload.with_overrides(overrides, file=file, field_prefix="overrides")
        except SpecError as e:
            raise SpecError(f"{e.message} (applied to workload {name!r})", file=file, field=e.field) from None
    drivers = []
    for broker, driver_name in suite.brokers.items():
        field = f"brokers.{broker}"
        if broker not in SUPPORTED_BROKERS:
            raise SpecError(f"unknown broker; supported brokers: {', '.join(SUPPORTED_BROKERS)}",
                            file=file, field=field)
        driver = load_driver_ref(driver_name, file, field)
        if driver.broker != broker:
            raise SpecError(f"driver {driver_name!r} is a {driver.broker} driver, not a {broker} one",
                            file=file, field=field)
        drivers.append(driver)
    for name in suite.variants:
        variant = load_variant_ref(name, file)
        for driver in drivers:
            try:
                apply_variant(driver, variant)
            except SpecError as e:
                raise SpecError(f"variant {name!r} does not apply: {e}", file=file, field="variants") from None


def load_suite(name_or_path: str | os.PathLike[str]) -> Suite:
    """Load a suite (a bare name is SPEC_ROOT/suites/<name>.yaml) and everything it names."""
    path = resolve("suites", name_or_path)
    try:
        suite = Suite.model_validate(read_yaml(path))
    except ValidationError as e:
        raise from_validation_error(e, path) from None
    suite._source = path
    check_references(suite, path)
    return suite
