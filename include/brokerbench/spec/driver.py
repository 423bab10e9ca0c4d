"""Drivers: how the clients talk to one broker, in the OMB driver format.

One model, :class:`DriverSpec`, covers the three brokers; only the settings of
the driver's own broker may be given (a Pulsar ``client:`` section in a Kafka
driver is an error, as it would otherwise be silently ignored).

Kafka's four config blocks are Java-properties text in OMB
(``producerConfig: "acks=all\\nlinger.ms=1"``); brokerbench also accepts a
YAML mapping and always exposes them parsed, as ``dict[str, str]``.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .bounds import (
    MAX_BATCH_DELAY_MS,
    MAX_CLIENT_THREADS,
    MAX_MESSAGE_SIZE,
    MAX_QUEUED_MESSAGES,
    MAX_REPLICAS,
    Name,
    at_most,
)
from .clients import client_library_problem
from .common import SUPPORTED_BROKERS, read_yaml, resolve
from .errors import FieldValueError, from_validation_error

Broker = Literal["kafka", "pulsar", "rabbitmq"]

KAFKA_KEYS = ("replicationFactor", "topicConfig", "commonConfig", "producerConfig", "consumerConfig")
PULSAR_KEYS = ("client", "producer", "consumer")
RABBITMQ_KEYS = ("amqpUris", "messagePersistence", "queueType", "exchangeType")
#: The OMB driver keys that belong to each broker.
BROKER_KEYS = {"kafka": KAFKA_KEYS, "pulsar": PULSAR_KEYS, "rabbitmq": RABBITMQ_KEYS}


def parse_properties(value: Any) -> dict[str, str]:
    """Java-properties text (or a mapping) as ``dict[str, str]``.

    Lines are ``key=value``, ``key: value`` or ``key value``; blank lines and
    lines starting with ``#`` or ``!`` are skipped. Mapping values become
    strings; booleans are written the Java way (``true``/``false``).
    """
    if value is None:
        return {}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                raise ValueError(f"value of {k!r} must be a scalar, not a {type(v).__name__}")
            out[str(k)] = ("true" if v else "false") if isinstance(v, bool) else ("" if v is None else str(v))
        return out
    if not isinstance(value, str):
        raise ValueError("must be Java-properties text (key=value lines) or a mapping")
    out = {}
    for raw in value.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            key, _, rest = line.partition(" ")
            out[key] = rest.strip()
        else:
            out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def format_properties(props: dict[str, str]) -> str:
    """``dict[str, str]`` as Java-properties text, one ``key=value`` per line."""
    return "".join(f"{k}={v}\n" for k, v in props.items())


class _Section(BaseModel):
    """A nested OMB section: populate by name, keep keys brokerbench does not model."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", allow_inf_nan=False)


Replicas = Annotated[int, at_most(MAX_REPLICAS)]
ClientThreads = Annotated[int, at_most(MAX_CLIENT_THREADS)]
QueuedMessages = Annotated[int, at_most(MAX_QUEUED_MESSAGES)]


class PulsarPersistence(_Section):
    ensemble_size: Replicas = Field(default=3, alias="ensembleSize", ge=1)
    write_quorum: Replicas = Field(default=3, alias="writeQuorum", ge=1)
    ack_quorum: Replicas = Field(default=2, alias="ackQuorum", ge=1)
    deduplication_enabled: bool = Field(default=False, alias="deduplicationEnabled")

    @model_validator(mode="after")
    def _quorums(self) -> "PulsarPersistence":
        if self.write_quorum > self.ensemble_size:
            raise FieldValueError("writeQuorum", f"must be <= ensembleSize ({self.ensemble_size}) "
                                  f"(got {self.write_quorum})")
        if self.ack_quorum > self.write_quorum:
            raise FieldValueError("ackQuorum", f"must be <= writeQuorum ({self.write_quorum}) "
                                  f"(got {self.ack_quorum})")
        return self


