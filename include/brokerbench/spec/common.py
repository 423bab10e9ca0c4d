"""Where spec files live, how they are found and read, and small shared helpers."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from .bounds import non_finite
from .errors import MissingFileError, SpecError
from .roots import spec_root

#: The brokers brokerbench knows, in the order they are listed to users.
SUPPORTED_BROKERS = ("kafka", "pulsar", "rabbitmq")


_PATH_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def path_safe(text: str) -> str:
    """``text`` with every run of characters unsafe in a path replaced by '-'."""
    return _PATH_UNSAFE.sub("-", text).strip("-") or "unnamed"


def is_path(name_or_path: str | os.PathLike[str]) -> bool:
    """True when the argument is a path rather than a bare spec name."""
    s = str(name_or_path)
    return isinstance(name_or_path, Path) or "/" in s or os.sep in s or s.endswith((".yaml", ".yml"))


def resolve(kind: str, name_or_path: str | os.PathLike[str]) -> Path:
    """A bare name resolves to SPEC_ROOT/<kind>/<name>.yaml; a path is used as is."""
    if is_path(name_or_path):
        return Path(name_or_path)
    return spec_root() / kind / f"{name_or_path}.yaml"


def list_names(kind: str) -> list[str]:
    """Sorted names of the spec files of one kind under SPEC_ROOT."""
    folder = spec_root() / kind
    if not folder.is_dir():
        return []
    return sorted({p.stem for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()})


def read_yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; any problem is a SpecError naming the file.

    A non-finite number anywhere in the file (``.nan``, ``.inf``) is refused here, naming its
    field, so no kind of spec file (nor a broker setting the models do not know) carries one.
    """
    if not path.is_file():
        raise MissingFileError("file not found", file=path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SpecError(f"invalid YAML{where}: {problem}", file=path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read file: {e}", file=path) from None
    if data is None:
        raise SpecError("file is empty", file=path)
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping of keys at the top level, found {type(data).__name__}",
                        file=path)
    found = [(field, f"must be a finite number, not nan or infinity (got {value!r})")
             for field, value in non_finite(data)]
    if found:
        (field, message), rest = found[0], found[1:]
        message += "".join(f"\n  and field '{f}': {m}" for f, m in rest)
        err = SpecError(message, file=path, field=field)
        err.errors = list(found)
        raise err
    return data


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A new dict: mappings merge key by key, anything else in ``overrides`` replaces."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
