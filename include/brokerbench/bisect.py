"""Bisection across broker releases (``brokerbench bisect``, docs/cli.md "bisect"): which release between a good
and a bad one changed a metric.

* :func:`fetch_releases` lists a broker's final releases (release numbers only: no ``-rc1``, ``-M1``,
  ``-incubating``) from Maven Central's ``maven-metadata.xml`` of the artifact the local environment deploys
  (``environments.machine.distributions.ARTIFACTS``), in version order (:func:`brokerbench.changepoint.version_key`).
  The repository's base URL is ``BROKERBENCH_MAVEN_MIRROR`` when set (the mirror the broker resolution uses), else
  Maven Central. RabbitMQ is refused: its versions come from the Debian package.
* :func:`releases_between` is the inclusive range from ``--good`` to ``--bad``; a version that is not a release,
  or a ``--good`` not older than ``--bad``, is :class:`Refused` naming the argument and the close releases.
* :func:`bisect` runs the search with a step runner ``(version_a, version_b) -> StepResult``: first the end points
  (good against bad must show the change: B ``regressed`` on the metric, else "no regression between good and bad
  at this power"), then the binary search, each step side A = the last release known without the change and side
  B = the candidate: ``regressed`` -> the change is at or before the candidate, ``unchanged`` / ``improved`` ->
  after it. A step not judged is repeated once; not judged again, the bisection stops undecided.
* :class:`BenchSteps` is the step runner of the command line: one A/B run (params ``broker_versions`` for side A,
  ``compare_with.broker_versions`` for side B, one broker, one variant) through a ``bench(conf) -> (exit code,
  run dir)`` function, judged from the run's ``summary/regression.json`` (rule ``A/B``).
* :func:`resume` replays the steps measured so far and names the next pair: the manual DAG (dag_factory
  ``build_bisect_dag``) runs one step per task with it.
* :func:`write_record` writes ``bisect.json`` and a self-contained ``bisect.html`` with every step's table.
"""

from __future__ import annotations

import datetime as dt
import difflib
import html
import json
import math
import os
import re
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from brokerbench import util
from brokerbench.changepoint import version_key
from brokerbench.metrics import METRICS, Judgement, unit_of

#: the environment variable naming the Maven repository's base URL (the same one the broker resolution uses)
MAVEN_URL_ENV = "BROKERBENCH_MAVEN_MIRROR"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: a final release: release numbers only (3.7.0, 4.1.1); never 4.0.0-rc1, 5.0.0-M1, 2.1.0-incubating
FINAL_RELEASE = re.compile(r"\d+(?:\.\d+)+")
#: brokers without a release list to bisect: why
NOT_BISECTABLE = {
    "rabbitmq": "RabbitMQ's versions come from its Debian package (the local environment runs the installed "
                "rabbitmq-server), not from Maven Central: there is no list of releases to deploy one by one",
}
#: the bisection's exit codes: found or no regression 0, undecided or a failed step 1, refused 2, interrupted 130
EXIT_OK, EXIT_UNDECIDED, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 1, 2, 130


class Refused(ValueError):
    """An argument the bisection refuses (exit 2): the message names the argument."""


class ReleasesUnavailable(RuntimeError):
    """The release list could not be read (the network, the repository): the message names the URL."""


def flag(name: str) -> str:
    """How the command line names an argument in a refusal (``--good``); the manual DAG names params."""
    return f"--{name}"


# -- the releases ----------------------------------------------------------------------------------------------


def maven_base_url() -> str:
    """``BROKERBENCH_MAVEN_MIRROR`` when set, else Maven Central; no trailing slash."""
    return (os.environ.get(MAVEN_URL_ENV) or MAVEN_CENTRAL).rstrip("/")


