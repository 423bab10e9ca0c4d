"""Loopback stand-ins for AWS, used by the aws tests (no real AWS call, ever).

* ``moto_server``: moto's server mode (``ThreadedMotoServer``) on 127.0.0.1 and
  a free port: a real HTTP endpoint for EC2 and S3. The Airflow connection
  ``brokerbench_aws`` (``AIRFLOW_CONN_BROKERBENCH_AWS``) points at it through
  ``extra.endpoint_url``.
* ``sshd``: a real OpenSSH server on 127.0.0.1 and a free port, with its own host
  key and a client key in its authorized_keys. Every "instance" is reached
  there (settings ``ssh_host_override`` / ``ssh_port``); the Airflow connection
  ``brokerbench_ssh`` carries the user and key file.

Both are started by the tests themselves and stopped at the end of the session.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0, address: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {address}:{port} after {timeout} s")


def start_sshd(d: Path, address: str, port: int, authorized_keys: Path):
    """An OpenSSH server with a host key of its own in ``d``, on ``address``:``port`` only; (process, log file)."""
    host_key = d / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    config = d / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", f"ListenAddress {address}", f"HostKey {host_key}", f"AuthorizedKeysFile {authorized_keys}",
        f"PidFile {d / 'sshd.pid'}", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no", "PrintMotd no",
        "Subsystem sftp internal-sftp", "MaxSessions 50", "MaxStartups 50:30:100", "LogLevel ERROR", ""]))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    log = open(d / "sshd.log", "w")
    return subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT), log


def stop_sshd(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def moto_server():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    wait_port(port)
    endpoint = f"http://127.0.0.1:{port}"
    conn = {"conn_type": "aws", "login": "testing", "password": "testing",
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    old = {k: os.environ.get(k) for k in ("AIRFLOW_CONN_BROKERBENCH_AWS", "AWS_DEFAULT_REGION")}
    os.environ["AIRFLOW_CONN_BROKERBENCH_AWS"] = json.dumps(conn)
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    yield {"endpoint": endpoint, "port": port, "conn": conn}
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


def ec2_client(moto_server):
    import boto3

    return boto3.client("ec2", endpoint_url=moto_server["endpoint"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def s3_client(moto_server):
    import boto3

    return boto3.client("s3", endpoint_url=moto_server["endpoint"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def instances_in_state(moto_server, state: str, run_key: str | None = None) -> list[str]:
    filters = [{"Name": "instance-state-name", "Values": [state]}]
    if run_key:
        filters.append({"Name": "tag:brokerbench:run", "Values": [run_key]})
    res = ec2_client(moto_server).describe_instances(Filters=filters)
    return [i["InstanceId"] for r in res["Reservations"] for i in r["Instances"]]


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    base = tmp_path_factory.mktemp("sshd")
    client_key = base / "client_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key)], check=True)
    auth = base / "authorized_keys"
    auth.write_text(Path(f"{client_key}.pub").read_text())
    auth.chmod(0o600)
    port = free_port()
    proc, log = start_sshd(base, "127.0.0.1", port, auth)
    host_key = base / "host_ed25519"
    try:
        wait_port(port)
    except RuntimeError:
        proc.kill()
        raise RuntimeError((base / "sshd.log").read_text())
    user = getpass.getuser()
    conn = {"conn_type": "ssh", "host": "127.0.0.1", "login": user, "port": port,
            "extra": {"key_file": str(client_key), "no_host_key_check": True}}
    old = os.environ.get("AIRFLOW_CONN_BROKERBENCH_SSH")
    os.environ["AIRFLOW_CONN_BROKERBENCH_SSH"] = json.dumps(conn)
    yield {"port": port, "user": user, "key": str(client_key), "host_key": str(host_key), "conn": conn,
           "pid": proc.pid, "dir": base}
    if old is None:
        os.environ.pop("AIRFLOW_CONN_BROKERBENCH_SSH", None)
    else:
        os.environ["AIRFLOW_CONN_BROKERBENCH_SSH"] = old
    stop_sshd(proc, log)


def moto_ami(moto_server) -> str:
    images = ec2_client(moto_server).describe_images(Owners=["amazon"])["Images"]
    return sorted(i["ImageId"] for i in images)[0]


def aws_settings(moto_server, sshd, tmp_path: Path, **extra) -> dict:
    """Settings of a loopback aws run: moto for EC2/S3, every instance = the sshd."""
    settings = {
        "ami": moto_ami(moto_server), "controller_cidr": "127.0.0.1/32",
        "instance_types": {"broker": "t3.micro", "metadata": "t3.micro", "client": "t3.micro"},
        "counts": {"broker": 1, "client": 1}, "cost_cap_usd": 5.0,
        "ssh_host_override": "127.0.0.1", "ssh_port": sshd["port"],
        "deploy_mode": "local", "remote_dir": str(tmp_path / "remote"), "remote_python": sys.executable,
        "state_dir": str(tmp_path / "state"), "disk_baseline_mb": 4, "time_sync_wait_s": 2,
        "metrics_interval_s": 0.5,
    }
    settings.update(extra)
    return settings


#: the loopback fleet's host addresses: one sshd each, every broker binding its usual ports there
FLEET_ADDRESSES = [f"127.0.1.{i}" for i in range(1, 9)]


def _port_free_everywhere(addresses: list[str]) -> int:
    for _ in range(50):
        port = free_port()
        try:
            for a in addresses:
                with socket.socket() as s:
                    s.bind((a, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no port free on all of {addresses}")


@pytest.fixture(scope="session")
def loopback_fleet(sshd):
    """Hosts that behave like a fleet: an OpenSSH server of its own on each of :data:`FLEET_ADDRESSES`
    (own host key, listening on its address only), reached with the ``brokerbench_ssh`` connection's key.
    A test maps the instances moto returns onto them with the setting ``host_addresses``."""
    base = sshd["dir"] / "fleet"
    base.mkdir()
    port = _port_free_everywhere(FLEET_ADDRESSES)
    servers = []
    for address in FLEET_ADDRESSES:
        (base / address).mkdir()
        servers.append(start_sshd(base / address, address, port, sshd["dir"] / "authorized_keys"))
    for address in FLEET_ADDRESSES:
        try:
            wait_port(port, address=address)
        except RuntimeError as e:
            raise RuntimeError(f"{e}: {(base / address / 'sshd.log').read_text()}") from e
    yield {"addresses": FLEET_ADDRESSES, "port": port, "dir": base}
    for proc, log in servers:
        stop_sshd(proc, log)


def fleet_settings(moto_server, loopback_fleet, tmp_path: Path, counts: dict[str, int], **extra) -> dict:
    """Settings of an aws run on the loopback fleet: moto's instances, each role's hosts mapped in order onto
    the fleet's addresses (brokers first, then metadata, then clients), broker clusters installed by the
    scripts from artifacts the controller resolves and ships (deploy_mode install), heaps sized for 2 cores."""
    addresses = iter(loopback_fleet["addresses"])
    mapping = {role: [next(addresses) for _ in range(counts.get(role, 0))] for role in ("broker", "metadata", "client")}
    settings = aws_settings(moto_server, {"port": loopback_fleet["port"]}, tmp_path, ssh_host_override=None,
                            counts=counts, host_addresses=mapping, deploy_mode="install",
                            data_dir=str(tmp_path / "data"),
                            heaps_mb={"kafka": 512, "pulsar-broker": 512, "bookie": 384, "zookeeper": 128},
                            # every node's metrics endpoints are scraped (a Pulsar broker's /metrics took 120-230 ms
                            # a read on the fleet's 2 shared cores): once a second, the product's default
                            start_timeout_s=240, metrics_interval_s=1.0)
    settings.update(extra)
    return settings


def processes_under(path: Path) -> list[str]:
    """Command lines of live processes that name a file under ``path`` (brokers, ZooKeeper, workers, samplers)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd:
            out.append(f"{proc.name}: {cmd[:200]}")
    return out
