"""The run parameters of a suite DAG, defined once.

Each :class:`RunParam` says what a parameter is for (``group``), its JSON schema
(what Airflow's trigger form shows and validates before a run exists), its
default for a suite and its description. From this one table come:

* the Airflow ``Param`` objects of every suite DAG (``dag_factory.params_for``);
* which params the plan takes (``group == "plan"``, validated again by
  :class:`brokerbench.spec.plan.RunParams`, whose fields are these names), which
  the analysis reads and which refine the environment's settings
  (:data:`ANALYSIS_PARAMS`, :data:`ENVIRONMENT_PARAMS`, used by the pipeline);
* the table of params in docs/specs.md (:func:`markdown_table`; a test keeps
  the two the same).

Imports no Airflow: the Param objects are built by the DAG factory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from . import bounds
from .clients import CLIENT_LIBRARIES, JAVA_ALIAS, JVM_LIBRARIES, describe_choices
from .common import SUPPORTED_BROKERS, list_names
from .roots import default_results_root

Group = Literal["plan", "analysis", "environment"]


@dataclass(frozen=True)
class RunParam:
    name: str
    group: Group
    description: str
    #: JSON schema keywords (besides the default); a function of the suite when they depend on it
    schema: dict[str, Any] | Callable[[Any], dict[str, Any]] = field(default_factory=dict)
    #: the default, or a function of the suite
    default: Any = None

    def schema_for(self, suite: Any) -> dict[str, Any]:
        return self.schema(suite) if callable(self.schema) else dict(self.schema)

    def default_for(self, suite: Any) -> Any:
        return self.default(suite) if callable(self.default) else self.default


def _workloads_schema(_suite: Any) -> dict[str, Any]:
    return {"type": ["null", "array"], "items": {"type": "string", "enum": list_names("workloads")}, "minItems": 1,
            "uniqueItems": True}


def _variants_schema(suite: Any) -> dict[str, Any]:
    """Every shipped variant (and the suite's own, should one live elsewhere): a run may choose any of them."""
    names = sorted(set(list_names("variants")) | set(suite.variants))
    return {"type": "array", "items": {"type": "string", "enum": names}, "minItems": 1, "uniqueItems": True}


def _results_root(_suite: Any) -> str:
    return default_results_root()


ROLES = ("broker", "metadata", "client")
# the params that replace a spec file's field have that field's bound (spec/bounds.py, with the reasons)
MAX_TRIALS = int(bounds.MAX_TRIALS.value)
#: trials per side of an A/B run: at least what an exact rank test needs for a 95 % interval (abtest), and the
#: default when the run names none. Measured at 5 and 10 only (docs/analytics.md, "The product's verdict"): with
#: ten 8-s trials a side p99s 6.4 % and 7.8 % slower were found in 8 of 8 runs, with five an 11 % slower one in 3 of 5
AB_MIN_TRIALS = 4
AB_DEFAULT_TRIALS = 10
MAX_DURATION_MINUTES = bounds.MAX_DURATION_MINUTES.value
MAX_RATE_MSG_S = int(bounds.MAX_PRODUCER_RATE.value)
MAX_SWEEP_PUBLISH_P99_MS = bounds.MAX_SWEEP_PUBLISH_P99_MS.value
#: the worker's own default (worker/job.py holds it: the worker imports nothing of the spec package)
SWEEP_MAX_PUBLISH_P99_MS = 200.0
MAX_INTERVAL_SECONDS = int(bounds.MAX_INTERVAL_SECONDS.value)
#: the most earlier runs a verdict may need before it judges: more than a year of nightly runs
MAX_MIN_RUNS = 1000
#: aws: the most instances per role (the settings check's bound too), and the highest cost cap (USD) a run may state
MAX_INSTANCES_PER_ROLE = int(bounds.MAX_INSTANCES_PER_ROLE.value)
MAX_COST_CAP_USD = 100_000


def trials_number(v: Any) -> Any:
    """``trials`` before pydantic's integer check: refuse what it would coerce but is no count (true, 2.5)."""
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"must be a whole number from 1 to {MAX_TRIALS} (got {v!r})")
    return v