def metadata_url(broker: str, base: str | None = None, label: Callable[[str], str] = flag) -> str:
    """The ``maven-metadata.xml`` of the broker's artifact (kafka: org.apache.kafka:kafka_2.13, pulsar:
    org.apache.pulsar:pulsar-broker); Refused for a broker without one."""
    from brokerbench.environments.machine.distributions import ARTIFACTS

    if broker in NOT_BISECTABLE:
        raise Refused(f"{label('broker')} {broker}: {NOT_BISECTABLE[broker]}")
    if broker not in ARTIFACTS:
        raise Refused(f"{label('broker')} {broker!r} is not a broker with releases on Maven Central "
                      f"({', '.join(sorted(ARTIFACTS))})")
    group, artifact = ARTIFACTS[broker]
    return f"{base.rstrip('/') if base else maven_base_url()}/{group.replace('.', '/')}/{artifact}/maven-metadata.xml"


def parse_metadata(text: str) -> list[str]:
    """The final releases of a ``maven-metadata.xml`` (its ``versioning/versions/version``), in version order."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ReleasesUnavailable(f"the Maven metadata is not XML: {e}") from None
    versions = {(v.text or "").strip() for v in root.iterfind("./versioning/versions/version")}
    return sorted((v for v in versions if FINAL_RELEASE.fullmatch(v)), key=version_key)


def fetch_releases(broker: str, base: str | None = None, timeout: float = 30.0) -> list[str]:
    """The broker's final releases on Maven Central (or ``base``, or ``BROKERBENCH_MAVEN_MIRROR``)."""
    url = metadata_url(broker, base)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - an http(s) URL built above
            text = r.read().decode("utf-8")
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ReleasesUnavailable(f"could not read {url}: {getattr(e, 'reason', None) or e}") from None
    releases = parse_metadata(text)
    if not releases:
        raise ReleasesUnavailable(f"{url} lists no final release")
    return releases


def check_metric(metric: str, label: Callable[[str], str] = flag) -> None:
    """Refused unless ``metric`` is one of the judged metrics (brokerbench.metrics.METRICS)."""
    names = [m.column for m in METRICS]
    if metric in names:
        return
    close = difflib.get_close_matches(metric, names, n=2, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise Refused(f"{label('metric')} {metric!r} is not a judged metric{hint} (metrics: {', '.join(names)})")


def close_releases(value: str, releases: Sequence[str], n: int = 3) -> list[str]:
    """The releases next to ``value`` in version order and those spelt alike, in version order."""
    key = version_key(value)
    i = sum(1 for r in releases if version_key(r) < key)  # where ``value`` would be in version order
    near = set(releases[max(i - 1, 0):i + 1]) | set(difflib.get_close_matches(value, list(releases), n=n, cutoff=0.6))
    return sorted(near, key=version_key)


def releases_between(releases: Sequence[str], good: str, bad: str, broker: str = "",
                     label: Callable[[str], str] = flag) -> list[str]:
    """The releases from ``good`` to ``bad``, both included, in version order; Refused naming the argument."""
    for flag_name, value in ((label("good"), good), (label("bad"), bad)):
        if value not in releases:
            close = close_releases(value, releases)
            hint = f"; close releases: {', '.join(close)}" if close else ""
            raise Refused(f"{flag_name} {value!r} is not a final {broker + ' ' if broker else ''}release on Maven "
                          f"Central{hint} ({len(releases)} releases: {releases[0]} to {releases[-1]})")
    if version_key(good) >= version_key(bad):
        raise Refused(f"{label('good')} {good} is not older than {label('bad')} {bad}: give the release without "
                      f"the change as {label('good')} and a later one with it as {label('bad')}")
    i, j = releases.index(good), releases.index(bad)
    return list(releases[i:j + 1])


#: the params each step's A/B run sets itself (the conf given for every step may not)
STEP_PARAMS = ("brokers", "variants", "workloads", "broker_versions", "compare_with")


@dataclass
class BisectPlan:
    """What a bisection measures: the broker's releases from ``good`` to ``bad`` (both included, in version order),
    the metric judged, and each step's A/B run (the suite, its one variant, a workload or all of the suite's, the
    other params in ``conf``). Built by :func:`plan` from the command line's arguments or the manual DAG's params."""

    broker: str
    good: str
    bad: str
    metric: str
    suite: str
    variant: str
    workload: str | None
    conf: dict[str, Any]
    releases: list[str]
    maven_metadata: str

    def params(self) -> dict[str, Any]:
        """What the record (bisect.json, bisect.html) lists as the bisection's parameters."""
        return {"broker": self.broker, "good": self.good, "bad": self.bad, "metric": self.metric,
                "suite": self.suite, "variant": self.variant, "workload": self.workload, "conf": self.conf,
                "maven_metadata": self.maven_metadata}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BisectPlan:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})

    def step_runner(self, bench: Callable[[dict[str, Any]], tuple[int, Path | None]]) -> BenchSteps:
        """Each step one A/B run through ``bench(conf) -> (exit code, run dir or None)``."""
        return BenchSteps(bench, self.broker, self.metric, self.variant, self.workload, self.conf)

    def record_dir(self, results_root: str | Path, when: dt.datetime | None = None) -> Path:
        return record_dir(Path(results_root), self.broker, self.good, self.bad, when)


