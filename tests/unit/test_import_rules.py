"""The import rules of docs/architecture.md, checked on the source: every import statement of
include/brokerbench (also those inside functions) is parsed with ast and resolved to a module."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "include" / "brokerbench"

#: the environments' parts every environment shares
ENV_SHARED = ("brokerbench.environments", "brokerbench.environments.base", "brokerbench.environments.processes",
              "brokerbench.environments.brokermetrics",
              "brokerbench.environments.settings",
              "brokerbench.environments.hostsetup", "brokerbench.environments.hostmetrics")
HELPERS = ("brokerbench.util", "brokerbench.resources")
#: the package itself (``import brokerbench`` for its version): allowed by name only, never what is under it
ROOT = "brokerbench"
#: the analysis modules, bottom up: each may import those before it
ANALYSIS = ("brokerbench.metrics", "brokerbench.abtest", "brokerbench.changepoint", "brokerbench.trials",
            "brokerbench.regression", "brokerbench.suspects", "brokerbench.ab_verdicts", "brokerbench.outcome",
            "brokerbench.history", "brokerbench.report")

#: layer -> the brokerbench modules (and packages, with everything under them) it may import, besides itself
RULES = {
    "brokerbench.util": (),
    "brokerbench.resources": (),
    "brokerbench.spec": HELPERS,
    "brokerbench.worker": (ROOT, "brokerbench.histogram", "brokerbench.faults", *HELPERS),
    **{m: (*ENV_SHARED, *HELPERS) for m in ENV_SHARED if m != "brokerbench.environments"},
    "brokerbench.environments.machine": (*ENV_SHARED, *HELPERS),
    "brokerbench.environments.local": (*ENV_SHARED, "brokerbench.environments.machine", *HELPERS),
    "brokerbench.environments.external": (*ENV_SHARED, "brokerbench.environments.machine", "brokerbench.spec",
                                          *HELPERS),
    "brokerbench.environments.aws": (*ENV_SHARED, "brokerbench.environments.machine", "brokerbench.spec",
                                     *HELPERS),
    # the environments by name: each one's package inside the methods that need it, spec's errors for refusals
    "brokerbench.environments.registry": (*ENV_SHARED, "brokerbench.environments.local",
                                          "brokerbench.environments.aws", "brokerbench.environments.external",
                                          "brokerbench.spec", *HELPERS),
    # the analysis modules: a leaf of metric definitions, then the judges, then the report
    "brokerbench.metrics": (),
    "brokerbench.histogram": (),
    # what a fault (a node killed mid-phase) did to a phase, from the worker's interval records
    "brokerbench.faults": (),
    # the delivery ledgers (acknowledged and received sequence numbers as Roaring bitmaps) and their reconciliation:
    # the worker folds them, the aggregation joins them
    "brokerbench.delivery": (),
    "brokerbench.environments": (*ENV_SHARED, *HELPERS),
    "brokerbench.changepoint": ("brokerbench.metrics",),
    "brokerbench.trials": ("brokerbench.metrics", *HELPERS),
    "brokerbench.regression": ("brokerbench.metrics", "brokerbench.changepoint"),
    # an A/B run's statistics (a leaf), and its verdicts from the run's trial rows
    "brokerbench.abtest": (),
    "brokerbench.ab_verdicts": ("brokerbench.abtest", "brokerbench.metrics", "brokerbench.regression",
                                "brokerbench.suspects", *HELPERS),
    # the candidates are the brokers' catalogs (include/metrics/<broker>.yaml, read by environments.brokermetrics)
    "brokerbench.suspects": ("brokerbench.abtest", "brokerbench.metrics", "brokerbench.regression",
                             "brokerbench.changepoint", "brokerbench.environments.brokermetrics", *HELPERS),
    "brokerbench.outcome": ("brokerbench.metrics",),
    # the command line's Airflow home and database
    "brokerbench.local_airflow": (),
    "brokerbench.history": (ROOT, *HELPERS),
    "brokerbench.report": (ROOT, *ANALYSIS, *HELPERS),
    # results storage and the lease on an environment
    "brokerbench.storage": HELPERS,
    "brokerbench.lease": ("brokerbench.storage", "brokerbench.environments", *HELPERS),
    # what the Airflow layer and the command line use: never the other way round
    "brokerbench.web": ("brokerbench.spec", "brokerbench.storage", *HELPERS),
    "brokerbench.notify": ("brokerbench.metrics", "brokerbench.outcome", "brokerbench.report", "brokerbench.spec",
                           "brokerbench.storage",
                           *HELPERS),
    "brokerbench.triggers": ("brokerbench.lease",),
    # a run's broker metrics for the user's own Prometheus and Grafana: the catalogs and the raw scraper files
    "brokerbench.monitoring": ("brokerbench.environments.brokermetrics", *HELPERS),
    "brokerbench.pipeline": (*ANALYSIS, "brokerbench.environments", "brokerbench.spec", "brokerbench.worker",
                             "brokerbench.monitoring",
                             "brokerbench.storage", "brokerbench.lease", *HELPERS),
    "brokerbench.operators": ("brokerbench.pipeline", "brokerbench.outcome", "brokerbench.notify", "brokerbench.spec",
                              "brokerbench.environments.aws.fleet",
                              "brokerbench.triggers", "brokerbench.web", "brokerbench.storage", *HELPERS),
    # the bisection DAG's tasks: brokerbench.bisect's search and record; each step one run of the suite's DAG through
    # the command line's `bench` (an `airflow dags test` in the task's own process, as `brokerbench bisect` runs it)
    "brokerbench.operators.bisect": ("brokerbench.bisect", "brokerbench.cli", "brokerbench.spec", "brokerbench.storage",
                                     *HELPERS),
    # the bisection DAG's params: the judged metrics (a leaf) and the bisection's step count
    "brokerbench.dag_factory": ("brokerbench.operators", "brokerbench.notify", "brokerbench.spec", "brokerbench.metrics",
                                "brokerbench.bisect", *HELPERS),
    # the cross-check of the worker against the brokers' own perf tools on a deployed broker
    "brokerbench.crosscheck": ("brokerbench.environments", "brokerbench.worker", "brokerbench.histogram",
                               "brokerbench.spec", *HELPERS),
    # what a user can run, for `brokerbench list`: the specs, the environments' default versions, the broker cache
    "brokerbench.inventory": ("brokerbench.spec", "brokerbench.environments.registry",
                              "brokerbench.environments.brokermetrics",
                              "brokerbench.environments.machine.distributions", "brokerbench.worker.runner",
                              "brokerbench.changepoint", *HELPERS),
    # a results root at a terminal (`brokerbench history`, `brokerbench compare`): the history, the verdicts and
    # outcomes the runs wrote, the comparison page
    "brokerbench.results_view": (*ANALYSIS, "brokerbench.spec", "brokerbench.storage", *HELPERS),
    # the bisection across a broker's releases (`brokerbench bisect`, DAG brokerbench_bisect): the releases on Maven
    # Central, the arguments checked against the suites (spec), the search, its record; each step's run is the caller's
    "brokerbench.bisect": ("brokerbench.changepoint", "brokerbench.metrics", "brokerbench.spec",
                           "brokerbench.environments.machine.distributions", *HELPERS),
    # what the command line started, and how it is stopped when the command line is gone
    "brokerbench.run_guard": ("brokerbench.pipeline",),
    # what `airflow dags test` prints, read for the command line (the run id as the guard finds it in a line)
    "brokerbench.airflow_output": ("brokerbench.run_guard",),
    "brokerbench.cli": ("brokerbench.pipeline", "brokerbench.outcome", "brokerbench.local_airflow", "brokerbench.run_guard",
                        "brokerbench.airflow_output",
                        "brokerbench.report",
                        "brokerbench.bisect",
                        "brokerbench.spec", "brokerbench.storage",
                        "brokerbench.environments.aws.fleet", "brokerbench.environments.registry",
                        "brokerbench.crosscheck", "brokerbench.inventory", "brokerbench.results_view",
                        "brokerbench.monitoring", *HELPERS),
}

#: the Airflow layer: the only modules that import Airflow when they are imported (others do it inside the
#: functions that need it, so the worker, the specs and the environments load without Airflow)
AIRFLOW_AT_IMPORT = {"brokerbench.dag_factory", "brokerbench.operators", "brokerbench.triggers",
                     "brokerbench.notify"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def imports(path: Path, text: str | None = None) -> list[tuple[str, bool]]:
    """(module imported, at module level?) for every import statement of the file (or of ``text``)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text() if text is None else text)
    top = {id(n) for n in tree.body}
    for n in tree.body:  # an `if TYPE_CHECKING:` / try block at module level still runs at import
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(c) for c in ast.walk(n)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.append((sub if is_module(sub) else module, id(node) in top))
    return found


