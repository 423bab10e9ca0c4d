"""Variants: durability settings ("fsync on/off") that one suite compares.

A variant has one section per broker. ``driver`` holds client-side overrides,
deep-merged into the driver spec (mappings merge key by key, anything else
replaces). ``broker`` holds broker-side settings the environment applies when
it deploys the broker (they need a restart, so a plan deploys each broker once
per variant). ``jvmOptions`` holds JVM flags for the broker's JVM (Kafka, Pulsar), e.g.
``-Xms64m -Xmx64m -XX:+UseSerialGC``: heap flags replace brokerbench's heap, a collector
replaces its collector and that collector's tuning, anything else is added after its
defaults (environments/machine/jvm_options.py). A broker without a section runs with its
driver unchanged and its broker defaults.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .bounds import Description, Name
from .common import SUPPORTED_BROKERS, deep_merge, path_safe, read_yaml, resolve
from .driver import BROKER_KEYS, KAFKA_KEYS, DriverSpec, parse_properties, validate_driver
from .errors import FieldValueError, SpecError, from_validation_error

#: flags that would change what the broker's JVM runs, not how: brokerbench sets the classpath and main class
NOT_JVM_OPTIONS = ("-cp", "-classpath", "--class-path", "-jar", "--module", "-m")
#: the most flags one broker's ``jvmOptions`` may hold, and the longest one (characters)
MAX_JVM_OPTIONS, MAX_JVM_OPTION_LENGTH = 100, 1000


def jvm_option_list(value: Any) -> Any:
    """``jvmOptions`` as a list of flags: a string is split as a shell splits it (quotes keep spaces in a
    flag), a list is taken as it is; each must be a JVM flag (starting with ``-``) that leaves the classpath and the
    main class to brokerbench."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as e:
            raise ValueError(f"cannot split {value!r} into JVM flags: {e}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a string of JVM flags (e.g. \"-Xms64m -Xmx64m -XX:+UseSerialGC\") or a list of them")
    if len(value) > MAX_JVM_OPTIONS:
        raise ValueError(f"holds {len(value)} flags; at most {MAX_JVM_OPTIONS}")
    for flag in value:
        if not flag.startswith("-") or len(flag) > MAX_JVM_OPTION_LENGTH:
            raise ValueError(f"{flag[:80]!r} is no JVM flag (each starts with '-', at most {MAX_JVM_OPTION_LENGTH} "
                             "characters)")
        if flag.split("=", 1)[0] in NOT_JVM_OPTIONS:
            raise ValueError(f"{flag!r} would change what the JVM runs: brokerbench sets the classpath and the "
                             "broker's main class")
    return value


class BrokerVariant(BaseModel):
    """One broker's part of a variant. YAML keys: ``driver``, ``broker`` and ``jvmOptions``."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", allow_inf_nan=False)

    driver_overrides: dict[str, Any] = Field(default_factory=dict, alias="driver")
    broker_settings: dict[str, Any] = Field(default_factory=dict, alias="broker")
    #: flags for the broker's JVM (heap, collector, ...); [] = brokerbench's defaults
    jvm_options: list[str] = Field(default_factory=list, alias="jvmOptions")

    _jvm = field_validator("jvm_options", mode="before")(jvm_option_list)


class Variant(BaseModel):
    """A named durability setting, e.g. ``fsync-on``; see the module docstring."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", allow_inf_nan=False)

    name: Name
    description: Description = ""
    durability_level: Description | None = Field(default=None, alias="durabilityLevel")
    kafka: BrokerVariant | None = None
    pulsar: BrokerVariant | None = None
    rabbitmq: BrokerVariant | None = None

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> "Variant":
        if path_safe(self.name) != self.name:
            raise FieldValueError("name", f"must use only letters, digits, '.', '_' and '-' (got {self.name!r})")
        for broker in SUPPORTED_BROKERS:
            section: BrokerVariant | None = getattr(self, broker)
            if section is None:
                continue
            for key in section.driver_overrides:
                if key not in BROKER_KEYS[broker]:
                    raise FieldValueError(f"{broker}.driver.{key}", "not a setting of a "
                                          f"{broker} driver (known: {', '.join(BROKER_KEYS[broker])})")
            if broker == "rabbitmq" and section.jvm_options:
                raise FieldValueError("rabbitmq.jvmOptions", "RabbitMQ runs on the Erlang VM, not a JVM: JVM "
                                      "options apply to kafka and pulsar only")
            if broker == "kafka":  # config blocks may be properties text: keep them as mappings
                for key in KAFKA_KEYS[1:]:
                    if key in section.driver_overrides:
                        try:
                            section.driver_overrides[key] = parse_properties(section.driver_overrides[key])
                        except ValueError as e:
                            raise FieldValueError(f"kafka.driver.{key}", str(e)) from None
        return self

    @property
    def source(self) -> Path | None:
        """The file this variant was loaded from (None when built in code)."""
        return self._source

    def for_broker(self, broker: str) -> BrokerVariant:
        """This variant's settings for ``broker`` (empty when it has no section for it)."""
        if broker not in SUPPORTED_BROKERS:
            raise SpecError(f"unknown broker {broker!r}; supported brokers: {', '.join(SUPPORTED_BROKERS)}",
                            file=self._source)
        return (getattr(self, broker) or BrokerVariant()).model_copy(deep=True)


def load_variant(name_or_path: str | os.PathLike[str]) -> Variant:
    """Load and validate a variant: a bare name is SPEC_ROOT/variants/<name>.yaml.

    The ``name`` key may be left out; when given it must equal the file name,
    because suites and run parameters refer to variants by file name.
    """
    path = resolve("variants", name_or_path)
    data = read_yaml(path)
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise SpecError(f"must match the file name {path.stem!r} (got {data['name']!r})", file=path, field="name")
    try:
        variant = Variant.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, path) from None
    variant._source = path
    return variant


def apply_variant(driver: DriverSpec, variant: Variant) -> DriverSpec:
    """A new, validated DriverSpec: ``driver`` with the variant's overrides for its broker.

    A merged driver that is invalid is a SpecError naming the variant's file and
    the field as ``<broker>.driver.<field>``.
    """
    overrides = variant.for_broker(driver.broker or "").driver_overrides
    if not overrides:
        return driver.model_copy(deep=True)
    merged = deep_merge(driver.to_mapping(), overrides)
    try:
        return validate_driver(merged, variant.source, field_prefix=f"{driver.broker}.driver")
    except SpecError as e:
        raise SpecError(f"applied to driver {driver.name!r}: {e.message}", file=e.file, field=e.field) from None

