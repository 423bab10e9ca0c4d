"""The teardown task: stop everything the run started on its environment and record what was stopped."""

from __future__ import annotations

from typing import Any

from brokerbench.pipeline.context import RunContext, log

# ANALYSIS_PARAMS: read by the analysis steps only; ENVIRONMENT_PARAMS: refine the plan's environment_settings


def teardown(ctx: RunContext) -> dict[str, Any]:
    record = ctx.environment().teardown()
    try:
        ctx.write_json("provenance/teardown.json", record)
    except OSError as e:  # the results location itself may be the problem
        log.warning("could not record teardown in %s: %s", ctx.run_dir, e)
    log.info("teardown: %s", record)
    return record