FILES = sorted(p for p in PACKAGE.rglob("*.py") if "_data" not in p.parts)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def allowed_by(name: str, allowed: tuple[str, ...]) -> bool:
    """``name`` is one of ``allowed`` or under one of them (the package root only by name)."""
    return any(name == a or (a != ROOT and within(name, a)) for a in allowed)


def rule_for(module: str) -> tuple[str, tuple[str, ...]] | None:
    """The most specific rule naming the module or a package above it."""
    matching = [k for k in RULES if within(module, k)]
    return (max(matching, key=len), RULES[max(matching, key=len)]) if matching else None


@pytest.mark.parametrize("path", FILES, ids=lambda p: module_name(p))
def test_brokerbench_imports_follow_the_layers(path):
    me = module_name(path)
    rule = rule_for(me)
    if rule is None:
        return
    layer, allowed = rule
    bad = sorted({name for name, _ in imports(path) if within(name, "brokerbench") and not within(name, layer)
                  and not allowed_by(name, allowed)})
    assert not bad, f"{me} ({layer}) may import only {', '.join(allowed) or 'nothing of brokerbench'}; imports {bad}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: module_name(p))
def test_only_the_airflow_layer_imports_airflow_when_imported(path):
    me = module_name(path)
    at_import = sorted({n for n, top in imports(path) if top and n.split(".")[0] in ("airflow", "pyspark")})
    if any(within(me, m) for m in AIRFLOW_AT_IMPORT):
        return
    assert not at_import, f"{me} imports {at_import} at module level: import it inside the function that needs it"


