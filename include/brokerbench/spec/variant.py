"""Variants: durability settings ("fsync on/off") that one suite compares.

A variant has one section per broker. ``driver`` holds client-side overrides,
deep-merged into the driver spec (mappings merge key by key, anything else
replaces). ``broker`` holds broker-side settings the environment applies when
it deploys the broker (they need a restart, so a plan deploys each broker once
per variant). A broker without a section runs with its driver unchanged and
its broker defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from .bounds import Description, Name
from .common import SUPPORTED_BROKERS, deep_merge, path_safe, read_yaml, resolve
from .driver import BROKER_KEYS, KAFKA_KEYS, DriverSpec, parse_properties, validate_driver
from .errors import FieldValueError, SpecError, from_validation_error


class BrokerVariant(BaseModel):
    """One broker's part of a variant. YAML keys: ``driver`` and ``broker``."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", allow_inf_nan=False)

    driver_overrides: dict[str, Any] = Field(default_factory=dict, alias="driver")
    broker_settings: dict[str, Any] = Field(default_factory=dict, alias="broker")


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