def plan(broker: str, good: str, bad: str, metric: str, suite: str = "smoke", variant: str | None = None,
         workload: str | None = None, conf: Mapping[str, Any] | None = None, label: Callable[[str], str] = flag,
         fetch: Callable[[str], list[str]] = fetch_releases) -> BisectPlan:
    """Check a bisection's arguments and list its releases (``fetch``: Maven Central's metadata). Refused naming the
    argument (``label``: ``--good`` on the command line, ``params.good`` in the DAG); ReleasesUnavailable when the
    release list cannot be read. ``conf`` gets ``trials`` = the A/B default when it has none."""
    from brokerbench import spec
    from brokerbench.spec.params import AB_DEFAULT_TRIALS

    conf = dict(conf or {})
    taken = [k for k in STEP_PARAMS if k in conf]
    if taken:
        raise Refused(f"{label('conf')}'s {', '.join(repr(k) for k in taken)}: bisect sets them itself "
                      f"({label('broker')}, {label('variant')}, {label('workload')} and each step's releases)")
    conf.setdefault("trials", AB_DEFAULT_TRIALS)  # per side; said, not left to the suite's (often 1 trial)
    check_metric(metric, label)
    url = metadata_url(broker, label=label)
    try:
        the_suite = spec.load_suite(suite)
    except spec.SpecError as e:
        raise Refused(f"{label('suite')}: {e}") from None
    if broker not in the_suite.brokers:
        raise Refused(f"{label('suite')} {the_suite.name} does not run {broker} (its brokers: "
                      f"{', '.join(the_suite.brokers)})")
    variant = variant or the_suite.variants[0]
    if variant not in spec.list_variants():
        raise Refused(f"{label('variant')} {variant!r} is not a variant (variants: {', '.join(spec.list_variants())})")
    if workload and workload not in the_suite.workloads:
        raise Refused(f"{label('workload')} {workload!r} is not a workload of suite {the_suite.name} "
                      f"(its workloads: {', '.join(the_suite.workloads)})")
    span = releases_between(fetch(broker), good, bad, broker, label)
    return BisectPlan(broker=broker, good=good, bad=bad, metric=metric, suite=the_suite.name, variant=variant,
                      workload=workload or None, conf=conf, releases=span, maven_metadata=url)


# -- the search ------------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    """What one A/B step found on the metric: its verdict (regressed = B slower; improved; unchanged; ``not
    judged: ...``), the sides' medians, the ratio B/A and its interval, and where the run is."""

    verdict: str
    median_a: float | None = None
    median_b: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    run_dir: str | None = None
    evidence: str = ""
    #: the run's exit code (``brokerbench bench``'s), None for a step that ran no run
    exit_code: int | None = None
    #: a regressed or improved step: what moved with it on the brokers and hosts (brokerbench.suspects' sentence)
    suspects: str = ""


