"""SpecError: the single exception every spec problem is reported as.

A SpecError names the file (when there is one) and the field (when there is
one), so the message tells a user exactly what to edit::

    include/workloads/foo.yaml: field 'partitionsPerTopic': must be >= 1 (got 0)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .roots import spec_root


class SpecError(ValueError):
    """A spec file (or a run parameter) that cannot be used.

    ``file`` is the path of the offending file as a string (``None`` for run
    parameters), ``field`` the dotted field name in the file's own spelling
    (OMB camelCase for OMB keys), ``None`` when the problem is the whole file.
    """

    def __init__(self, message: str, file: str | os.PathLike[str] | None = None,
                 field: str | None = None):
        self.file = str(file) if file is not None else None
        self.field = field
        self.message = message
        #: every (field, message) when the file has several problems (from_validation_error)
        self.errors: list[tuple[str | None, str]] = [(field, message)]
        parts = []
        if self.file is not None:
            parts.append(display_path(self.file))
        if field:
            parts.append(f"field '{field}'")
        parts.append(message)
        super().__init__(": ".join(parts))


class MissingFileError(SpecError):
    """A referenced spec file does not exist (a SpecError like any other)."""


class FieldValueError(ValueError):
    """Raised inside validators to point at a field other than the one validated.

    Cross-field rules run on the whole model, where pydantic knows no field;
    this carries the field name through pydantic to :func:`from_validation_error`.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def display_path(path: str | os.PathLike[str]) -> str:
    """The path relative to the project directory (the parent of include/) when
    it lies inside it, else as given: keeps messages short and stable."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(spec_root().resolve().parent))
    except (ValueError, OSError):
        return str(p)


def _location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _number(value: Any) -> Any:
    """1.0 -> 1, so bounds read as written in the docs."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _describe(error: dict[str, Any]) -> str:
    """A short, user-facing sentence for one pydantic error."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    messages = {
        "greater_than_equal": "must be >= {ge}",
        "greater_than": "must be > {gt}",
        "less_than_equal": "must be <= {le}",
        "less_than": "must be < {lt}",
        "missing": "is required",
        "extra_forbidden": "unknown key",
        "too_short": "must have at least {min_length} item(s)",
        "too_long": "must have at most {max_length} item(s)",
        "finite_number": "must be a finite number, not nan or infinity",
    }
    if kind in messages:
        text = messages[kind].format(**{k: _number(v) for k, v in ctx.items()})
    elif kind == "literal_error":
        text = f"must be one of {ctx.get('expected')}"
    elif kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error", error["msg"]))
    else:
        text = error["msg"][0].lower() + error["msg"][1:]
    if kind not in ("missing", "extra_forbidden", "value_error") and not isinstance(
            error.get("input"), (dict, list)):
        text += f" (got {error.get('input')!r})"
    return text


def from_validation_error(exc: ValidationError, file: str | os.PathLike[str] | None,
                          prefix: str | None = None) -> SpecError:
    """Convert a pydantic ValidationError into one SpecError that lists every bad field.

    pydantic checks every field and collects what is wrong; the SpecError's
    ``field`` is the first one's, and its message names each of them (one per
    line after the first), so a file with several problems is fixed in one
    go. ``errors`` holds every (field, message). ``prefix`` is put in front of
    the field names (e.g. ``kafka.driver`` when a variant's overrides made a
    driver invalid). Cross-field rules run once the fields are valid, so they
    report after the field errors are fixed.
    """
    found: list[tuple[str | None, str]] = []
    for error in exc.errors():
        field = _location(error["loc"])
        inner = (error.get("ctx") or {}).get("error")
        if isinstance(inner, FieldValueError):
            field = ".".join(p for p in (field, inner.field) if p)
        if prefix:
            field = f"{prefix}.{field}" if field else prefix
        found.append((field or None, _describe(dict(error))))
    (first, message), rest = found[0], found[1:]
    if rest:
        message += "".join(f"\n  and field '{f}': {m}" if f else f"\n  and {m}" for f, m in rest)
    err = SpecError(message, file=file, field=first)
    err.errors = found
    return err
