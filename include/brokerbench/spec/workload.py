"""Workloads: what load to generate, in the OpenMessaging Benchmark (OMB) format.

A workload file is an OMB workload YAML; keys brokerbench does not know are
ignored, as OMB ignores them, so upstream OMB workload files load unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from ..util import TRIAL_SEP, split_trial
from .bounds import (
    MAX_BACKLOG_DRAIN_RATIO,
    MAX_BACKLOG_GB,
    MAX_CLIENTS_PER_TOPIC,
    MAX_DURATION_MINUTES,
    MAX_MESSAGE_SIZE,
    MAX_PARTITIONS_PER_TOPIC,
    MAX_PAYLOAD_POOL_BYTES,
    MAX_PAYLOAD_POOL_SIZE,
    MAX_PRODUCER_RATE,
    MAX_SWEEP_PUBLISH_P99_MS,
    MAX_SWEEP_STEPS,
    MAX_TOPICS,
    MAX_TOTAL_CLIENTS,
    MAX_TOTAL_PARTITIONS,
    Name,
    at_most,
)
from .common import path_safe, read_yaml, resolve
from .errors import FieldValueError, SpecError, from_validation_error
from .roots import payload_dirs

#: Bytes at the start of every payload that carry the send time (ns since epoch).
TIMESTAMP_BYTES = 8

KeyDistributor = Literal["NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO"]
#: brokerbench's workload kinds (docs/worker.md); OMB itself ignores the key.
WorkloadKind = Literal["latency", "throughput-sweep", "producer-only", "consumer-only", "backlog", "mixed"]


#: OMB's payload files (payload/payload-100b.data, payload-1Kb.data, ...): <n>b is n bytes, <n>Kb n x 1024
OMB_PAYLOAD = re.compile(r"^payload-(\d+)(b|Kb)\.data$")


def omb_payload_size(name: str) -> int | None:
    """The bytes one of OMB's standard payload names stands for (``payload-1Kb.data``: 1024), else None.

    Reads no file and allocates nothing, so the size is checked before a file of it is made.
    """
    m = OMB_PAYLOAD.match(Path(name).name)
    if m is None:
        return None
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 20:  # int() refuses very long digit strings; any such size is far above the bound anyway
        digits = "9" * 20
    return int(digits) * (1024 if m.group(2) == "Kb" else 1)


def check_payload_size(name: str, size: int, message_size: int | None) -> None:
    """Refuse (field ``payloadFile``) a payload above MAX_MESSAGE_SIZE or of another size than ``message_size``."""
    if size > MAX_MESSAGE_SIZE.value:
        raise FieldValueError("payloadFile", f"{name!r} holds {size:,} bytes; a payload "
                              f"{MAX_MESSAGE_SIZE.refusal(size)}")
    if message_size is not None and size != message_size:
        raise FieldValueError("payloadFile", f"{name!r} holds {size} bytes but "
                              f"messageSize is {message_size}: they must be equal")


def omb_payload(name: str, message_size: int | None = None) -> Path | None:
    """The file for one of OMB's standard payload names, generated when first asked for.

    OMB ships ``payload/payload-20b.data``, ``-100b``, ``-200b``, ``-400b``,
    ``-1Kb``, ``-2Kb``, ``-4Kb`` ...; most of its workloads name one. brokerbench
    does not ship them: a name of that form resolves to a file of that many
    bytes, the same bytes every time (SHAKE-256 of the name), written once under
    ``$BROKERBENCH_HOME/payload/``. Any other name: None.

    The size the name stands for is checked first, against MAX_MESSAGE_SIZE and
    ``message_size`` (when given): a name too large is refused (FieldValueError,
    a ValueError) before anything is allocated or written.
    """
    size = omb_payload_size(name)
    if size is None:
        return None
    check_payload_size(name, size, message_size)
    from ..resources import brokerbench_home

    path = brokerbench_home() / "payload" / Path(name).name
    data = hashlib.shake_256(Path(name).name.encode()).digest(size)
    if not (path.is_file() and path.stat().st_size == size and path.read_bytes() == data):
        from ..util import write_atomic

        write_atomic(path, data)
    return path


def _inside(path: Path, dirs: list[Path]) -> bool:
    """True when ``path`` (symlinks and '..' resolved) lies inside one of ``dirs`` (already resolved)."""
    real = path.resolve()
    return any(real.is_relative_to(d) for d in dirs)


def _is_file(path: Path) -> bool:
    """Path.is_file(), but False for a name the file system cannot even look up (ENAMETOOLONG, ...)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _outside_message(name: str, dirs: list[Path]) -> str:
    return (f"{name!r} lies outside the payload directories ({', '.join(str(d) for d in dirs)}): payload files "
            f"come only from there (BROKERBENCH_PAYLOAD_DIRS adds directories, separated by '{os.pathsep}')")