@dataclass
class Step:
    """One step of a bisection: its number, what it asked (the end points or a candidate), the sides' versions and
    what it found."""

    step: int
    role: str  # "end points", "search" or "confirm" (the two releases the search ended on, measured together)
    attempt: int  # 1, or 2 for the repeat of a step not judged
    version_a: str
    version_b: str
    result: StepResult

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: a step runner: (side A's version, side B's version) -> what the step found
StepRunner = Callable[[str, str], StepResult]


@dataclass
class Bisection:
    """A bisection's result: ``status`` found / no regression / not in one release / undecided / refused /
    interrupted, the first
    release with the change and the last without (found), every step, the message and the exit code."""

    broker: str
    metric: str
    releases: list[str]
    steps: list[Step] = field(default_factory=list)
    status: str = "running"
    first_bad: str | None = None
    last_good: str | None = None
    message: str = ""
    exit_code: int = EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {"broker": self.broker, "metric": self.metric, "releases": self.releases, "status": self.status,
                "first_with_change": self.first_bad, "last_without_change": self.last_good,
                "message": self.message, "exit_code": self.exit_code, "steps": [s.to_dict() for s in self.steps]}


def kind_of(verdict: str) -> str:
    """``bad`` (B regressed: the change is at or before B), ``good`` (unchanged or improved) or ``not judged``."""
    if verdict == Judgement.REGRESSED:
        return "bad"
    if verdict in (Judgement.UNCHANGED, Judgement.IMPROVED):
        return "good"
    return "not judged"


def max_steps(n_releases: int) -> int:
    """Runs a bisection over ``n_releases`` (both end points included) takes at most when every step is judged: the
    end points, ceil(log2(releases - 1)) searching steps, and the two releases it ends on measured against each
    other when no step did (:func:`bisect`)."""
    return 2 + math.ceil(math.log2(n_releases - 1)) if n_releases > 2 else 1


def planned_steps(releases: Sequence[str]) -> list[str]:
    """The first steps of a bisection over ``releases`` (``--dry-run``): the end points, the first candidate, and
    the second on either answer."""
    good, bad = releases[0], releases[-1]
    lines = [f"step 1: A {good} vs B {bad} (the end points: B must show the change)"]
    lo, hi = 0, len(releases) - 1
    if hi - lo <= 1:
        lines.append(f"then: nothing between them; with the change, {bad} is the first release with it")
        return lines
    mid = (lo + hi) // 2
    lines.append(f"step 2: A {releases[lo]} vs B {releases[mid]}")
    after = []
    if mid - lo > 1:
        after.append(f"if {releases[mid]} regressed: A {releases[lo]} vs B {releases[(lo + mid) // 2]}")
    else:
        after.append(f"if {releases[mid]} regressed: done ({releases[mid]} is the first with the change)")
    if hi - mid > 1:
        after.append(f"else: A {releases[mid]} vs B {releases[(mid + hi) // 2]}")
    else:
        after.append(f"else: A {releases[mid]} vs B {releases[hi]} (the two the search ends on, measured together)")
    lines.append("step 3: " + "; ".join(after))
    lines.append(f"at most {max_steps(len(releases))} A/B run(s) when every step is judged (a step not judged is "
                 f"repeated once)")
    return lines


