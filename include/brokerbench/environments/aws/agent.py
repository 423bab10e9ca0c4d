"""The brokerbench helper that runs *on* a fleet host, invoked over SSH.

The aws environment installs the brokerbench package (without Airflow) on
every host and calls this module for what must happen there:

    python -m brokerbench.environments.aws.agent run-workers  --state-dir D --spec F
    python -m brokerbench.environments.aws.agent metrics-start --state-dir D --out F --host NAME
    python -m brokerbench.environments.aws.agent metrics-stop  --state-dir D --out F
    python -m brokerbench.environments.aws.agent brokermetrics-start --state-dir D --out F --host NAME --targets-file T
    python -m brokerbench.environments.aws.agent brokermetrics-stop  --state-dir D --out F
    python -m brokerbench.environments.aws.agent deploy|health|undeploy --state-dir D --spec F
    python -m brokerbench.environments.aws.agent teardown --state-dir D

``run-workers`` uses the same process handling as the local environment
(:class:`brokerbench.environments.machine.runtime.Machine`: every worker
recorded in ``D/pids.json``, output relayed line by line, killed at the
timeout), so ``teardown`` on the host stops whatever a killed controller
left behind. ``deploy`` / ``health`` / ``undeploy`` run the same broker
implementations as the local environment on the host: the ``local`` deploy mode of
the aws environment (brokers that need no download; used by the loopback
tests and by hosts without internet access). The last output line of every
command is ``BROKERBENCH_RESULT <json>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

RESULT_PREFIX = "BROKERBENCH_RESULT "


def _env(state_dir: str, run_key: str, settings: dict[str, Any] | None = None):
    from brokerbench.environments.machine.runtime import Machine

    return Machine(run_key, {**(settings or {}), "state_dir": state_dir})


def _print_result(data: Any) -> None:
    sys.stdout.flush()
    print(RESULT_PREFIX + json.dumps(data, default=str), flush=True)


def metrics_start(state_dir: str, out: str, host: str, interval: float, run_root: str | None = None) -> dict[str, Any]:
    from brokerbench.environments.hostmetrics import start

    return start(state_dir, out, host, interval, run_root=run_root)


def metrics_stop(out: str) -> dict[str, Any]:
    from brokerbench.environments.hostmetrics import stop

    return stop(out)


def brokermetrics_start(state_dir: str, out: str, host: str, interval: float, targets_file: str | None = None,
                        run_key: str = "aws-host", settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scraper of this host's brokers (:mod:`brokerbench.environments.brokermetrics`): the targets the deploy
    wrote into ``targets_file`` (deploy_mode install: :mod:`.metrics_endpoints`), else those of the brokers the
    agent runs from ``state_dir`` (deploy_mode local); none: no scraper, ``{"targets": []}``."""
    from brokerbench.environments import brokermetrics

    path = Path(targets_file) if targets_file else None
    if path is not None and path.exists():
        targets = [brokermetrics.Target.from_dict(d) for d in json.loads(path.read_text())]
    elif Path(state_dir).exists():
        targets = _env(state_dir, run_key, settings).metrics_targets()
    else:
        targets = []
    if not targets:
        return {"targets": []}
    return brokermetrics.start(state_dir, out, host, interval, targets)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    ap = argparse.ArgumentParser(prog="python -m brokerbench.environments.aws.agent")
    ap.add_argument("command", choices=["deploy", "health", "undeploy", "teardown", "run-workers",
                                        "stop-workers", "metrics-start", "metrics-stop", "brokermetrics-start",
                                        "brokermetrics-stop"])
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--run-key", default="aws-host")
    ap.add_argument("--spec", help="JSON file with the command's arguments")
    ap.add_argument("--out")
    ap.add_argument("--host", default="")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--run-root", help="metrics-start: the run's directory of host state dirs (processes of the "
                                       "run's other hosts on this machine are its own load)")
    ap.add_argument("--targets-file", help="brokermetrics-start: the host's broker metrics targets (JSON list)")
    ap.add_argument("--environ-stdin", action="store_true",
                    help="run-workers: read a JSON object of environment variables for the workers from stdin")
    a = ap.parse_args(argv)
    spec = json.loads(Path(a.spec).read_text()) if a.spec else {}
    try:
        if a.command == "run-workers":
            if a.environ_stdin:  # secrets: in this process's environment (the workers inherit it), on no disk
                os.environ.update({str(k): str(v) for k, v in json.loads(sys.stdin.readline() or "{}").items()})
            env = _env(a.state_dir, a.run_key)
            result = env.run_workers(spec["jobs"], spec["out_paths"], float(spec["timeout_s"]))
        elif a.command == "deploy":
            env = _env(a.state_dir, a.run_key, spec.get("settings"))
            result = env.deploy(spec["broker"], spec.get("broker_settings") or {}, spec["variant"],
                                spec.get("driver_overrides") or {}, jvm_options=spec.get("jvm_options") or []).to_dict()
        elif a.command == "health":
            result = _env(a.state_dir, a.run_key, spec.get("settings")).health(spec["broker"])
        elif a.command == "undeploy":
            _env(a.state_dir, a.run_key, spec.get("settings")).undeploy(spec["broker"])
            result = {"broker": spec["broker"], "stopped": True}
        elif a.command == "stop-workers":
            result = {"stopped": _env(a.state_dir, a.run_key).stop_workers() if Path(a.state_dir).exists() else []}
        elif a.command == "teardown":
            env = _env(a.state_dir, a.run_key)
            result = env.teardown() if Path(a.state_dir).exists() else {"note": "no state directory"}
        elif a.command == "metrics-start":
            result = metrics_start(a.state_dir, a.out, a.host, a.interval, a.run_root)
        elif a.command == "brokermetrics-start":
            result = brokermetrics_start(a.state_dir, a.out, a.host, a.interval, a.targets_file, a.run_key,
                                         spec.get("settings"))
        elif a.command == "brokermetrics-stop":
            from brokerbench.environments import brokermetrics

            result = brokermetrics.stop(a.out)
        else:
            result = metrics_stop(a.out)
    except Exception as e:  # noqa: BLE001 - reported to the controller as a result
        _print_result({"error": f"{type(e).__name__}: {e}"})
        return 1
    _print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
