"""The Jinja2 environment of the HTML report and the comparison (templates in ``report/templates``).

Templates ship as package data and are loaded through :mod:`importlib.resources`
(``jinja2.PackageLoader``), so they are found in a wheel as in the tree.
Autoescape is on for every template: text from summaries, provenance records
and the plan is escaped wherever it is output. ``finalize`` prints ``None`` as
an empty string and spells the entities as :func:`html.escape` does (``&#x27;``,
``&quot;``), as the reports always have.
"""

from __future__ import annotations

import html
import math
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup

from brokerbench.regression import split_status

from .data import column_label, column_unit


def format_value(value: Any) -> str:
    """A cell value as display text (not yet escaped)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value == 0:
            return "0"
        if value.is_integer() and abs(value) >= 1000:
            return f"{value:,.0f}"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.1f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        if magnitude >= 0.001:
            return f"{value:.3f}"
        return f"{value:.2e}"
    return str(value)


def is_numeric(value: Any) -> bool:
    """A number shown right-aligned (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finalize(value: Any) -> Any:
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("brokerbench.report", "templates"),
                             autoescape=True, finalize=_finalize, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals.update(fmt=format_value, fmt_list=lambda values: ", ".join(format_value(v) for v in values),
                       column_label=column_label, column_unit=column_unit, split_status=split_status)
    env.tests["numeric"] = is_numeric
    env.tests["list"] = lambda value: isinstance(value, list)
    return env


def render(template: str, **context: Any) -> str:
    """Render one template of ``report/templates`` with the given context."""
    return environment().get_template(template).render(**context)