def bisect(releases: Sequence[str], runner: StepRunner, broker: str = "", metric: str = "",
           on_step: Callable[[Step, Bisection], None] | None = None) -> Bisection:
    """Bisect ``releases`` (the good end point first, the bad one last) with ``runner``; ``on_step`` is called
    after every step (the table so far, the record)."""
    releases = list(releases)
    if len(releases) < 2:
        raise Refused("a bisection needs two releases: --good and a later --bad")
    b = Bisection(broker=broker, metric=metric, releases=releases)

    def judged(a: str, candidate: str, role: str) -> str | None:
        """The step's kind (bad / good), repeating it once when not judged; None when it stopped the search."""
        number = len({s.step for s in b.steps}) + 1
        for attempt in (1, 2):
            r = runner(a, candidate)
            step = Step(number, role, attempt, a, candidate, r)
            b.steps.append(step)
            stop = _stopped(r)
            if stop:
                b.status, b.exit_code = stop
                b.message = (f"step {step.step} (A {a} vs B {candidate}) was "
                             f"{'refused' if b.exit_code == EXIT_REFUSED else 'interrupted'}: {r.verdict}")
            if on_step:
                on_step(step, b)
            if stop:
                return None
            kind = kind_of(r.verdict)
            if kind != "not judged":
                return kind
        b.status, b.exit_code = "undecided", EXIT_UNDECIDED
        b.message = (f"could not decide: A {a} vs B {candidate} was not judged twice ({r.verdict}); the table "
                     f"above is what is known")
        return None

    lo, hi = 0, len(releases) - 1
    ends = judged(releases[lo], releases[hi], "end points")
    if ends is None:
        return b
    if ends == "good":
        b.status, b.exit_code = "no regression", EXIT_OK
        b.message = (f"no regression between good and bad at this power: {releases[hi]} against {releases[lo]} "
                     f"on {metric or 'the metric'}: {b.steps[-1].result.verdict}")
        return b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        kind = judged(releases[lo], releases[mid], "search")
        if kind is None:
            return b
        if kind == "bad":
            hi = mid
        else:
            lo = mid
    # the search ends on two neighbouring releases; when the steps after the last 'regressed' one only moved side A
    # up, those two were never measured against each other, and a change spread over several releases (or end
    # points that differed by chance) would be put on the last release by elimination: measure the pair itself
    if not any((s.version_a, s.version_b) == (releases[lo], releases[hi]) and kind_of(s.result.verdict) == "bad"
               for s in b.steps):
        kind = judged(releases[lo], releases[hi], "confirm")
        if kind is None:
            return b
        if kind == "good":
            ends_step = b.steps[0].result
            b.status, b.exit_code = "not in one release", EXIT_UNDECIDED
            b.message = (f"not in one release at this power: the end points differed ({releases[-1]} against "
                         f"{releases[0]}: {ratio_text(ends_step)}, {ends_step.verdict}), but no step between two "
                         f"releases found the change, {releases[hi]} against {releases[lo]} neither "
                         f"({b.steps[-1].result.verdict}): it may be spread over several releases, or the end "
                         f"points' difference a false positive; the table above is what is known")
            return b
    b.status, b.exit_code = "found", EXIT_OK
    b.first_bad, b.last_good = releases[hi], releases[lo]
    b.message = f"first release with the change: {releases[hi]} (last without: {releases[lo]})"
    found = next((s for s in reversed(b.steps) if (s.version_a, s.version_b) == (releases[lo], releases[hi])
                  and kind_of(s.result.verdict) == "bad"), None) or next(
        (s for s in reversed(b.steps) if s.version_b == releases[hi] and kind_of(s.result.verdict) == "bad"), None)
    if found is not None and found.result.suspects:
        b.message += f"; step {found.step} ({found.version_a} vs {found.version_b}): {found.result.suspects}"
    return b


class _Pending(Exception):
    """Raised by :func:`resume`'s runner when the recorded steps are used up: the next pair to measure."""

    def __init__(self, version_a: str, version_b: str):
        super().__init__(version_a, version_b)
        self.pair = (version_a, version_b)


