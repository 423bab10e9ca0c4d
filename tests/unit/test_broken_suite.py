"""A broken suite file hides only its own DAG and shows as an import error naming the file."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brokerbench.dag_factory import BrokenSuites, build_all_dags, dag_id_for, raise_for_broken_suites
from brokerbench.spec.roots import spec_root

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spec_tree(tmp_path, monkeypatch):
    """The project's specs plus two broken suites: bad YAML, and a suite naming a missing workload."""
    src = spec_root()
    for kind in ("workloads", "drivers", "variants", "suites"):
        shutil.copytree(src / kind, tmp_path / kind)
    (tmp_path / "suites" / "bad-yaml.yaml").write_text("name: bad-yaml\nworkloads: [unclosed\n")
    good = (tmp_path / "suites" / "smoke.yaml").read_text()
    (tmp_path / "suites" / "missing-workload.yaml").write_text(
        good.replace("name: smoke", "name: missing-workload")
        .replace("smoke-1-topic-1-partition-100b", "no-such-workload"))
    monkeypatch.setenv("BROKERBENCH_SPEC_ROOT", str(tmp_path))
    return tmp_path


def test_a_broken_suite_hides_only_its_own_dag(spec_tree):
    broken: dict[str, str] = {}
    dags = build_all_dags(broken)
    good = sorted(p.stem for p in (spec_tree / "suites").glob("*.yaml")
                  if p.stem not in ("bad-yaml", "missing-workload"))
    assert sorted(dags) == sorted(dag_id_for(s) for s in good)
    assert sorted(Path(f).name for f in broken) == ["bad-yaml.yaml", "missing-workload.yaml"]
    assert "no-such-workload" in broken[str(spec_tree / "suites" / "missing-workload.yaml")]


def test_the_errors_file_names_every_broken_suite_file(spec_tree):
    with pytest.raises(BrokenSuites) as e:
        raise_for_broken_suites()
    text = str(e.value)
    assert "2 suite file(s)" in text
    assert "suites/bad-yaml.yaml: invalid YAML" in text
    assert "suites/missing-workload.yaml" in text and "no-such-workload" in text


def test_nothing_is_raised_when_every_suite_loads():
    raise_for_broken_suites()


def test_airflow_lists_the_import_error_and_keeps_the_other_dags(spec_tree):
    """Airflow's DagBag over dags/: the good suites' DAGs, and one import error naming the bad files."""
    code = ("import json, sys; from airflow.dag_processing.dagbag import DagBag; "
            "b = DagBag(dag_folder=sys.argv[1]); "
            "print(json.dumps({'dags': sorted(b.dag_ids), 'errors': {k: str(v) for k, v in b.import_errors.items()}}))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "dags")], capture_output=True, text=True,
                         check=True, cwd=str(ROOT))
    bag = json.loads(out.stdout.strip().splitlines()[-1])
    assert "brokerbench_smoke" in bag["dags"]
    assert dag_id_for("bad-yaml") not in bag["dags"] and dag_id_for("missing-workload") not in bag["dags"]
    (file, error), = bag["errors"].items()
    assert file.endswith("brokerbench_suite_errors.py")
    assert "bad-yaml.yaml" in error and "missing-workload.yaml" in error
