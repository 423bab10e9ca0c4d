"""`brokerbench bench` from a plain shell: no variable of the Makefile's, no ~/airflow; the run's outcome is its
last line. A first run in an empty results root has no baseline (or, on a host loaded by something else, no valid
measurement): not judged, which is no failure of the run: exit 0, said last (outcome.json keeps the strict code 4,
the exit code of --fail-on not-judged, tested in tests/unit/test_cli.py and test_outcome.py)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKERBENCH = str(Path(sys.executable).parent / "brokerbench")


@pytest.mark.timeout(900)
def test_a_first_run_from_a_plain_shell_is_not_judged_and_says_so(tmp_path):
    home, results = tmp_path / "home", tmp_path / "results"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}  # what `env -i` leaves, plus HOME
    p = subprocess.run([BROKERBENCH, "bench", "--suite", "smoke", "--brokers", "rabbitmq", "--variants", "fsync-off",
                        "--duration", "0.1", "--conf", json.dumps({"results_root": str(results),
                                                                    "warmup_duration_minutes": 0.05})],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=850)
    out = p.stdout.strip().splitlines()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not (home / "airflow").exists()  # never ~/airflow
    run_dir = next((results / "runs" / "brokerbench_smoke").iterdir())
    with open(run_dir / "summary" / "summary.csv") as f:
        (row,) = csv.DictReader(f)
    if row["status"] == "ok":
        headline = "NOT JUDGED: no baseline yet (1 of 1 track(s) have too few earlier valid runs)"
    else:  # the host was loaded by something else during the phase (`make test` runs other tests beside this one)
        reasons = row["invalid_reasons"] or ""
        assert ("foreign load: " in reasons or "contended: " in reasons) and "partial" not in reasons, row["status"]
        headline = "NOT JUDGED: no valid measurement (1 of 1 track(s) invalid, partial or without data)"
    assert out[-1] == f"brokerbench: OUTCOME: {headline}"
    assert out[-2] == "brokerbench: not judged is not a failure of the run: exit code 0 (--fail-on not-judged: 4)"
    outcome = json.loads((run_dir / "summary" / "outcome.json").read_text())
    assert (outcome["outcome"], outcome["exit_code"], outcome["tracks"]) == ("not judged", 4, 1)
    assert f"<strong>NOT JUDGED</strong>: {headline[len('NOT JUDGED: '):]}" in (run_dir / "report.html").read_text()
