"""brokerbench_compare under `airflow dags test`: the comparison report from a synthetic history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures_results import history_row, write_history_rows  # noqa: E402

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_compare_dag_writes_the_comparison_report(tmp_path):
    rows = [history_row(d, p99=5.0) for d in range(1, 4)] + [history_row(4, version="3.9.0", p99=4.0)]
    rows += [history_row(d, broker="pulsar", version="3.3.7", p99=6.0) for d in (2, 3)]
    write_history_rows(tmp_path / "history", rows)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "dags", "test", "brokerbench_compare",
         "-c", json.dumps({"results_root": str(tmp_path)})],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    reports = list((tmp_path / "comparisons").glob("*/comparison.html"))
    assert len(reports) == 1, out[-3000:]
    text = reports[0].read_text()
    assert "kafka — w1 — fsync-on — local" in text and "pulsar — w1 — fsync-on — local" in text
    assert ">3.8.0<" in text and ">3.9.0<" in text
    assert (tmp_path / "comparisons" / "latest.html").read_text() == text
    # the text summary lands in the task log
    assert "comparison (latest run per broker)" in out