class PulsarClient(_Section):
    service_url: str = Field(default="pulsar://localhost:6650", alias="serviceUrl")
    http_url: str = Field(default="http://localhost:8080", alias="httpUrl")
    io_threads: ClientThreads = Field(default=8, alias="ioThreads", ge=1)
    connections_per_broker: ClientThreads = Field(default=8, alias="connectionsPerBroker", ge=1)
    persistence: PulsarPersistence = Field(default_factory=PulsarPersistence)

    @field_validator("service_url")
    @classmethod
    def _service_url(cls, v: str) -> str:
        if not v.startswith(("pulsar://", "pulsar+ssl://")):
            raise ValueError(f"must start with pulsar:// or pulsar+ssl:// (got {v!r})")
        return v


class PulsarProducer(_Section):
    batching_enabled: bool = Field(default=True, alias="batchingEnabled")
    batching_max_publish_delay_ms: Annotated[int, at_most(MAX_BATCH_DELAY_MS)] = Field(
        default=1, alias="batchingMaxPublishDelayMs", ge=0)
    batching_max_bytes: Annotated[int, at_most(MAX_MESSAGE_SIZE)] = Field(default=131072, alias="batchingMaxBytes",
                                                                           ge=1)
    block_if_queue_full: bool = Field(default=True, alias="blockIfQueueFull")
    pending_queue_size: QueuedMessages = Field(default=0, alias="pendingQueueSize", ge=0)


class PulsarConsumer(_Section):
    receiver_queue_size: QueuedMessages = Field(default=10000, alias="receiverQueueSize", ge=0)
    subscription_type: Literal["Exclusive", "Shared", "Failover", "Key_Shared"] = Field(
        default="Failover", alias="subscriptionType")