def test_the_worker_and_the_specs_never_import_airflow_or_spark():
    for path in FILES:
        me = module_name(path)
        if within(me, "brokerbench.worker") or within(me, "brokerbench.spec"):
            assert not [n for n, _ in imports(path) if n.split(".")[0] in ("airflow", "pyspark")], me


def test_the_checker_sees_imports_inside_functions():
    """aws importing local inside a function (the kind of import that hid a circle before) is found."""
    fleet = PACKAGE / "environments" / "aws" / "fleet.py"
    text = fleet.read_text() + "\n\ndef _x():\n    from ..local import LocalEnvironment\n"
    assert ("brokerbench.environments.local", False) in imports(fleet, text)
    assert rule_for("brokerbench.environments.aws.fleet")[0] == "brokerbench.environments.aws"


def test_every_top_level_module_has_a_rule():
    top = sorted(m for m in map(module_name, FILES) if m.count(".") == 1)
    assert [m for m in top if rule_for(m) is None] == [], \
        "a new top-level module needs its line in RULES (what it may import)"


def import_graph(texts: dict[str, str] | None = None) -> dict[str, set[str]]:
    """module -> the brokerbench modules it imports (anywhere in the file); ``texts`` replaces files' sources."""
    texts = texts or {}
    graph = {}
    for path in FILES:
        me = module_name(path)
        graph[me] = {n for n, _ in imports(path, texts.get(me)) if within(n, "brokerbench") and n != me}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    """No two modules import each other, directly or through others, not even inside functions."""
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_circle_hidden_in_a_function():
    """The circle changepoint -> regression -> changepoint, with changepoint's import inside a function (as it
    once was), is found."""
    path = PACKAGE / "changepoint.py"
    hidden = path.read_text() + "\n\ndef _x():\n    from brokerbench.regression import judge\n"
    assert ["brokerbench.changepoint", "brokerbench.regression"] in cycles(import_graph(
        {"brokerbench.changepoint": hidden}))