def find_payload(name: str, message_size: int | None) -> Path:
    """The payload file ``name`` refers to, from the payload directories only (:func:`roots.payload_dirs`).

    A relative name is looked up in each directory (``payload/x.data`` also as
    ``x.data``, OMB's spelling), an absolute one used as is; either must lie
    inside a payload directory once symlinks and ``..`` are resolved. A name of
    OMB's standard form that no directory holds is generated (:func:`omb_payload`).
    Problems raise FieldValueError for the field ``payloadFile``.
    """
    dirs = payload_dirs()
    given = Path(name)
    if given.is_absolute():
        candidates = [given]
    else:
        candidates = []
        for d in dirs:
            candidates.append(d / given)
            if given.parts[0] == "payload" and len(given.parts) > 1:
                candidates.append(d.joinpath(*given.parts[1:]))
    for candidate in candidates:
        if not _inside(candidate, dirs):
            raise FieldValueError("payloadFile", _outside_message(name, dirs))
        if _is_file(candidate):
            return candidate.resolve()
    generated = omb_payload(name, message_size)
    if generated is None:
        tried = ", ".join(str(c) for c in candidates)
        raise FieldValueError("payloadFile", f"file {name!r} not found (looked at {tried}; payload files come "
                              f"from {', '.join(str(d) for d in dirs)})")
    return generated.resolve()


