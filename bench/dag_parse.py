"""How long the DAG file takes to import in a fresh interpreter, beside Airflow's own import.

Airflow's dag-processor imports dags/brokerbench_suites.py again and again, so the factory must stay light:
no broker client, Spark or chart library at parse time (tests/unit/test_dag_integrity.py checks which
modules are imported). This prints, alternating in one run, the wall time of a fresh interpreter that imports
`airflow.sdk` alone and of one that runs the DAG file, the median of each, and their difference: what
brokerbench adds to Airflow's import.

    .venv/bin/python bench/dag_parse.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _common import ROOT

CODE = {
    "airflow.sdk alone": "import airflow.sdk",
    "dags/brokerbench_suites.py": "import runpy; runpy.run_path('dags/brokerbench_suites.py')",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in CODE}
    for _ in range(args.rounds):
        for name, code in CODE.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, v in times.items():
        print(f"{name}: median {med[name]:.2f} s of {args.rounds} ({', '.join(f'{x:.2f}' for x in v)})")
    base, dag = med["airflow.sdk alone"], med["dags/brokerbench_suites.py"]
    print(f"the DAG file adds {dag - base:.2f} s to Airflow's import (ratio {dag / base:.2f})")


if __name__ == "__main__":
    main()
