"""How a run ended, in one word a person or a script cannot misread.

Every run ends as exactly one of:

==================  =========  =====================================================================
outcome             exit code  meaning
==================  =========  =====================================================================
``no regression``   0          at least one track was judged against its baseline; none regressed
``failed``          1          a step failed or the run was stopped (results measured are kept)
``regression``      3          at least one metric regressed against its track's baseline
``not judged``      4          nothing compared a valid figure with a baseline: no valid
                               measurement, or no baseline yet (too few earlier runs)
==================  =========  =====================================================================

(Exit code 2 is the command line's own: a refused argument or param, before any run starts; 130: the
command line was interrupted.) The outcome is written to ``summary/outcome.json`` by the run's last task
(``run_outcome``, with the code above as ``exit_code``), stated in the report's headline and in the last lines
of the log. ``brokerbench bench`` (and ``make bench``) exits with :func:`exit_code_for`: the code above,
except that ``not judged`` exits 0 - a first run has no baseline, which is no error of the run - unless
``--fail-on not-judged`` asks for the strict codes (CI pipelines, scheduled gates).

A failed step wins over every verdict: a run whose measurement of one broker failed is ``failed`` even
when another broker regressed (the regressions are named in its reason). The regression gate's own failure
is not a failed step: it fails *because* of a regression.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from brokerbench.metrics import JUDGED, Judgement

#: the file the run's last task writes, under the run directory
OUTCOME_FILE = Path("summary") / "outcome.json"

#: tasks whose failure is the regression itself, not a failed step
GATE_TASK_SUFFIX = "regression_gate"


class Outcome(StrEnum):
    NO_REGRESSION = "no regression"
    FAILED = "failed"
    REGRESSION = "regression"
    NOT_JUDGED = "not judged"


#: the strict exit code of each outcome (``brokerbench bench --fail-on not-judged``; outcome.json's ``exit_code``;
#: 2: refused argument, 130: interrupted)
EXIT_CODES: dict[Outcome, int] = {Outcome.NO_REGRESSION: 0, Outcome.FAILED: 1, Outcome.REGRESSION: 3,
                                  Outcome.NOT_JUDGED: 4}


#: what ``brokerbench bench --fail-on`` takes: the least outcome that ends the command line non-zero besides
#: ``failed`` (always 1). ``regression`` (the default): 3 for a regression, 0 for not judged;
#: ``not-judged``: the strict codes of :data:`EXIT_CODES` (not judged: 4).
FAIL_ON = ("regression", "not-judged")


def exit_code_for(outcome: Outcome, fail_on: str = "regression") -> int:
    """The command line's exit code of ``outcome``: :data:`EXIT_CODES`, with ``not judged`` 0 unless
    ``fail_on`` is ``not-judged``."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)} (got {fail_on!r})")
    if outcome == Outcome.NOT_JUDGED and fail_on != "not-judged":
        return 0
    return EXIT_CODES[outcome]


def _track(v: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(v.get(k)) for k in ("workload", "broker", "variant", "driver"))


@dataclass(frozen=True)
class RunOutcome:
    """The outcome with its counts: ``tracks_judged`` of ``tracks`` (workload x broker x variant x driver)
    compared at least one metric with a baseline; ``regressed`` metrics in ``tracks_regressed`` tracks."""

    outcome: Outcome
    reason: str
    tracks: int = 0
    tracks_judged: int = 0
    regressed: int = 0
    tracks_regressed: int = 0
    improved: int = 0
    failed_tasks: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    @property
    def headline(self) -> str:
        """One line, the outcome first: ``NOT JUDGED: no valid measurement (16 of 16 tracks invalid)``."""
        return f"{self.outcome.upper()}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": str(self.outcome), "exit_code": self.exit_code,
                "headline": self.headline}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RunOutcome:
        names = {f for f in cls.__dataclass_fields__}
        kept = {k: v for k, v in doc.items() if k in names}
        return cls(**{**kept, "outcome": Outcome(doc["outcome"])})