PARAMS: tuple[RunParam, ...] = (
    RunParam("brokers", "plan", "Brokers to benchmark",
             lambda s: {"type": "array", "items": {"type": "string", "enum": sorted(s.brokers)}, "minItems": 1,
                        "uniqueItems": True},
             lambda s: sorted(s.brokers)),
    # no default list: a form or conf that leaves it out means "the suite's", unless workload_files replace them
    RunParam("workloads", "plan",
             "Workloads by name (include/workloads/<name>.yaml); empty = the suite's (none when workload_files "
             "are given)", _workloads_schema),
    # any shipped variant (e.g. as-configured on external clusters); the default is the suite's list
    RunParam("variants", "plan", "Durability variants (include/variants/<name>.yaml); default: the suite's",
             _variants_schema, lambda s: list(s.variants)),
    RunParam("test_duration_minutes", "plan", "Measured phase length (min); empty = suite/workload value",
             {"type": ["null", "number"], "exclusiveMinimum": 0, "maximum": MAX_DURATION_MINUTES}),
    RunParam("warmup_duration_minutes", "plan", "Warm-up length (min); empty = suite/workload value",
             {"type": ["null", "number"], "minimum": 0, "maximum": MAX_DURATION_MINUTES}),
    RunParam("rate_override_msg_s", "plan", "Replace every workload's producerRate (msg/s)",
             {"type": ["null", "integer"], "minimum": 0, "maximum": MAX_RATE_MSG_S}),
    RunParam("sweep_max_publish_p99_ms", "plan",
             "throughput-sweep: a step is stable only while its publish latency p99 stays at or below this (ms), "
             "stated with the highest stable rate; empty = the workload's sweepMaxPublishP99Ms, default "
             f"{SWEEP_MAX_PUBLISH_P99_MS:g}",
             {"type": ["null", "number"], "exclusiveMinimum": 0, "maximum": MAX_SWEEP_PUBLISH_P99_MS}),
    RunParam("interval_seconds", "plan", "Reporting interval of the workers (s); empty = the suite's intervalSeconds",
             {"type": ["null", "integer"], "exclusiveMinimum": 0, "maximum": MAX_INTERVAL_SECONDS}),
    RunParam("trials", "plan",
             "Measured phase runs per workload, back to back after one warm-up; the run's value per metric is the "
             "median of the valid trials (docs/analytics.md); empty = the suite's trials (1), in an A/B run "
             f"(compare_with) per side and at least {AB_MIN_TRIALS}, default {AB_DEFAULT_TRIALS}",
             {"type": ["null", "integer"], "minimum": 1, "maximum": MAX_TRIALS}),
    RunParam("workload_files", "plan",
             "OMB workload YAML files anywhere on disk (absolute paths), run instead of the suite's workloads "
             "(after the workloads param when both are given); empty = none",
             {"type": ["null", "array"], "items": {"type": "string", "minLength": 1}}),
    RunParam("driver_files", "plan",
             "OMB driver YAML files anywhere on disk (absolute paths), each replacing the suite's driver of its "
             "broker (from driverClass); empty = the suite's drivers",
             {"type": ["null", "array"], "items": {"type": "string", "minLength": 1}}),
    RunParam("client_libraries", "plan",
             "Client library per broker, e.g. {\"kafka\": \"confluent-kafka\"} (" + describe_choices() + "); over "
             "the suite's clientLibraries and the driver's clientLibrary; empty = theirs, else the default",
             {"type": ["null", "object"],
              "properties": {b: {"type": "string", "enum": [*libs, *([JAVA_ALIAS] if b in JVM_LIBRARIES else [])]}
                             for b, libs in CLIENT_LIBRARIES.items()},
              "additionalProperties": False}),
    RunParam("compare_with", "plan",
             "A/B in one run: side B's broker versions, variants (paired in order with the run's, e.g. "
             "{\"variants\": [\"fsync-on\"]} against variants [\"fsync-off\"]; a name or an absolute path), "
             "client libraries and/or driver files, e.g. {\"broker_versions\": {\"kafka\": \"4.0.0\"}}; both "
             "sides measured alternately (ABBA), with broker versions or variants each deployed afresh at every "
             f"change of side, trials per side (at least {AB_MIN_TRIALS}, default {AB_DEFAULT_TRIALS}), judged per "
             "metric with a rank test's interval (docs/analytics.md); empty = no A/B",
             {"type": ["null", "object"],
              "properties": {"client_libraries": {"type": "object"},
                             "driver_files": {"type": "array", "items": {"type": "string", "minLength": 1},
                                              "minItems": 1},
                             "broker_versions": {"type": "object"},
                             "variants": {"type": "array", "items": {"type": "string", "minLength": 1},
                                          "minItems": 1}},
              "additionalProperties": False}),
    RunParam("environment", "plan", "Where the brokers run (external: clusters that exist, docs/external.md)",
             {"type": "string", "enum": ["local", "aws", "external"]},
             lambda s: s.environment),
    RunParam("results_root", "plan", "Results directory (or s3://bucket/prefix)",
             {"type": "string", "minLength": 1}, _results_root),
    RunParam("regression_min_runs", "analysis", "Earlier runs of a track needed before a verdict",
             {"type": "integer", "minimum": 1, "maximum": MAX_MIN_RUNS}, 3),
    RunParam("regression_gate", "analysis", "Fail the run on a regression: auto = scheduled runs only",
             {"type": "string", "enum": ["auto", "always", "never"]}, "auto"),
    # the environment's settings (broker_versions: both environments; the rest: aws only); empty = the suite's
    RunParam("broker_versions", "environment",
             "Broker versions, e.g. {\"kafka\": \"3.9.1\"}: on local, Apache Kafka / Pulsar resolved from Maven "
             "Central (default kafka 4.1.1, pulsar 4.0.7); on aws, installed on the fleet (a backfill over versions "
             "re-runs the suite on another version)",
             {"type": ["null", "object"], "properties": {b: {"type": "string", "minLength": 1, "maxLength": 40}
                                                         for b in SUPPORTED_BROKERS},
              "additionalProperties": False}),
    RunParam("broker_implementations", "environment",
             "local: a stand-in for a quick check instead of the real broker, e.g. {\"kafka\": \"tansu\", "
             "\"pulsar\": \"pulsar-lite\"}; empty = Apache Kafka and Apache Pulsar",
             {"type": ["null", "object"],
              "properties": {"kafka": {"type": "string", "enum": ["apache-kafka", "tansu"]},
                             "pulsar": {"type": "string", "enum": ["apache-pulsar", "pulsar-lite"]},
                             "rabbitmq": {"type": "string", "enum": ["rabbitmq"]}},
              "additionalProperties": False}),
    RunParam("cpu_pinning", "environment",
             "local: CPUs of the broker processes and of the clients (taskset's syntax), e.g. {\"broker\": \"0\", "
             "\"client\": \"1\"}: each side on its own CPUs, recorded in provenance/hosts.json; empty = not pinned",
             {"type": ["null", "object"],
              "properties": {side: {"type": "string", "pattern": r"^\d+(-\d+)?(,\d+(-\d+)?)*$"}
                             for side in ("broker", "client")},
              "additionalProperties": False}),
    RunParam("instance_types", "environment", "aws: EC2 instance type per role (broker, metadata, client)",
             {"type": ["null", "object"], "properties": {r: {"type": "string"} for r in ROLES},
              "additionalProperties": False}),
    RunParam("instance_counts", "environment", "aws: instances per role",
             {"type": ["null", "object"],
              "properties": {r: {"type": "integer", "minimum": 0, "maximum": MAX_INSTANCES_PER_ROLE} for r in ROLES},
              "additionalProperties": False}),
    RunParam("cost_cap_usd", "environment", "aws: refuse the run when its expected cost is above this (USD)",
             {"type": ["null", "number"], "minimum": 0, "maximum": MAX_COST_CAP_USD}),
    RunParam("tuning_profile", "environment", "aws: named broker tuning profile (include/infra/aws/profiles.yaml)",
             {"type": ["null", "string"]}),
)

PLAN_PARAMS = tuple(p.name for p in PARAMS if p.group == "plan")
ANALYSIS_PARAMS = tuple(p.name for p in PARAMS if p.group == "analysis")
ENVIRONMENT_PARAMS = tuple(p.name for p in PARAMS if p.group == "environment")


def _type_text(schema: dict[str, Any]) -> str:
    types = schema.get("type")
    types = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    text = " or ".join(types)
    if "enum" in schema:
        text += " (" + ", ".join(map(str, schema["enum"])) + ")"
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "and <=")):
        if key in schema:
            text += f" {sign} {schema[key]}"
    return text + (", empty allowed" if "null" in (schema.get("type") or []) else "")


def markdown_table() -> str:
    """The params as a Markdown table (docs/specs.md lists exactly this)."""
    rows = ["| param | for | type | meaning |", "|---|---|---|---|"]
    for p in PARAMS:
        schema = {"type": "array"} if callable(p.schema) else dict(p.schema)  # lists: their items depend on the suite
        rows.append(f"| `{p.name}` | {p.group} | {_type_text(schema)} | {p.description} |")
    return "\n".join(rows)
