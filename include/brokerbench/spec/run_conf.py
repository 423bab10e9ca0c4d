"""The params a person gives a run (``--conf`` and the command line's flags), checked before Airflow starts.

Airflow checks a DAG run's params against their JSON schema only once it has parsed the DAG (tens of seconds
on a small machine), and the plan's own checks run in the ``validate`` task after that. This module makes the
same checks in well under a second, so the command line can refuse a bad param at once:

* every key is a known param (an unknown one is named with the closest known names: "did you mean");
* no number is infinite or NaN (JSON's ``Infinity`` / ``NaN`` are accepted by Python's parser);
* a list param may be written ``"kafka,rabbitmq"`` (as docs/specs.md promises): it is turned into a list,
  which is what Airflow's trigger form and schema take;
* each value passes its param's JSON schema (types, choices and bounds of :mod:`brokerbench.spec.params`);
* the plan params resolve into a plan (brokers of the suite, workloads and variants that exist).

The ``validate`` task keeps checking the same things for runs started elsewhere (the UI, the REST API).
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Iterable

import jsonschema

from .errors import SpecError
from .params import ANALYSIS_PARAMS, ENVIRONMENT_PARAMS, PARAMS
from .plan import Plan, build_plan
from .suite import Suite

#: params whose value is a list (the plan's list params)
LIST_PARAMS = ("brokers", "workloads", "variants", "workload_files", "driver_files")


def check_param_names(names: Iterable[str]) -> None:
    """SpecError naming the first unknown param, with the closest known names."""
    known = [p.name for p in PARAMS]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise SpecError(f"unknown param {name!r}{hint} (params: {', '.join(known)})", field=name)


def _non_finite(value: Any, where: str) -> str | None:
    """The dotted path of the first infinite or NaN number in ``value``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        return next((p for k, v in value.items() if (p := _non_finite(v, f"{where}.{k}"))), None)
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := _non_finite(v, f"{where}[{i}]"))), None)
    return None


def normalize_lists(conf: dict[str, Any]) -> dict[str, Any]:
    """``{"brokers": "kafka, rabbitmq"}`` -> ``{"brokers": ["kafka", "rabbitmq"]}`` (other keys unchanged)."""
    out = dict(conf)
    for name in LIST_PARAMS:
        if isinstance(out.get(name), str):
            out[name] = [part.strip() for part in out[name].split(",") if part.strip()]
    return out


def check_names_and_numbers(conf: dict[str, Any]) -> None:
    """Unknown params (with "did you mean") and non-finite numbers: SpecError naming the param."""
    check_param_names(conf)
    for name, value in conf.items():
        where = _non_finite(value, name)
        if where:
            at = "" if where == name else f" (at {where})"
            raise SpecError(f"every number must be finite, not {value if where == name else 'inf or nan'}{at}",
                            field=name)


def check_conf(suite: Suite, conf: dict[str, Any]) -> tuple[dict[str, Any], Plan]:
    """The conf as Airflow should get it (lists normalized), and the plan it resolves to; SpecError (field =
    the param) for the first problem."""
    check_names_and_numbers(conf)
    conf = normalize_lists(conf)
    schemas = {p.name: p.schema_for(suite) for p in PARAMS}
    for name, value in conf.items():
        if value is None or value == "":
            continue
        try:
            jsonschema.validate(value, schemas[name])
        except jsonschema.ValidationError as e:
            inner = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
            raise SpecError(e.message + (f" (at {name}{inner})" if inner else ""), field=name) from None
    plan_params = {k: v for k, v in conf.items() if k not in ANALYSIS_PARAMS + ENVIRONMENT_PARAMS}
    return conf, build_plan(suite, plan_params)