def _not_judged_reason(verdicts: Sequence[Mapping[str, Any]], tracks: int) -> str:
    """Why no track was judged: no valid measurement, no baseline yet, or both."""
    by_track: dict[tuple[str, ...], set[str]] = {}
    for v in verdicts:
        by_track.setdefault(_track(v), set()).add(str(v.get("verdict")))
    no_baseline = sum(1 for vs in by_track.values() if Judgement.INSUFFICIENT in vs)
    invalid = sum(1 for vs in by_track.values()
                  if any(s.startswith(Judgement.NOT_JUDGED) or s == Judgement.NO_DATA for s in vs)
                  and Judgement.INSUFFICIENT not in vs)
    if not verdicts:
        return "no valid measurement (no verdicts)"
    if no_baseline and not invalid:
        return f"no baseline yet ({no_baseline} of {tracks} track(s) have too few earlier valid runs)"
    if invalid and not no_baseline:
        return f"no valid measurement ({invalid} of {tracks} track(s) invalid, partial or without data)"
    return (f"no valid measurement with a baseline ({invalid} of {tracks} track(s) invalid, partial or without "
            f"data; {no_baseline} without a baseline yet)")


def outcome_of(verdicts: Iterable[Mapping[str, Any]] | None, failed_tasks: Sequence[str] = (),
               has_measurements: bool = True, sweep_only: bool = False) -> RunOutcome:
    """The outcome of a run from its verdicts (regression.json's ``verdicts``; None when none were written)
    and the tasks that failed (``failed`` or ``upstream_failed``). ``sweep_only``: the run measured throughput
    sweeps and no measured phase (summary/sweep.csv without summary.csv): never judged."""
    vs = list(verdicts or [])
    failed = sorted(t for t in failed_tasks if not t.endswith(GATE_TASK_SUFFIX))
    tracks = {_track(v) for v in vs}
    regressed = [v for v in vs if v.get("verdict") == Judgement.REGRESSED]
    judged = {_track(v) for v in vs if v.get("verdict") in JUDGED}
    n_regressed_tracks = len({_track(v) for v in regressed})
    base = RunOutcome(Outcome.NOT_JUDGED, "", tracks=len(tracks), tracks_judged=len(judged),
                      regressed=len(regressed), tracks_regressed=n_regressed_tracks,
                      improved=sum(1 for v in vs if v.get("verdict") == Judgement.IMPROVED))
    if failed:
        also = f"; also {len(regressed)} metric(s) regressed in {n_regressed_tracks} track(s)" if regressed else ""
        return replace(base, outcome=Outcome.FAILED, failed_tasks=failed,
                       reason=f"{len(failed)} task(s) failed: {', '.join(failed)}{also}")
    if regressed:
        return replace(base, outcome=Outcome.REGRESSION,
                       reason=f"{len(regressed)} metric(s) regressed in {n_regressed_tracks} of {len(tracks)} "
                              f"track(s) ({len(judged)} judged)")
    if judged:
        improved = f", {base.improved} metric(s) improved" if base.improved else ""
        return replace(base, outcome=Outcome.NO_REGRESSION,
                       reason=f"{len(judged)} of {len(tracks)} track(s) judged, none regressed{improved}")
    if not has_measurements:
        return replace(base, reason="no measurements (no measured phase wrote a result)")
    if verdicts is None and sweep_only:
        return replace(base, reason="throughput sweeps only: a sweep is not judged against the history (its steps "
                                    "are in summary/sweep.csv)")
    if verdicts is None:
        return replace(base, reason="no verdicts (the history or verdicts step did not write them)")
    return replace(base, reason=_not_judged_reason(vs, len(tracks)))


def write_outcome(run_dir: str | Path, outcome: RunOutcome) -> Path:
    path = Path(run_dir) / OUTCOME_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcome.to_dict(), indent=2) + "\n")
    return path


def read_outcome(run_dir: str | Path) -> RunOutcome | None:
    """The run's outcome as its last task wrote it; None when it was not written (the run did not end)."""
    try:
        return RunOutcome.from_dict(json.loads((Path(run_dir) / OUTCOME_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
