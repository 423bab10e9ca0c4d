"""The ``aws`` environment: EC2 fleets, host setup over SSH, brokers of a requested version.

Same interface as ``local`` (:class:`~brokerbench.environments.base.Environment`),
so every DAG runs unchanged on either. See docs/aws.md.

* provision: broker, metadata (ZooKeeper, when a broker version needs it) and
  client instances through the Amazon provider's EC2Hook, tagged with the run
  and found again by tag (:mod:`.fleet`); settings checked and cost cap
  applied first (:func:`check_settings`, also called by the validate task, so
  bad settings are refused before any machine exists). A provision that fails
  terminates what it created (found by tag) before its error leaves it;
  leftovers of an attempt whose process died are reused when consistent,
  terminated otherwise.
* setup_hosts: over SSH (:class:`.ssh.SshHost`, the SSH provider's hook):
  NVMe instance-store disks (XFS, noatime), tuned-adm latency-performance,
  chrony against the Amazon Time Sync Service with a bounded wait and each
  host's offset recorded, disk baseline, host description.
* deploy: Apache Kafka (KRaft or ZooKeeper by version), Apache Pulsar
  (ZooKeeper metadata store, bookies, brokers) or RabbitMQ (cluster join) of the
  version in ``broker_versions``, from the scripts in ``include/infra/aws``
  (``deploy_mode: install``); or the local environment's brokers started on
  the broker host by the agent (``deploy_mode: local``: no download needed).
* run_workers: the worker package on the client hosts, through the agent
  (:mod:`.agent`); result files copied back to the results location.
* teardown: terminate by the run's tag and wait; delete the security group.

Settings (suite ``environmentSettings``, run params override some): see
:class:`brokerbench.environments.settings.AwsSettings` (:data:`DEFAULTS` are its defaults).
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from typing_extensions import override

from ...util import write_json_atomic
from .. import hostmetrics, hostsetup
from ..base import BrokerEndpoint, Environment, EnvironmentFailure
from ..processes import state_dir_for
from ..settings import AwsSettings
from . import fleet as aws_fleet
from .brokers import deploy_installed, health_installed, kill_node, start_node, undeploy_installed
from .metrics_endpoints import TARGETS_FILE, host_targets
from .settings_check import aws_settings, check_settings, needs_metadata, static_host_records
from .ssh import SshHost
from .templates import render

log = logging.getLogger("brokerbench")


class AwsEnvironment(Environment[AwsSettings]):
    """``settings``: as given (the plan's, refined by params), merged with the defaults and the site's settings
    and validated (:func:`.settings_check.aws_settings`: a wrong type refused naming the setting); or the
    :class:`AwsSettings` the environment runs with."""

    name = "aws"

    def __init__(self, run_key: str, settings: AwsSettings | Mapping[str, Any] | None = None,
                 plan: Any | None = None):
        super().__init__(run_key, aws_settings(settings))
        self.plan = plan
        s = self.settings
        self.state_dir = state_dir_for(run_key, s.state_dir)
        self.override = s.ssh_host_override
        #: machines the user already has (static_hosts): no EC2 call, never terminated
        self.static = bool(s.static_hosts)
        # machines that are not this run's fresh instances (an override, mapped addresses, static hosts) are not
        # changed unless host_changes says so
        self.host_changes = (s.host_changes if s.host_changes is not None
                             else not (self.override or s.host_addresses or self.static))
        self.remote_dir = s.remote_dir.rstrip("/")
        self.remote_python = s.remote_python or f"{self.remote_dir}/venv/bin/python"
        # brokerbench installs its package only into the venv it owns, never into a given Python
        self.installs_worker = s.worker_install == "auto" and not s.remote_python
        # one install at a time per machine: hosts reached at one address (ssh_host_override,
        # a bastion) share one <remote_dir>/venv
        self._install_locks: dict[tuple[str, Any], threading.Lock] = {}
        self.tag = aws_fleet.run_hash(run_key)
        self._hosts: list[SshHost] | None = None
        #: environment variables of the workers (secrets), sent to the agent on its stdin, never to a file
        self.worker_environ: dict[str, str] = {}
        #: the JVM engine's build on this controller, copied to the client hosts that run its libraries
        self.client_engine: Path | None = None

    # -- what the run needs ----------------------------------------------------------
    def brokers(self) -> list[str]:
        if self.plan is not None:
            return list(dict.fromkeys(i.broker for i in self.plan.items))
        return ["kafka", "pulsar", "rabbitmq"]

    def version(self, broker: str) -> str:
        return str(self.settings.broker_versions[broker])

    def needs_metadata(self) -> bool:
        return needs_metadata(self.settings, self.brokers(), self.plan)

    def counts(self) -> dict[str, int]:
        if self.static:
            hosts = static_host_records(self.settings.static_hosts)
            return {r: sum(1 for h in hosts if h["role"] == r) for r in aws_fleet.ROLES}
        return aws_fleet.role_counts(self.settings.counts, self.settings.instance_counts, self.needs_metadata())

    def cost_estimate(self) -> dict[str, Any]:
        minutes = aws_fleet.expected_minutes(self.plan)
        lifetime = self.settings.max_lifetime_hours or round(minutes / 60.0 * 1.5 + 1.0, 2)
        cap = self.settings.cost_cap_usd
        return aws_fleet.estimate_cost(self.settings.instance_types, self.counts(), minutes,
                                       float(cap) if cap is not None else None, float(lifetime),
                                       self.settings.prices_usd_per_hour)

    def fleet_api(self) -> aws_fleet.Fleet:
        return aws_fleet.Fleet(self.run_key, self.settings.aws_conn_id, self.settings.region_name)

    # -- provision ---------------------------------------------------------------------
    def provision(self) -> dict[str, Any]:
        """Check the settings and the cost (nothing exists yet), then the run's security
        group and instances: found again by tag (reused when consistent with these
        settings, terminated otherwise: :meth:`.aws_fleet.Fleet.reconcile`), the
        missing ones created, waited for until running.

        If anything fails once EC2 has been called, every instance and security group
        of the run is terminated / deleted (found by tag, waited for) before the
        original exception leaves; the cleanup is logged and written to
        ``<state dir>/provision-cleanup.json``."""
        cost = self.checked_cost()  # AwsSettingsError: nothing created
        if self.static:
            return self._provision_static()
        log.info("cost estimate: %s", _cost_line(cost))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _write(self.state_dir / "cost.json", cost)

        fleet = self.fleet_api()
        try:
            return self._provision(fleet, cost)
        except BaseException as e:  # also a task time-out or SIGTERM: nothing may stay behind
            self._cleanup_after_failure(fleet, e)
            raise

    def _provision_static(self) -> dict[str, Any]:
        """The ``static_hosts`` as the fleet: nothing is created; each host is checked reachable over SSH."""
        hosts = sorted(static_host_records(self.settings.static_hosts),
                       key=lambda h: (ROLE_ORDER[h["role"]], h["name"]))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        record = {"environment": self.name, "run_key": self.run_key, "state_dir": str(self.state_dir),
                  "static": True, "hosts": hosts, "broker_versions": {b: self.version(b) for b in self.brokers()},
                  "deploy_mode": self.settings.deploy_mode, "ssh": {"port": self.settings.ssh_port}}
        _write(self.state_dir / "fleet.json", record)
        self._hosts = None
        for host in self.hosts():
            res = host.run("true", timeout=60)
            if not res.ok:
                raise EnvironmentFailure(f"static host not reachable over SSH: {res.stderr.strip()[-300:]}", host.name)
        log.info("static hosts: %s", ", ".join(f"{h['name']} ({h['role']}, {h['address']})" for h in hosts))
        return record

    def checked_cost(self) -> dict[str, Any]:
        """The settings checked before anything is created, and the run's cost estimate."""
        return check_settings(self.settings.model_dump(), self.brokers(), self.plan)

    def _provision(self, fleet: aws_fleet.Fleet, cost: dict[str, Any]) -> dict[str, Any]:
        s = self.settings
        counts = self.counts()
        sg = fleet.security_group(str(s.controller_cidr), self.brokers(), s.vpc_id)  # checked: given
        wanted = {role: {"count": n, "instance_type": s.instance_types[role], "image_id": s.ami,
                         "subnet_id": s.subnet_id, "key_name": s.key_name}
                  for role, n in counts.items() if n > 0}
        reconciled = fleet.reconcile(wanted, sg)
        lifetime_min = int(cost["max_lifetime_hours"] * 60)
        user_data = render("user-data.sh.j2", max_lifetime_minutes=lifetime_min, run_key=self.run_key)
        launch: dict[str, Any] = {"ImageId": s.ami, "SecurityGroupIds": [sg], "UserData": user_data,
                                  "MetadataOptions": {"HttpTokens": "required"}}
        if s.subnet_id:
            launch["SubnetId"] = s.subnet_id
        if s.key_name:
            launch["KeyName"] = s.key_name
        purposes = {"broker": "broker nodes: " + ", ".join(self.brokers()),
                    "metadata": "ZooKeeper / metadata store", "client": "benchmark workers"}
        instances = []
        for role, n in counts.items():
            if n > 0:
                instances += fleet.ensure_role(role, n, s.instance_types[role], launch, purposes[role],
                                               lifetime_min)
        running = fleet.wait_running([i["InstanceId"] for i in instances])
        hosts = sorted((aws_fleet.host_record(i) for i in running), key=lambda h: (ROLE_ORDER[h["role"]], h["name"]))
        self._address_hosts(hosts)
        record = {"environment": self.name, "run_key": self.run_key, "state_dir": str(self.state_dir),
                  "security_group": sg, "hosts": hosts, "cost": cost, "broker_versions":
                  {b: self.version(b) for b in self.brokers()}, "deploy_mode": s.deploy_mode,
                  "self_protection": {"instance_initiated_shutdown_behavior": "terminate",
                                      "scheduled_shutdown_minutes": lifetime_min},
                  "earlier_attempt": reconciled,
                  "ssh": {"override": self.override, "port": s.ssh_port}}
        _write(self.state_dir / "fleet.json", record)
        log.info("fleet: %s", ", ".join(f"{h['name']} ({h['instance_type']}, {h['instance_id']})" for h in hosts))
        return record

    def _cleanup_after_failure(self, fleet: aws_fleet.Fleet | None, error: BaseException) -> dict[str, Any]:
        log.error("provision failed (%s: %s): terminating every instance and deleting the security group of "
                  "run %s before the error is raised", type(error).__name__, error, self.run_key)
        record = self.cleanup_failed_provision(fleet=fleet, reason=f"{type(error).__name__}: {error}")
        summary = (f"cleaned up after the failed provision: terminated {record.get('terminated') or 'no instance'}, "
                   f"deleted security group(s) {record.get('security_groups_deleted') or 'none'}")
        if record["errors"] or record.get("remaining") or record.get("security_groups_remaining"):
            summary += (f"; INCOMPLETE: {record['errors']}, instances remaining {record.get('remaining')}, "
                        f"security groups remaining {record.get('security_groups_remaining')} "
                        "(the teardown task, the instances' own shutdown and the sweeper remain)")
        if hasattr(error, "add_note"):
            error.add_note(summary)
        return record

    @override
    def cleanup_failed_provision(self, fleet: aws_fleet.Fleet | None = None, reason: str | None = None,
                                 timeout_s: float = 600) -> dict[str, Any]:
        """Terminate every instance of the run and delete its security group, found by
        tag (works from a fresh process with nothing but the run key), waiting until
        the instances are terminated before deleting the group; forget fleet.json.

        What a failed provision calls on itself, and what an Airflow
        ``on_failure_callback`` of the provision task calls. Never raises: the
        record (also written to ``<state dir>/provision-cleanup.json``) says what was
        cleaned up and, under ``errors`` / ``remaining`` /
        ``security_groups_remaining``, what was not."""
        record: dict[str, Any] = {"environment": self.name, "run_key": self.run_key, "reason": reason,
                                  "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "errors": []}
        if self.static:
            record["note"] = "static hosts: nothing was created, nothing to terminate"
            return record
        try:
            result = (fleet or self.fleet_api()).terminate_run(timeout_s=timeout_s)
            record["errors"] += result.pop("errors", [])
            record.update(result)
        except Exception as e:  # noqa: BLE001 - recorded; the caller's error is the one that matters
            record["errors"].append(f"EC2: {type(e).__name__}: {e}")
        try:
            (self.state_dir / "fleet.json").unlink(missing_ok=True)
            _write(self.state_dir / "provision-cleanup.json", record)
        except OSError as e:
            record["errors"].append(f"state dir: {e}")
        if record["errors"] or record.get("remaining") or record.get("security_groups_remaining"):
            log.error("cleanup of run %s incomplete: %s", self.run_key, record)
        else:
            log.warning("cleanup of run %s: terminated %s; security group(s) deleted: %s", self.run_key,
                        record.get("terminated") or "no instance", record.get("security_groups_deleted") or "none")
        return record

    def fleet(self) -> dict[str, Any]:
        """fleet.json, or the fleet found again by tag (another worker, a lost state dir)."""
        path = self.state_dir / "fleet.json"
        if path.exists():
            return json.loads(path.read_text())
        if self.static:
            return {"environment": self.name, "static": True, "hosts": sorted(
                static_host_records(self.settings.static_hosts), key=lambda h: (ROLE_ORDER[h["role"]], h["name"]))}
        running = self.fleet_api().instances(["running"])
        if not running:
            raise EnvironmentFailure(f"no running instance tagged {aws_fleet.RUN_TAG}={self.run_key}: "
                                    "provision has not run (or teardown already did)")
        hosts = [aws_fleet.host_record(i) for i in running]
        self._address_hosts(hosts)
        return {"environment": self.name, "hosts": sorted(hosts, key=lambda h: (ROLE_ORDER[h["role"]], h["name"]))}

    def _address_hosts(self, hosts: list[dict[str, Any]]) -> None:
        """Each host's address: the instance's private or public one, or the ``host_addresses`` mapping's
        (per role, in name order), which SSH, the brokers' listeners and the clients all use."""
        mapping = self.settings.host_addresses
        for role in ("broker", "metadata", "client"):
            group = sorted((h for h in hosts if h["role"] == role), key=lambda h: h["name"])
            given = mapping.get(role)
            if given is not None and len(given) < len(group):
                raise EnvironmentFailure(f"setting host_addresses.{role}: {len(given)} address(es) for "
                                         f"{len(group)} {role} host(s)")
            for i, h in enumerate(group):
                h["address"] = (given[i] if given is not None else
                                h["public_ip"] if self.settings.address == "public" else h["private_ip"])

    def hosts(self, role: str | None = None) -> list[SshHost]:
        if self._hosts is None:
            self._hosts = [
                SshHost(h["name"], h["role"], self.override or h["address"], self.settings.ssh_port,
                        self.settings.ssh_conn_id, self.state_dir / "known_hosts.json",
                        key_alias="ssh-override" if self.override else h["name"],
                        conn_timeout=int(self.settings.ssh_timeout_s))
                for h in self.fleet()["hosts"]]
        return [h for h in self._hosts if role is None or h.role == role]

    def run_dir(self) -> str:
        """The run's directory on every host: one host directory per instance under it."""
        return f"{self.remote_dir}/state/{self.tag}"

    def host_dir(self, host: SshHost) -> str:
        """Where brokerbench keeps its files on ``host`` (one directory per instance)."""
        return f"{self.run_dir()}/{host.name}"

    def agent(self, host: SshHost, command: str, spec: dict[str, Any] | None = None, timeout: float = 300,
              extra: str = "", on_line=None, environ: dict[str, str] | None = None) -> Any:
        """Run the brokerbench agent on ``host``; returns its JSON result (an object, or a list for
        run-workers); raises on failure. ``environ`` (run-workers): variables for the workers, sent on the
        agent's stdin."""
        hd = self.host_dir(host)
        args = f"--state-dir {shlex.quote(hd + '/local')} --run-key {shlex.quote(self.run_key)} {extra}"
        if environ:
            args += " --environ-stdin"
        if spec is not None:
            path = f"{hd}/specs/{command}-{time.time_ns()}.json"
            host.put_text(json.dumps(spec, default=str), path)
            args += f" --spec {shlex.quote(path)}"
        cmd = f"mkdir -p {shlex.quote(self.remote_dir)} && cd {shlex.quote(self.remote_dir)} && " \
              f"{shlex.quote(self.remote_python)} -m " \
              f"brokerbench.environments.aws.agent {command} {args}"
        lines: list[str] = []

        def handle(line: str) -> None:
            lines.append(line)
            if not line.startswith("BROKERBENCH_RESULT ") and on_line:
                on_line(line)

        rc = host.stream(cmd, handle, timeout, stdin=json.dumps(environ) + "\n" if environ else None)
        result = next((json.loads(l[len("BROKERBENCH_RESULT "):]) for l in reversed(lines)
                       if l.startswith("BROKERBENCH_RESULT ")), None)
        if rc != 0 or result is None or "error" in (result or {}):
            detail = (result or {}).get("error") or "\n".join(lines[-15:]) or f"exit {rc}"
            raise EnvironmentFailure(f"agent {command} failed (exit {rc}): {detail}", host.name)
        return result

    # -- host setup ----------------------------------------------------------------------
    def setup_hosts(self) -> dict[str, Any]:
        package = None
        if self.installs_worker and any(self._needs_agent(h) for h in self.hosts()):
            from .worker_package import worker_package

            package = worker_package(self.settings.worker_wheel, self.state_dir / "wheels")
            log.info("worker package: %s (%s, id %s)", package.wheel.name, package.origin, package.package_id[:12])
        # hosts in parallel: chrony's wait, the disk baseline and the install take minutes each
        hosts = self.hosts()
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(hosts))), thread_name_prefix="host-setup") as pool:
            futures = [pool.submit(self._setup_host, host, package) for host in hosts]
        records, failures = [], []
        for host, future in zip(hosts, futures):
            try:
                records.append(future.result())
            except Exception as e:  # noqa: BLE001 - every host's failure is reported, the first raised
                failures.append(e)
                log.error("[%s] host setup failed: %s", host.name, e)
        if failures:
            raise failures[0]
        result = {"environment": self.name, "host_changes": self.host_changes, "hosts": records}
        _write(self.state_dir / "hosts.json", result)
        return result

    def _needs_agent(self, host: SshHost) -> bool:
        return self.settings.deploy_mode == "install" or host.role == "client"

    def _setup_host(self, host: SshHost, package: Any = None) -> dict[str, Any]:
        hd = self.host_dir(host)
        rec: dict[str, Any] = {"name": host.name, "role": host.role}
        # brokerbench's directory, owned by the SSH user (who uploads files into it)
        rd = shlex.quote(self.remote_dir)
        if not host.sudo(f'mkdir -p {rd} && if [ -n "${{SUDO_USER:-}}" ]; then chown "$SUDO_USER:" {rd}; fi').ok:
            host.run(f"mkdir -p {rd}")
        script = render("host-setup.sh.j2", data_dir="/data", remote_dir=self.remote_dir,
                        time_server="169.254.169.123")
        host.put_text(script, f"{hd}/host-setup.sh", 0o755)
        if self.host_changes:
            res = host.sudo(f"bash {shlex.quote(hd + '/host-setup.sh')} apply", timeout=900)
        else:
            res = host.run(f"bash {shlex.quote(hd + '/host-setup.sh')} plan", timeout=120)
        rec["setup_script"] = {"mode": "apply" if self.host_changes else "plan (host_changes off: nothing changed)",
                               "returncode": res.returncode, "output": (res.stdout + res.stderr)[-3000:]}
        if not res.ok:
            raise EnvironmentFailure(f"host setup script failed (exit {res.returncode}): "
                                    f"{(res.stderr or res.stdout)[-800:]}", host.name)
        rec["disks"] = _parse_kv(res.stdout, "DISK")
        if self.host_changes:
            rec["tuned"] = hostsetup.apply_tuned_profile(host, self.settings.tuned_profile)
        else:
            rec["tuned"] = {"profile": self.settings.tuned_profile, "applied": False,
                            "reason": "host_changes off (ssh_host_override): not applied to this machine"}
        rec["time_sync"] = hostsetup.time_sync(host, single_host=False,
                                               wait_s=float(self.settings.time_sync_wait_s) if self.host_changes
                                               else 2.0)
        size = int(self.settings.disk_baseline_mb)
        data = "/data" if self.host_changes and rec["disks"] else hd
        rec["disk"] = (hostsetup.disk_baseline(host, data, size_mb=size) if size > 0
                       else {"note": "disk baseline skipped (disk_baseline_mb = 0)"})
        rec["description"] = hostsetup.describe_host(host)
        if self._needs_agent(host):
            installed = self._install_worker(host, package) if package is not None else None
            rec["agent"] = self._check_agent(host)
            if installed is not None:
                rec["agent"]["install"] = installed
        return rec

    def _install_worker(self, host: SshHost, package: Any) -> dict[str, Any]:
        """Install ``package`` into <remote_dir>/venv unless the host already has that package id."""
        with self._install_locks.setdefault((host.address, host.port), threading.Lock()):
            return self._install_worker_now(host, package)

    def _install_worker_now(self, host: SshHost, package: Any) -> dict[str, Any]:
        venv = f"{self.remote_dir}/venv"
        current = host.run(f"cat {shlex.quote(venv + '/brokerbench-package.id')} 2>/dev/null").stdout.strip()
        if current == package.package_id:
            log.info("[%s] brokerbench %s already installed in %s", host.name, package.package_id[:12], venv)
            return {"installed": False, "package_id": package.package_id, "reason": "already installed"}
        started = time.monotonic()
        log.info("[%s] installing brokerbench (%s, id %s) into %s%s", host.name, package.wheel.name,
                 package.package_id[:12], venv, f" (replacing {current[:12]})" if current else "")
        wheel = f"{self.remote_dir}/wheels/{package.wheel.name}"
        host.put_file(str(package.wheel), wheel)
        script = f"{self.host_dir(host)}/install-worker.sh"
        host.put_text(render("install-worker.sh.j2", remote_dir=self.remote_dir, wheel=wheel,
                             package_id=package.package_id,
                             pip_args=" ".join(shlex.quote(a) for a in self.settings.worker_pip_args)),
                      script, 0o755)
        res = host.sudo(f"bash {shlex.quote(script)}", timeout=900)
        if not res.ok:
            raise EnvironmentFailure(f"installing the brokerbench package failed (exit {res.returncode}): "
                                    f"{(res.stderr + res.stdout).strip()[-800:]}", host.name)
        elapsed = time.monotonic() - started
        log.info("[%s] brokerbench installed in %.1f s", host.name, elapsed)
        return {"installed": True, "package_id": package.package_id, "wheel": package.wheel.name,
                "origin": package.origin, "seconds": round(elapsed, 1),
                "output": res.stdout.strip()[-600:]}

    def _check_agent(self, host: SshHost) -> dict[str, Any]:
        res = host.run(f"{shlex.quote(self.remote_python)} -c 'import brokerbench, sys; "
                       f"print(brokerbench.__version__, sys.version.split()[0])'", timeout=60)
        if not res.ok:
            how = ("the install did not take" if self.installs_worker else
                   "leave remote_python unset and worker_install 'auto' to have host setup install it")
            raise EnvironmentFailure(f"the brokerbench package does not import with {self.remote_python} ({how}): "
                                    f"{(res.stderr or res.stdout).strip()[-400:]}", host.name)
        version, py = (res.stdout.split() + ["?", "?"])[:2]
        return {"brokerbench_version": version, "python": py, "python_path": self.remote_python}

    # -- brokers ------------------------------------------------------------------------------
    def deploy(self, broker: str, broker_settings: dict[str, Any], variant: str,
               driver_overrides: dict[str, Any], *, jvm_options: list[str] | None = None) -> BrokerEndpoint:
        if self.settings.deploy_mode == "local":
            host = self.hosts("broker")[0]
            spec = {"broker": broker, "broker_settings": broker_settings, "variant": variant,
                    "driver_overrides": driver_overrides, "jvm_options": list(jvm_options or []),
                    "settings": self._local_settings()}
            d = self.agent(host, "deploy", spec, timeout=600, on_line=lambda l: log.info("[%s] %s", host.name, l))
            ep = BrokerEndpoint.from_dict(d)
            ep.durability = {**ep.durability, "deploy_mode": "local (the local environment's broker, started on "
                             f"{host.name} over SSH)"}
            return ep
        ep = deploy_installed(self, broker, broker_settings, variant, driver_overrides, jvm_options=jvm_options)
        self._write_metrics_targets(ep)
        return ep

    def _write_metrics_targets(self, ep: BrokerEndpoint) -> None:
        """Each broker host's own metrics endpoints of the cluster just deployed, into its
        ``<host dir>/brokermetrics/targets.json``, where the phase's scraper finds them (:mod:`.metrics_endpoints`)."""
        exporter = (ep.durability.get("cluster") or {}).get("metrics_exporter") or {}
        addresses = {h["name"]: h["address"] for h in self.fleet()["hosts"]}  # where the scripts bound them
        for host in self.hosts("broker"):
            targets = host_targets(ep.broker, addresses.get(host.name, host.address), ep.implementation, ep.version,
                                   kafka_exporter=bool(exporter) and "error" not in exporter)
            try:
                host.put_text(json.dumps([t.to_dict() for t in targets]), f"{self.host_dir(host)}/{TARGETS_FILE}")
            except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a deploy
                log.warning("[%s] broker metrics targets not written (no broker metrics there): %s", host.name, e)

    def kill_broker_node(self, broker: str, index: int) -> dict[str, Any]:
        """SIGKILL every process of ``broker`` on the ``index``-th broker host (fault tests; deploy_mode install)."""
        if self.settings.deploy_mode != "install":
            raise EnvironmentFailure("killing one node of a cluster needs deploy_mode install")
        return kill_node(self, broker, index)

    def start_broker_node(self, broker: str, index: int) -> dict[str, Any]:
        """Start the ``index``-th broker node of ``broker`` again after :meth:`kill_broker_node`."""
        return start_node(self, broker, index)

    def _local_settings(self) -> dict[str, Any]:
        """The settings of the agent's brokers (deploy_mode local), serialised for its spec file: the local
        environment's settings of that name, those set. The version string means what it means on the local
        environment: the agent resolves it from Maven Central on the host (or runs the tarball a *_home
        setting names)."""
        keep = {"broker_versions", "broker_implementations", "kafka_home", "pulsar_home", "kafka_heap_mb",
                "pulsar_heap_mb", "start_timeout_s"}
        return {k: v for k, v in self.settings.model_dump(include=keep).items() if v}

    def health(self, broker: str) -> dict[str, Any]:
        if self.settings.deploy_mode == "local":
            return self.agent(self.hosts("broker")[0], "health",
                              {"broker": broker, "settings": self._local_settings()}, timeout=120)
        return health_installed(self, broker)

    def undeploy(self, broker: str) -> None:
        if self.settings.deploy_mode == "local":
            self.agent(self.hosts("broker")[0], "undeploy", {"broker": broker, "settings": self._local_settings()},
                       timeout=300)
            return
        undeploy_installed(self, broker)
        for host in self.hosts("broker"):  # nothing of the broker is left to scrape
            host.run(f"rm -f {shlex.quote(self.host_dir(host) + '/' + TARGETS_FILE)}", timeout=60)

    # -- phases: page cache, host metrics ----------------------------------------------------
    def before_phase(self, phase: str, label: str) -> dict[str, Any]:
        """Before a phase: page cache dropped on broker hosts (measured phase), metrics samplers started."""
        rec: dict[str, Any] = {"phase": phase, "label": label, "page_cache": [], "metrics": []}
        if phase == "measure":
            for host in self.hosts("broker") + self.hosts("metadata"):
                if self.host_changes:
                    r = host.sudo("sync && echo 3 > /proc/sys/vm/drop_caches", timeout=120)
                    rec["page_cache"].append({"host": host.name, "dropped": r.ok,
                                              "note": "sync; echo 3 > /proc/sys/vm/drop_caches" if r.ok else
                                              (r.stderr or r.stdout).strip()[-300:]})
                else:
                    rec["page_cache"].append({"host": host.name, "dropped": False,
                                              "note": "host_changes off (ssh_host_override): not dropped"})

        def start(host: SshHost) -> str:
            out = f"{self.host_dir(host)}/metrics/{label}.jsonl"
            self.agent(host, "metrics-start", None, timeout=60,
                       extra=f"--out {shlex.quote(out)} --host {shlex.quote(host.name)} "
                             f"--interval {float(self.settings.metrics_interval_s)} "
                             f"--run-root {shlex.quote(self.run_dir())}")
            return out

        hosts = self.hosts()
        for host, res in zip(hosts, self._on_each(hosts, start)):  # every host at once: one SSH round trip each
            rec["metrics"].append({"host": host.name, "error": str(res)} if isinstance(res, Exception)
                                  else {"host": host.name, "remote": res})
        return rec

    # -- phases: the brokers' own metrics ------------------------------------------------------
    def _broker_metrics_hosts(self) -> list[SshHost]:
        """The hosts that run a broker's processes: every broker host (install), the first (local)."""
        hosts = self.hosts("broker")
        return hosts[:1] if self.settings.deploy_mode == "local" else hosts

    def _on_each(self, hosts: list[SshHost], fn) -> list[Any]:
        """``fn(host)`` on every host at once (an SSH round trip each), its exception as its result: the phases'
        samplers and scrapers explain numbers and never stop a run."""
        def call(host: SshHost) -> Any:
            try:
                return fn(host)
            except Exception as e:  # noqa: BLE001 - metrics explain numbers, they never stop a run
                return e
        if not hosts:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(hosts)), thread_name_prefix="phase-metrics") as pool:
            return list(pool.map(call, hosts))

    @override
    def start_broker_metrics(self, label: str) -> dict[str, Any] | None:
        """On each broker host, a scraper of that host's own endpoints (:mod:`.metrics_endpoints`), started by the
        agent (``brokermetrics-start``) and recorded in the host's state directory like the host sampler."""
        spec = {"settings": self._local_settings()} if self.settings.deploy_mode == "local" else None

        def start(host: SshHost) -> dict[str, Any]:
            hd = self.host_dir(host)
            return self.agent(host, "brokermetrics-start", spec, timeout=60,
                              extra=f"--out {shlex.quote(f'{hd}/metrics/{label}.brokers.jsonl')} "
                                    f"--host {shlex.quote(host.name)} "
                                    f"--interval {float(self.settings.metrics_interval_s)} "
                                    f"--targets-file {shlex.quote(f'{hd}/{TARGETS_FILE}')}")

        try:
            hosts = self._broker_metrics_hosts()
        except Exception as e:  # noqa: BLE001 - no fleet: no broker metrics, the phase decides the run
            return {"error": f"{type(e).__name__}: {e}"}
        rec: dict[str, Any] = {"targets": [], "hosts": {}}
        for host, res in zip(hosts, self._on_each(hosts, start)):
            if isinstance(res, Exception):
                rec["hosts"][host.name] = {"error": str(res)}
                log.warning("[%s] broker metrics not started: %s", host.name, res)
            else:
                rec["hosts"][host.name] = res
                rec["targets"] += res.get("targets") or []
        if not rec["targets"] and not any("error" in r for r in rec["hosts"].values()):
            return None  # nothing deployed serves metrics (a stand-in)
        return rec

    @override
    def stop_broker_metrics(self, label: str, dest_dir: str) -> dict[str, Any]:
        """Stop each broker host's scraper and copy its file to ``dest_dir/<host>.jsonl``; {host: file}."""
        def stop(host: SshHost) -> str | None:
            remote = f"{self.host_dir(host)}/metrics/{label}.brokers.jsonl"
            self.agent(host, "brokermetrics-stop", None, timeout=60, extra=f"--out {shlex.quote(remote)}")
            local = str(Path(dest_dir) / f"{host.name}.jsonl")
            return local if host.get_file(remote, local) else None

        try:
            hosts = self._broker_metrics_hosts()
        except Exception as e:  # noqa: BLE001 - nothing provisioned: nothing to stop
            log.warning("broker metrics: no hosts to stop them on: %s", e)
            return {}
        out: dict[str, Any] = {}
        for host, res in zip(hosts, self._on_each(hosts, stop)):
            if isinstance(res, Exception):
                log.warning("[%s] broker metrics not brought back: %s", host.name, res)
            elif res:
                out[host.name] = res
        return out

    @override
    def after_phase(self, phase: str, label: str, dest_dir: str) -> dict[str, Any]:
        """Stop the samplers and copy each host's samples to ``dest_dir/<host>.jsonl``."""
        def stop(host: SshHost) -> dict[str, Any] | None:
            remote = f"{self.host_dir(host)}/metrics/{label}.jsonl"
            local = str(Path(dest_dir) / f"{host.name}.jsonl")
            self.agent(host, "metrics-stop", None, timeout=60, extra=f"--out {shlex.quote(remote)}")
            if not host.get_file(remote, local):
                return None
            return {"role": host.role, "file": local,
                    **hostmetrics.summarise(hostmetrics.parse_lines(Path(local).read_text()))}

        out: dict[str, Any] = {}
        hosts = self.hosts()
        for host, res in zip(hosts, self._on_each(hosts, stop)):  # every host at once
            if isinstance(res, Exception):
                out[host.name] = {"role": host.role, "error": str(res)}
            elif res is not None:
                out[host.name] = res
        return out

    # -- workers ------------------------------------------------------------------------------
    def run_workers(self, jobs: list[dict[str, Any]], out_paths: list[str],
                    timeout_s: float) -> list[dict[str, Any]]:
        """Jobs spread round-robin over the client hosts; on each host the agent runs
        them (output relayed line by line); result files are copied back."""
        if len(jobs) != len(out_paths):
            raise ValueError(f"{len(jobs)} jobs but {len(out_paths)} output paths")
        clients = self.hosts("client")
        if not clients:
            raise EnvironmentFailure("the fleet has no client host")
        per_host: dict[int, list[int]] = {}
        for i in range(len(jobs)):
            per_host.setdefault(i % len(clients), []).append(i)
        results: list[dict[str, Any] | None] = [None] * len(jobs)
        threads = []

        def run_on(hi: int, idx: list[int]) -> None:
            host = clients[hi]
            hd = self.host_dir(host)
            stamp = time.strftime("%Y%m%dT%H%M%S")
            rjobs: list[dict[str, Any]] = []
            routs: list[str] = []
            for i in idx:
                job = json.loads(json.dumps(jobs[i], default=str))
                payload = (job.get("workload") or {}).get("payloadFile")
                if payload and Path(payload).is_file():
                    remote_payload = f"{hd}/payloads/{Path(payload).name}"
                    host.put_file(payload, remote_payload)
                    job["workload"]["payloadFile"] = remote_payload
                rjobs.append(job)
                routs.append(f"{hd}/results/{stamp}-{i}-{Path(out_paths[i]).name}")
            res: list[dict[str, Any]]
            try:
                environ = {**self.worker_environ, **self._ship_client_engine(host)}
                res = self.agent(host, "run-workers", {"jobs": rjobs, "out_paths": routs, "timeout_s": timeout_s},
                                 timeout=timeout_s + 120, on_line=lambda l: log.info("%s", l), environ=environ)
            except EnvironmentFailure as e:
                res = [{"worker": rjobs[k].get("worker"), "returncode": 255, "error": str(e)} for k in range(len(idx))]
            for k, i in enumerate(idx):
                r: dict[str, Any] = dict(res[k]) if k < len(res) else {
                    "worker": jobs[i].get("worker"), "returncode": 255, "error": "no result from the agent"}
                try:
                    copied = host.get_file(routs[k], out_paths[i])
                except Exception as e:  # noqa: BLE001
                    copied = False
                    r["error"] = (r.get("error") or "") + f"; copy back failed: {e}"
                if not copied and not r.get("error"):
                    r["error"] = f"no result file on {host.name}"
                r.update(path=out_paths[i], host=host.name)
                results[i] = r

        for hi, idx in per_host.items():
            t = threading.Thread(target=run_on, args=(hi, idx), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        return [r for r in results if r is not None]

    def provide_client_engine(self, build_dir: str) -> None:
        self.client_engine = Path(build_dir)

    def _ship_client_engine(self, host: SshHost) -> dict[str, str]:
        """The JVM engine's build on ``host`` (copied once per build, whose jar's SHA-256 names its directory there;
        the manifest last, so an interrupted copy is no build), as the environment variable its workers find it
        by. Client hosts build nothing: their installed package has no engine sources, and no Maven is needed."""
        if self.client_engine is None:
            return {}
        manifest = json.loads((self.client_engine / "manifest.json").read_text())
        remote = f"{self.remote_dir}/jvm-engine/{manifest['jar']['sha256'][:16]}"
        with self._install_locks.setdefault((host.address, host.port), threading.Lock()):
            if not host.run(f"test -f {shlex.quote(remote + '/manifest.json')}").ok:
                started = time.monotonic()
                files = [self.client_engine / manifest["jar"]["name"]]
                files += [self.client_engine / "lib" / j["name"] for j in manifest["lib"]]
                for f in files:
                    host.put_file(str(f), f"{remote}/{f.relative_to(self.client_engine)}")
                host.put_text(json.dumps(manifest, indent=2), f"{remote}/manifest.json")
                log.info("[%s] JVM engine shipped to %s: %d files in %.1f s", host.name, remote, len(files),
                         time.monotonic() - started)
        return {"BROKERBENCH_JVM_ENGINE_DIR": remote}

    def stop_workers(self) -> list[str]:
        """Stop this run's workers on every client host (the agent's ``stop-workers``), e.g. when the phase
        task was killed: the SSH session's end does not stop the workers the agent started."""
        stopped: list[str] = []
        try:
            clients = self.hosts("client")
        except Exception as e:  # noqa: BLE001 - nothing provisioned: nothing to stop
            log.info("stop workers: no client hosts (%s)", e)
            return stopped
        for host in clients:
            try:
                res = self.agent(host, "stop-workers", None, timeout=60)
                stopped += [f"{host.name}: {w}" for w in res.get("stopped", [])]
            except Exception as e:  # noqa: BLE001 - the others still get stopped
                log.warning("stop workers on %s failed: %s", host.name, e)
        return stopped

    # -- teardown ----------------------------------------------------------------------------
    def teardown(self) -> dict[str, Any]:
        """Terminate every instance tagged with the run (found by tag, not by ids
        handed over), wait until terminated, delete the security group."""
        record: dict[str, Any] = {"environment": self.name, "run_key": self.run_key, "errors": []}
        if self.override or self.settings.host_addresses or self.static:
            # hosts that outlive the instances (a stand-in sshd, mapped addresses, static hosts): stop what
            # brokerbench started there (real instances take their processes with them when terminated)
            record["host_processes"] = self._stop_host_processes(record)
        if self.static:
            record.update(remaining=[], note="static hosts: processes stopped, no machine terminated")
            self.state_dir.mkdir(parents=True, exist_ok=True)
            _write(self.state_dir / "teardown.json", record)
            if record["errors"]:
                raise EnvironmentFailure(f"teardown incomplete: {record}")
            return record
        try:
            result = self.fleet_api().terminate_run()
            errors = result.pop("errors", [])
            record.update(result)
            record["errors"] += [f"EC2: {e}" for e in errors]
        except Exception as e:  # noqa: BLE001 - recorded, and the task fails below
            record["errors"].append(f"EC2: {type(e).__name__}: {e}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _write(self.state_dir / "teardown.json", record)
        if record.get("remaining") or any(e.startswith("EC2") for e in record["errors"]):
            raise EnvironmentFailure(f"teardown incomplete: {record}")
        return record

    def _stop_host_processes(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            hosts = self.hosts()
        except Exception as e:  # noqa: BLE001 - nothing provisioned
            record["errors"].append(f"hosts: {e}")
            return out
        for host in hosts:
            try:
                res = self.agent(host, "teardown", None, timeout=120)
                rec = {"host": host.name, "stopped": len(res.get("stopped", [])),
                       "remaining": res.get("remaining", [])}
            except Exception as e:  # noqa: BLE001
                record["errors"].append(f"{host.name}: {e}")
                rec = {"host": host.name}
            # the processes the broker scripts started (deploy_mode install): one pid file each
            rec["script_processes"] = self._stop_script_processes(host, record)
            out.append(rec)
        return out

    def _stop_script_processes(self, host: SshHost, record: dict[str, Any]) -> list[str]:
        """SIGTERM each process group in ``<host dir>/pids``, SIGKILL what is left after 30 s; the names stopped."""
        pids = shlex.quote(f"{self.host_dir(host)}/pids")
        res = host.sudo(
            f"[ -d {pids} ] || exit 0; cd {pids}; for f in *.pid; do [ -f \"$f\" ] || continue; "
            f"kill -TERM -- \"-$(cat \"$f\")\" 2>/dev/null && echo \"${{f%.pid}}\"; done; "
            f"for i in $(seq 300); do alive=0; for f in *.pid; do [ -f \"$f\" ] && kill -0 -- \"-$(cat \"$f\")\" "
            f"2>/dev/null && alive=1; done; [ $alive = 0 ] && break; sleep 0.1; done; "
            f"for f in *.pid; do [ -f \"$f\" ] && kill -KILL -- \"-$(cat \"$f\")\" 2>/dev/null; rm -f \"$f\"; done; true",
            timeout=120)
        if not res.ok:
            record["errors"].append(f"{host.name}: stopping the scripts' processes: {res.stderr.strip()[-300:]}")
        return res.stdout.split()


ROLE_ORDER = {"broker": 0, "metadata": 1, "client": 2, None: 3}


def _parse_kv(text: str, prefix: str) -> list[dict[str, str]]:
    """Lines ``PREFIX key=value key=value`` printed by the host scripts."""
    out = []
    for line in (text or "").splitlines():
        if line.startswith(prefix + " "):
            out.append(dict(p.split("=", 1) for p in line[len(prefix) + 1:].split() if "=" in p))
    return out


def _write(path: Path, data: Any) -> None:
    write_json_atomic(path, data, sort_keys=False)


def _cost_line(c: dict[str, Any]) -> str:
    money = aws_fleet.money
    roles = ", ".join(f"{r['count']} x {r['instance_type']} (${r['usd_per_hour_each']}/h)" for r in c["roles"].values())
    cap = c["cost_cap_usd"]
    expected, cap_text = (aws_fleet.money_pair(c["expected_usd"], cap) if cap is not None
                          else (money(c["expected_usd"]), "none"))
    return (f"{roles} = ${c['usd_per_hour']}/h x {c['expected_hours']} h expected = {expected} "
            f"(at most {money(c['max_usd'])} over the {c['max_lifetime_hours']} h lifetime; cap {cap_text})")