def resume(releases: Sequence[str], recorded: Sequence[tuple[str, str, StepResult]], broker: str = "",
           metric: str = "") -> tuple[Bisection, tuple[str, str] | None]:
    """Replays the steps measured so far (``(version_a, version_b, result)`` in the order they ran) through
    :func:`bisect`: the bisection so far and the next pair to measure, or None when it has ended. One step per call
    is what the manual DAG (brokerbench_bisect) runs in each of its step tasks; a recorded step whose pair is not
    the one the search asks for is refused (the record is not of this bisection)."""
    queue = list(recorded)
    seen: list[Bisection] = []

    def runner(version_a: str, version_b: str) -> StepResult:
        if not queue:
            raise _Pending(version_a, version_b)
        a, b, result = queue.pop(0)
        if (a, b) != (version_a, version_b):
            raise ValueError(f"recorded step A {a} vs B {b} is not the one this bisection asks for next "
                             f"(A {version_a} vs B {version_b})")
        return result

    try:
        done = bisect(releases, runner, broker, metric, on_step=lambda _s, b: seen.append(b) if not seen else None)
    except _Pending as p:
        return (seen[0] if seen else Bisection(broker=broker, metric=metric, releases=list(releases))), p.pair
    return done, None


def _stopped(r: StepResult) -> tuple[str, int] | None:
    if r.exit_code == EXIT_REFUSED:
        return "refused", EXIT_REFUSED
    if r.exit_code == EXIT_INTERRUPTED:
        return "interrupted", EXIT_INTERRUPTED
    return None


# -- one step as an A/B run --------------------------------------------------------------------------------------


#: which row decides a step when several workloads were judged: a regression first, then one not judged
_PRECEDENCE = {"bad": 0, "not judged": 1, "good": 2}


def step_from_verdicts(doc: Mapping[str, Any] | None, broker: str, metric: str, variant: str | None = None,
                       workload: str | None = None) -> StepResult:
    """The step's result from a run's regression.json: its A/B verdict (rule ``A/B``) of ``metric`` on ``broker``
    (and ``variant`` / ``workload`` when given); several workloads: the one that regressed, else one not judged."""
    rows = [v for v in (doc or {}).get("verdicts") or []
            if v.get("rule") == "A/B" and v.get("broker") == broker and v.get("metric") == metric
            and (variant is None or v.get("variant") == variant) and (workload is None or v.get("workload") == workload)]
    if not rows:
        why = "no regression.json" if doc is None else f"no A/B verdict of {metric} on {broker} in regression.json"
        return StepResult(f"{Judgement.NOT_JUDGED}: {why}")
    rows.sort(key=lambda v: _PRECEDENCE[kind_of(str(v.get("verdict")))])
    v = rows[0]
    interval = v.get("interval") or {}
    evidence = str(v.get("evidence") or "")
    if len(rows) > 1:
        evidence = f"workload {v.get('workload')} (of {len(rows)} judged): {evidence}"
    return StepResult(verdict=str(v.get("verdict")), median_a=v.get("baseline_median"), median_b=v.get("value"),
                      ratio=interval.get("ratio"), ci_low=interval.get("ci_low"), ci_high=interval.get("ci_high"),
                      confidence=interval.get("confidence"), evidence=evidence,
                      suspects=str((v.get("suspects") or {}).get("sentence") or ""))


class BenchSteps:
    """The command line's step runner: each step one A/B run of ``suite`` through ``bench(conf) -> (exit code,
    run dir or None)`` (``brokerbench bench``'s run machinery), judged from the run's regression.json."""

    def __init__(self, bench: Callable[[dict[str, Any]], tuple[int, Path | None]], broker: str, metric: str,
                 variant: str, workload: str | None = None, conf: Mapping[str, Any] | None = None):
        self.bench, self.broker, self.metric = bench, broker, metric
        self.variant, self.workload, self.conf = variant, workload, dict(conf or {})

    def conf_for(self, version_a: str, version_b: str) -> dict[str, Any]:
        """The run's params: the given ones, one broker, one variant, side A's and side B's broker version."""
        conf = dict(self.conf)
        conf.update(brokers=[self.broker], variants=[self.variant], broker_versions={self.broker: version_a},
                    compare_with={"broker_versions": {self.broker: version_b}})
        if self.workload:
            conf["workloads"] = [self.workload]
        return conf

    def __call__(self, version_a: str, version_b: str) -> StepResult:
        code, run_dir = self.bench(self.conf_for(version_a, version_b))
        if code in (EXIT_REFUSED, EXIT_INTERRUPTED):
            what = "refused before it started" if code == EXIT_REFUSED else "interrupted"
            return StepResult(f"{Judgement.NOT_JUDGED}: the run was {what} (exit {code})",
                              run_dir=str(run_dir) if run_dir else None, exit_code=code)
        if run_dir is None:
            return StepResult(f"{Judgement.NOT_JUDGED}: the run failed before it had a results directory "
                              f"(exit {code})", exit_code=code)
        result = step_from_verdicts(_read_json(run_dir / "summary" / "regression.json"), self.broker, self.metric,
                                    self.variant, self.workload)
        if kind_of(result.verdict) == "not judged" and code == 1:
            result.verdict = f"{result.verdict} (the run failed: exit 1)"
        result.run_dir, result.exit_code = str(run_dir), code
        return result


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# -- the manual DAG's steps (brokerbench_bisect) -------------------------------------------------------------------