class DriverSpec(BaseModel):
    """One OMB driver. ``broker`` is derived from ``driverClass`` unless given.

    Settings of other brokers stay at their empty defaults: a Kafka driver has
    ``client is None``, a Pulsar driver ``topic_config == {}`` and so on.
    """

    model_config = ConfigDict(populate_by_name=True, extra="allow", allow_inf_nan=False)

    name: Name
    driver_class: str = Field(alias="driverClass", min_length=1)
    broker: Broker | None = None
    #: brokerbench extension (OMB ignores it): the client library the workers use (spec/clients.py); None = the
    #: suite's clientLibraries, else the broker's default. After build_plan, the library the run uses.
    client_library: str | None = Field(default=None, alias="clientLibrary")
    # Kafka
    replication_factor: Replicas | None = Field(default=None, alias="replicationFactor", ge=1)
    topic_config: dict[str, str] = Field(default_factory=dict, alias="topicConfig")
    common_config: dict[str, str] = Field(default_factory=dict, alias="commonConfig")
    producer_config: dict[str, str] = Field(default_factory=dict, alias="producerConfig")
    consumer_config: dict[str, str] = Field(default_factory=dict, alias="consumerConfig")
    # Pulsar
    client: PulsarClient | None = None
    producer: PulsarProducer | None = None
    consumer: PulsarConsumer | None = None
    # RabbitMQ
    amqp_uris: list[str] | None = Field(default=None, alias="amqpUris", min_length=1)
    message_persistence: bool | None = Field(default=None, alias="messagePersistence")
    queue_type: Literal["CLASSIC", "QUORUM", "STREAM"] | None = Field(default=None, alias="queueType")
    exchange_type: Literal["DIRECT", "TOPIC", "FANOUT"] | None = Field(default=None, alias="exchangeType")

    @field_validator("topic_config", "common_config", "producer_config", "consumer_config", mode="before")
    @classmethod
    def _properties(cls, v: Any) -> dict[str, str]:
        return parse_properties(v)

    @field_validator("queue_type", "exchange_type", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("amqp_uris")
    @classmethod
    def _uris(cls, v: list[str] | None) -> list[str] | None:
        for uri in v or []:
            if not uri.startswith(("amqp://", "amqps://")):
                raise ValueError(f"must start with amqp:// or amqps:// (got {uri!r})")
        return v

    @model_validator(mode="after")
    def _per_broker(self) -> "DriverSpec":
        derived = broker_of_class(self.driver_class)
        if self.broker is None:
            if derived is None:
                raise FieldValueError("driverClass", f"cannot tell the broker from {self.driver_class!r}; "
                                      f"supported brokers: {', '.join(SUPPORTED_BROKERS)} "
                                      "(name one with 'broker:' if the class is a custom one)")
            self.broker = derived  # type: ignore[assignment]  # one of SUPPORTED_BROKERS
        elif derived is not None and derived != self.broker:
            raise FieldValueError("broker", f"{self.broker!r} contradicts driverClass "
                                  f"{self.driver_class!r}, which is a {derived} driver")
        if self.client_library is not None:
            problem = client_library_problem(str(self.broker), self.client_library)
            if problem:
                raise FieldValueError("clientLibrary", problem)
        for other, keys in BROKER_KEYS.items():
            if other != self.broker:
                for key in keys:
                    if getattr(self, _ATTR_OF[key]) not in (None, {}):
                        raise FieldValueError(key, f"is a {other} setting; this is a {self.broker} driver")
        getattr(self, f"_defaults_{self.broker}")()
        return self

    def _defaults_kafka(self) -> None:
        if self.replication_factor is None:
            self.replication_factor = 1
        min_isr = self.topic_config.get("min.insync.replicas")
        if min_isr is not None:
            if not min_isr.strip().isdigit():
                raise FieldValueError("topicConfig", f"min.insync.replicas must be a whole number (got {min_isr!r})")
            if int(min_isr) > self.replication_factor:
                raise FieldValueError("topicConfig", f"min.insync.replicas={min_isr} is more than "
                                      f"replicationFactor={self.replication_factor}: every send would fail")
        acks = self.producer_config.get("acks")
        if acks is not None and acks.strip().lower() not in ("0", "1", "-1", "all"):
            raise FieldValueError("producerConfig", f"acks must be 0, 1, -1 or all (got {acks!r})")

    def _defaults_pulsar(self) -> None:
        self.client = self.client or PulsarClient()
        self.producer = self.producer or PulsarProducer()
        self.consumer = self.consumer or PulsarConsumer()

    def _defaults_rabbitmq(self) -> None:
        if self.amqp_uris is None:
            self.amqp_uris = ["amqp://guest:guest@localhost:5672"]
        if self.message_persistence is None:
            self.message_persistence = False
        if self.queue_type is None:
            self.queue_type = "CLASSIC"
        if self.exchange_type is None:
            self.exchange_type = "DIRECT"

    @model_serializer(mode="wrap")
    def _drop_other_brokers(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Serialize only the settings of this driver's own broker."""
        data = handler(self)
        for other, keys in BROKER_KEYS.items():
            if other != self.broker:
                for key in keys:
                    data.pop(key, None)
                    data.pop(_ATTR_OF[key], None)
        return data

    def to_mapping(self) -> dict[str, Any]:
        """The driver as a mapping with OMB keys, config blocks as mappings.

        This is the form variant overrides are merged into; it validates back
        into an equal DriverSpec.
        """
        return self.model_dump(by_alias=True, exclude_none=True)

    def to_omb_dict(self) -> dict[str, Any]:
        """The driver in OMB's own format (Kafka config blocks as properties text, every one of them: OMB's
        KafkaBenchmarkDriver loads each and stops on a missing one, so an empty block is written empty).

        ``broker`` is only written when ``driverClass`` does not already say it.
        """
        data = self.to_mapping()
        if broker_of_class(self.driver_class) == self.broker:
            data.pop("broker", None)
        if self.broker == "kafka":
            for key in KAFKA_KEYS[1:]:
                data[key] = format_properties(data.get(key) or {})
        return data


_ATTR_OF = {(f.alias or name): name for name, f in DriverSpec.model_fields.items()}


def broker_of_class(driver_class: str) -> str | None:
    """The broker an OMB driverClass drives, or None when it is not one brokerbench knows."""
    lowered = driver_class.lower()
    for broker in SUPPORTED_BROKERS:
        if broker in lowered:
            return broker
    return None


def validate_driver(data: dict[str, Any], file: str | os.PathLike[str] | None,
                    field_prefix: str | None = None) -> DriverSpec:
    """DriverSpec from a mapping; a problem is a SpecError naming ``file``."""
    try:
        return DriverSpec.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, file, prefix=field_prefix) from None


def load_driver(name_or_path: str | os.PathLike[str]) -> DriverSpec:
    """Load and validate a driver: a bare name is SPEC_ROOT/drivers/<name>.yaml."""
    path = resolve("drivers", name_or_path)
    return validate_driver(read_yaml(path), path)
