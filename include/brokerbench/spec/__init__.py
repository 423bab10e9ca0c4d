"""The spec layer: the files a user writes (workloads, drivers, variants, suites),
their models and validation, and the plan a suite resolves into.

See docs/specs.md for every field, unit and default.
"""

from .common import SUPPORTED_BROKERS, list_names
from .driver import DriverSpec, PulsarClient, PulsarConsumer, PulsarPersistence, PulsarProducer, load_driver
from .errors import SpecError
from .plan import Plan, PlanItem, RunParams, build_plan, conf_with_files
from .roots import spec_root
from .suite import Suite, load_suite
from .variant import BrokerVariant, Variant, apply_variant, load_variant
from .workload import Workload, load_workload

#: The include/ directory at import time (``BROKERBENCH_SPEC_ROOT`` overrides it).
SPEC_ROOT = spec_root()


def list_workloads() -> list[str]:
    """Names of the workloads under SPEC_ROOT/workloads, sorted."""
    return list_names("workloads")


def list_drivers() -> list[str]:
    """Names of the drivers under SPEC_ROOT/drivers, sorted."""
    return list_names("drivers")


def list_variants() -> list[str]:
    """Names of the variants under SPEC_ROOT/variants, sorted."""
    return list_names("variants")


def list_suites() -> list[str]:
    """Names of the suites under SPEC_ROOT/suites, sorted."""
    return list_names("suites")


__all__ = [
    "SPEC_ROOT", "SUPPORTED_BROKERS", "SpecError",
    "Workload", "load_workload", "list_workloads",
    "DriverSpec", "PulsarClient", "PulsarPersistence", "PulsarProducer", "PulsarConsumer",
    "load_driver", "list_drivers",
    "Variant", "BrokerVariant", "load_variant", "apply_variant", "list_variants",
    "Suite", "load_suite", "list_suites",
    "Plan", "PlanItem", "RunParams", "build_plan", "conf_with_files",
]
