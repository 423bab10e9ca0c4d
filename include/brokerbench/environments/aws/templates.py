"""The aws environment's templates and tuning profiles: ``include/infra/aws``.

:data:`INFRA` is the one place the directory is named; :func:`render` fills a
Jinja2 template from it (undefined values are errors); :func:`profiles` reads
the named broker tunings (``profiles.yaml``).
"""

from __future__ import annotations

from typing import Any

import yaml

from ...resources import data_dir
from ..base import EnvironmentFailure

#: include/infra/aws in the tree (package data ``infra-aws``)
INFRA = data_dir("infra-aws")


def render(template: str, **values: Any) -> str:
    """Render ``include/infra/aws/<template>`` (Jinja2, undefined values are errors)."""
    import jinja2  # Jinja2: only when a template is rendered

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(INFRA)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    return env.get_template(template).render(**values)


def profiles() -> dict[str, Any]:
    return yaml.safe_load((INFRA / "profiles.yaml").read_text())


def profile(name: str, broker: str) -> dict[str, str]:
    all_ = profiles()
    if name not in all_:
        raise EnvironmentFailure(f"tuning profile {name!r} not found; profiles: {', '.join(sorted(all_))}")
    return {str(k): str(v) for k, v in (all_[name].get(broker) or {}).items()}