#: step tasks of the manual DAG: enough for 2 + ceil(log2(n - 1)) steps of a bisection over up to 257 releases with
#: three steps repeated; a search that needs more ends "undecided" with the table so far
DAG_STEPS = 13


def dag_label(name: str) -> str:
    """How the manual DAG names an argument in a refusal: its param."""
    return f"params.{name}"


def step_record(version_a: str, version_b: str, result: StepResult) -> dict[str, Any]:
    """What a step task returns (its XCom): the pair it measured and what it found."""
    return {"version_a": version_a, "version_b": version_b, "result": asdict(result)}


def recorded_steps(records: Sequence[Mapping[str, Any] | None]) -> list[tuple[str, str, StepResult]]:
    """The step tasks' records in order, up to the first task that measured nothing (skipped or failed)."""
    out = []
    for r in records:
        if not r:
            break
        out.append((str(r["version_a"]), str(r["version_b"]), StepResult(**r["result"])))
    return out


def dag_step(plan_: BisectPlan, records: Sequence[Mapping[str, Any] | None],
             bench: Callable[[dict[str, Any]], tuple[int, Path | None]],
             say: Callable[[str], None] = lambda _m: None) -> dict[str, Any] | None:
    """One step task of the manual DAG: the next A/B run the bisection asks for after the steps recorded so far, its
    record; None when the bisection has already ended (the task skips itself)."""
    so_far, pair = resume(plan_.releases, recorded_steps(records), plan_.broker, plan_.metric)
    if pair is None:
        say(f"the bisection has ended: {so_far.message}")
        return None
    say(f"A/B run: A {plan_.broker} {pair[0]} vs B {pair[1]} (suite {plan_.suite}, variant {plan_.variant}, "
        f"judged on {plan_.metric})")
    result = plan_.step_runner(bench)(*pair)
    say(f"A {pair[0]} vs B {pair[1]}: {result.verdict}" + (f" ({ratio_text(result)})" if result.ratio else "")
        + (f"; {result.suspects}" if result.suspects else ""))
    return step_record(pair[0], pair[1], result)


def dag_result(plan_: BisectPlan, records: Sequence[Mapping[str, Any] | None]) -> Bisection:
    """The bisection from every step task's record (the DAG's ``record`` task): its result, or ``undecided`` when
    the step tasks ran out or one failed before the search ended."""
    b, pair = resume(plan_.releases, recorded_steps(records), plan_.broker, plan_.metric)
    if pair is not None:
        b.status, b.exit_code = "undecided", EXIT_UNDECIDED
        measured = len(recorded_steps(records))
        why = (f"the DAG's {DAG_STEPS} step tasks were used up" if measured >= DAG_STEPS
               else f"step task {measured + 1} measured nothing (it failed, or the run was stopped)")
        b.message = (f"could not decide: {why} before the search ended; next would have been A {pair[0]} vs "
                     f"B {pair[1]}; the table above is what is known")
    return b


# -- the table and the record ------------------------------------------------------------------------------------