class Workload(BaseModel):
    """One OMB workload. Attributes are snake_case; YAML/JSON keys are OMB camelCase.

    ``id`` is the file stem (used in result paths); ``name`` is the display name
    copied into results. ``payload_path`` is the resolved payload file, when
    the workload names one.
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore", allow_inf_nan=False)

    id: str = ""
    name: Name
    topics: Annotated[int, at_most(MAX_TOPICS)] = Field(ge=1)
    partitions_per_topic: Annotated[int, at_most(MAX_PARTITIONS_PER_TOPIC)] = Field(alias="partitionsPerTopic", ge=1)
    message_size: Annotated[int, at_most(MAX_MESSAGE_SIZE)] = Field(alias="messageSize", ge=1)
    payload_file: str | None = Field(default=None, alias="payloadFile")
    use_randomized_payloads: bool = Field(default=False, alias="useRandomizedPayloads")
    random_bytes_ratio: float | None = Field(default=None, alias="randomBytesRatio", ge=0, le=1)
    randomized_payload_pool_size: Annotated[int, at_most(MAX_PAYLOAD_POOL_SIZE)] | None = Field(
        default=None, alias="randomizedPayloadPoolSize", ge=1)
    key_distributor: KeyDistributor = Field(default="NO_KEY", alias="keyDistributor")
    subscriptions_per_topic: Annotated[int, at_most(MAX_CLIENTS_PER_TOPIC)] = Field(
        default=1, alias="subscriptionsPerTopic", ge=0)
    consumer_per_subscription: Annotated[int, at_most(MAX_CLIENTS_PER_TOPIC)] = Field(
        default=1, alias="consumerPerSubscription", ge=0)
    producers_per_topic: Annotated[int, at_most(MAX_CLIENTS_PER_TOPIC)] = Field(
        default=1, alias="producersPerTopic", ge=0)
    producer_rate: Annotated[float, at_most(MAX_PRODUCER_RATE)] = Field(alias="producerRate", ge=0)
    consumer_backlog_size_gb: Annotated[float, at_most(MAX_BACKLOG_GB)] = Field(
        default=0, alias="consumerBacklogSizeGB", ge=0)
    backlog_drain_ratio: Annotated[float, at_most(MAX_BACKLOG_DRAIN_RATIO)] = Field(
        default=1.0, alias="backlogDrainRatio", gt=0)
    test_duration_minutes: Annotated[float, at_most(MAX_DURATION_MINUTES)] = Field(alias="testDurationMinutes", gt=0)
    warmup_duration_minutes: Annotated[float, at_most(MAX_DURATION_MINUTES)] = Field(
        default=1.0, alias="warmupDurationMinutes", ge=0)
    # brokerbench extensions (unknown to OMB, which ignores them)
    kind: WorkloadKind | None = Field(default=None, description="default: derived from the OMB fields")
    sweep_rates_msg_s: list[Annotated[float, at_most(MAX_PRODUCER_RATE)]] | None = Field(
        default=None, alias="sweepRatesMsgS", min_length=1)
    #: throughput-sweep: a step is stable only while its publish latency p99 stays at or below this (ms);
    #: None = the worker's default (worker/job.py SWEEP_MAX_PUBLISH_P99_MS, 200 ms)
    sweep_max_publish_p99_ms: Annotated[float, at_most(MAX_SWEEP_PUBLISH_P99_MS)] | None = Field(
        default=None, alias="sweepMaxPublishP99Ms", gt=0)
    payload_path: str | None = None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> "Workload":
        if not self.id:
            self.id = path_safe(self.name)
        if self.message_size < TIMESTAMP_BYTES:
            raise FieldValueError("messageSize", f"must be >= {TIMESTAMP_BYTES} bytes: every message "
                                  f"carries its 8-byte send timestamp (got {self.message_size})")
        if self.use_randomized_payloads:
            for field, value in (("randomBytesRatio", self.random_bytes_ratio),
                                 ("randomizedPayloadPoolSize", self.randomized_payload_pool_size)):
                if value is None:
                    raise FieldValueError(field, "is required when useRandomizedPayloads is true")
        consumers = self.subscriptions_per_topic * self.consumer_per_subscription
        if self.producers_per_topic == 0 and consumers == 0:
            raise FieldValueError("producersPerTopic", "a workload needs producers or consumers "
                                  "(producersPerTopic and subscriptionsPerTopic x consumerPerSubscription are 0)")
        if self.consumer_backlog_size_gb > 0 and (self.producers_per_topic == 0 or consumers == 0):
            raise FieldValueError("consumerBacklogSizeGB", "a backlog test needs producers and consumers")
        if self.sweep_rates_msg_s and any(r <= 0 for r in self.sweep_rates_msg_s):
            raise FieldValueError("sweepRatesMsgS", f"every rate must be > 0 msg/s (got {self.sweep_rates_msg_s})")
        self._check_totals()
        context = info.context or {}
        if self.payload_file and context.get("check_files"):
            self._check_payload()
        return self

    def _check_totals(self) -> None:
        """Bounds of products of fields: the whole workload's partitions, clients and payload pool."""
        partitions = self.topics * self.partitions_per_topic
        if partitions > MAX_TOTAL_PARTITIONS.value:
            raise FieldValueError("partitionsPerTopic", f"topics x partitionsPerTopic "
                                  f"{MAX_TOTAL_PARTITIONS.refusal(partitions)}")
        clients = self.topics * (self.producers_per_topic
                                 + self.subscriptions_per_topic * self.consumer_per_subscription)
        if clients > MAX_TOTAL_CLIENTS.value:
            raise FieldValueError("topics", f"producers and consumers of all topics together "
                                  f"{MAX_TOTAL_CLIENTS.refusal(clients)}")
        if self.use_randomized_payloads and self.randomized_payload_pool_size:
            pool = self.randomized_payload_pool_size * self.message_size
            if pool > MAX_PAYLOAD_POOL_BYTES.value:
                raise FieldValueError("randomizedPayloadPoolSize", f"randomizedPayloadPoolSize x messageSize "
                                      f"{MAX_PAYLOAD_POOL_BYTES.refusal(pool)}")
        if self.sweep_rates_msg_s and len(self.sweep_rates_msg_s) > MAX_SWEEP_STEPS.value:
            raise FieldValueError("sweepRatesMsgS", f"the number of rates "
                                  f"{MAX_SWEEP_STEPS.refusal(len(self.sweep_rates_msg_s))}")

    def _check_payload(self) -> None:
        """Resolve payloadFile (when not yet resolved) inside the payload directories and check its size."""
        if self.payload_path is None:
            self.payload_path = str(find_payload(self.payload_file or "", self.message_size))
        path = Path(self.payload_path)
        dirs = payload_dirs()
        if not _inside(path, dirs):
            raise FieldValueError("payloadFile", _outside_message(self.payload_path, dirs))
        if not _is_file(path):
            raise FieldValueError("payloadFile", f"file {self.payload_path!r} not found")
        check_payload_size(self.payload_file or self.payload_path, path.stat().st_size, self.message_size)

    def to_omb_dict(self) -> dict[str, Any]:
        """The workload as an OMB workload mapping (camelCase keys, unset options left out)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude={"id", "payload_path"})

    def with_overrides(self, overrides: dict[str, Any], file: str | os.PathLike[str] | None = None,
                       field_prefix: str | None = None) -> "Workload":
        """A new validated Workload with ``overrides`` (OMB or attribute names) applied.

        A problem is a SpecError naming ``file`` and ``field_prefix.<field>``.
        """
        data = self.model_dump(by_alias=True)
        changes = normalize_workload_keys(overrides, file=file, field_prefix=field_prefix)
        if "payloadFile" in changes:
            data["payload_path"] = None  # resolve the new file again
        data.update(changes)
        try:
            return Workload.model_validate(data, context={"check_files": True})
        except ValidationError as e:
            raise from_validation_error(e, file, prefix=field_prefix) from None


_ALIASES = {name: (f.alias or name) for name, f in Workload.model_fields.items()}
#: Keys a suite may override: every OMB workload key except the name.
OVERRIDABLE_KEYS = sorted(set(_ALIASES.values()) - {"id", "name", "payload_path"})


def normalize_workload_keys(overrides: dict[str, Any], file: str | os.PathLike[str] | None = None,
                            field_prefix: str | None = None) -> dict[str, Any]:
    """``overrides`` with attribute names turned into OMB keys; unknown keys are a SpecError."""
    out = {}
    for key, value in overrides.items():
        omb_key = _ALIASES.get(key, key)
        if omb_key not in OVERRIDABLE_KEYS:
            field = f"{field_prefix}.{key}" if field_prefix else key
            raise SpecError(f"not a workload field that can be overridden (known: {', '.join(OVERRIDABLE_KEYS)})",
                            file=file, field=field)
        out[omb_key] = value
    return out


def load_workload(name_or_path: str | os.PathLike[str]) -> Workload:
    """Load and validate a workload: a bare name is SPEC_ROOT/workloads/<name>.yaml."""
    path = resolve("workloads", name_or_path)
    if split_trial(path.stem)[1] is not None:
        raise SpecError(f"a workload file name may not end in '{TRIAL_SEP}<number>': that suffix names one trial "
                        f"of a run with trials > 1 (rename {path.name})", file=path)
    data = read_yaml(path)
    data["id"] = path.stem
    data.pop("payload_path", None)
    try:
        return Workload.model_validate(data, context={"check_files": True})
    except ValidationError as e:
        raise from_validation_error(e, path) from None