def table_columns(metric: str) -> list[str]:
    unit = unit_of(metric).replace("/", "_").replace("µ", "u") or "value"
    return ["step", "side_a", "side_b", f"a_median_{unit}", f"b_median_{unit}", "ratio_b_a [interval]", "verdict",
            "run_dir"]


def _num(v: Any) -> str:
    return "-" if v is None else f"{float(v):.4g}"


def ratio_text(r: StepResult) -> str:
    """``1.12 [1.05, 1.2] 97.1 %``: the ratio B/A, its interval and the interval's confidence."""
    if r.ratio is None:
        return "-"
    text = f"{r.ratio:.3f}"
    if r.ci_low is not None and r.ci_high is not None:
        text += f" [{r.ci_low:.3f}, {r.ci_high:.3f}]"
    if r.confidence is not None:
        text += f" {r.confidence:.1%}"
    return text


def step_row(s: Step) -> list[str]:
    label = str(s.step) + (" again" if s.attempt > 1 else "") + (f" ({s.role})" if s.role != "search" else "")
    r = s.result
    return [label, s.version_a, s.version_b, _num(r.median_a), _num(r.median_b), ratio_text(r), r.verdict,
            r.run_dir or "-"]


def steps_table(b: Bisection) -> str:
    return util.text_table(table_columns(b.metric), [step_row(s) for s in b.steps])


def record_dir(root: Path, broker: str, good: str, bad: str, when: dt.datetime | None = None) -> Path:
    """``<results root>/bisect/<broker>-<good>-<bad>-<UTC time>``."""
    when = when or dt.datetime.now(dt.timezone.utc)
    return Path(root) / "bisect" / f"{broker}-{good}-{bad}-{when.astimezone(dt.timezone.utc):%Y%m%dT%H%M%SZ}"


def write_record(out: Path, b: Bisection, params: Mapping[str, Any]) -> Path:
    """``bisect.json`` (the parameters, the releases, every step and the result) and ``bisect.html`` in ``out``;
    returns the JSON file."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {"params": dict(params), **b.to_dict(), "written_utc": dt.datetime.now(dt.timezone.utc).isoformat()}
    (out / "bisect.json").write_text(json.dumps(doc, indent=2, default=str))
    (out / "bisect.html").write_text(render_html(b, params))
    return out / "bisect.json"


def render_html(b: Bisection, params: Mapping[str, Any]) -> str:
    """A self-contained page (no scripts, no external assets): the result, the parameters, every step's row."""
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in table_columns(b.metric))
    body = "\n".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in step_row(s)) + "</tr>" for s in b.steps)
    evidence = "\n".join(f"<li>step {s.step}{' again' if s.attempt > 1 else ''}: {e(s.result.evidence)}"
                         + (f"<br>{e(s.result.suspects)}" if s.result.suspects else "") + "</li>"
                         for s in b.steps if s.result.evidence)
    given = "".join(f"<tr><th>{e(str(k))}</th><td>{e(json.dumps(v, default=str))}</td></tr>"
                    for k, v in params.items() if v not in (None, {}, []))
    title = f"bisect: {b.broker} {b.releases[0]} to {b.releases[-1]} on {b.metric}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #bbb;padding:3px 8px;text-align:left}}.result{{font-size:1.2em;font-weight:bold}}</style>
</head><body>
<h1>{e(title)}</h1>
<p class="result">{e(b.message or b.status)}</p>
<p>status: {e(b.status)}; exit code {b.exit_code}; verdict of each step: side B against side A on {e(b.metric)}
(regressed = B slower: the change is at or before B; unchanged or improved: after it)</p>
<h2>Steps</h2>
<table><thead><tr>{head}</tr></thead><tbody>
{body}
</tbody></table>
<h2>Evidence</h2><ul>{evidence}</ul>
<h2>Releases</h2><p>{e(", ".join(b.releases))}</p>
<h2>Parameters</h2><table>{given}</table>
</body></html>
"""
