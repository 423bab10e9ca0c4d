"""A real Airflow deployment on loopback, shaped as teams run brokerbench nightly.

- PostgreSQL (Debian's server, a cluster of the test's own on a free loopback
  port) as the metadata database;
- RabbitMQ (Debian's server, a node of its own, started by brokerbench's own
  RabbitMQ code) as the Celery broker;
- the Airflow api-server, scheduler, dag-processor and triggerer, and two
  Celery workers, as separate processes with CeleryExecutor. Each worker has
  its own working directory, AIRFLOW_HOME (logs) and BROKERBENCH_HOME (staging
  copies): nothing one worker writes to its disk is visible to the other. Each
  reports its own name as the task instances' hostname (worker_hostname.py);
- moto's server as S3, holding the results (``s3://<bucket>/results``);
- a Spark standalone cluster (master and one worker from the installed
  PySpark, tests/support/spark_standalone.py) as the ``brokerbench_spark``
  connection.

Everything is started in its own process group and stopped (SIGTERM, then
SIGKILL) by :meth:`Deployment.stop`.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import requests

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUCKET = "brokerbench-deploy"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL server is not installed (Debian package postgresql); "
                           "include/infra/local/bootstrap.sh installs it when run as root")
    return found[-1].parent


class Postgres:
    """A PostgreSQL cluster of our own: initdb into a temporary folder, listening on 127.0.0.1 only."""

    def __init__(self, root: Path):
        # its own folder: the postgres user cannot enter pytest's (root-only) temporary tree
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="brokerbench-pg-")) / "pgdata"
        self.port = free_port()
        self.bin = _pg_bin()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            pwd.getpwnam("postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *argv: str, timeout: float = 120) -> None:
        done = subprocess.run([*self.as_user, *argv], timeout=timeout, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stdout[-1500:]} {done.stderr[-1500:]}")

    def start(self) -> str:
        self.dir.mkdir(parents=True)
        if self.as_user:
            shutil.chown(self.dir.parent, "postgres", "postgres")
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.dir), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir), "-w", "-t", "60", "-l", str(self.dir / "log"),
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "airflow")
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/airflow"

    def stop(self) -> None:
        if (self.dir / "postmaster.pid").exists():
            subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.dir), "-m", "fast", "-w",
                            "-t", "60", "stop"], capture_output=True, timeout=90)
        shutil.rmtree(self.dir.parent, ignore_errors=True)


class CeleryBroker:
    """A RabbitMQ node of its own for Celery, started and stopped by brokerbench's RabbitMQ implementation."""

    def __init__(self, root: Path):
        self.dir = root / "celery-rabbitmq"
        self.broker = None

    def start(self) -> str:
        from brokerbench.environments.machine import make_broker

        self.broker = make_broker("rabbitmq", self.dir)
        endpoint = self.broker.start(None, "fsync-off", None)
        return endpoint.amqp_uris[0]

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()


class S3Server:
    """moto's server as S3 on a free loopback port, with the results bucket."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = None

    def start(self) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        self.client.create_bucket(Bucket=BUCKET)

    def connection(self) -> str:
        return json.dumps({"conn_type": "aws", "login": "testing", "password": "testing",
                           "extra": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}})

    def keys(self, prefix: str = "") -> list[str]:
        out = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def text(self, key: str) -> str:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class Deployment:
    """Airflow 3 components and two Celery workers on loopback, with brokerbench's DAGs and plugin."""

    COMPONENTS = {
        "api-server": ["api-server", "--host", "127.0.0.1", "--port", "{port}"],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
        "triggerer": ["triggerer", "--skip-serve-logs"],
    }
    WORKERS = ("worker-a", "worker-b")

    def __init__(self, root: Path, extra_env: dict[str, str] | None = None):
        self.root = root
        self.home = root / "airflow"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pg = Postgres(root)
        self.celery = CeleryBroker(root)
        self.s3 = S3Server()
        self.results_root = f"s3://{BUCKET}/results"
        self.spark = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.extra_env = extra_env or {}
        self.env: dict[str, str] = {}
        self.http = requests.Session()

    def worker_dir(self, name: str) -> Path:
        return self.root / name

    # -- life cycle -------------------------------------------------------------------
    def start(self, timeout_s: float = 240) -> None:
        sys.path.insert(0, str(REPO / "tests"))
        from support.spark_standalone import SparkStandalone

        conn = self.pg.start()
        celery_url = self.celery.start()
        self.s3.start()
        self.spark = SparkStandalone(self.root / "spark")
        self.spark.start(timeout_s=120)
        host, _, port = self.spark.master_url.rpartition(":")
        self.home.mkdir(parents=True, exist_ok=True)
        venv_bin = str(Path(sys.executable).parent)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BROKERBENCH", "SPARK_LOCAL"))},
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": celery_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + conn,
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn,
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": "brokerbench-deployment-test",
            "AIRFLOW__API__SECRET_KEY": "brokerbench-deployment-test",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # the results store and its credentials; the Spark cluster; executors reach the driver on loopback
            "BROKERBENCH_RESULTS_ROOT": self.results_root,
            "AIRFLOW_CONN_BROKERBENCH_AWS": self.s3.connection(),
            "AIRFLOW_CONN_BROKERBENCH_SPARK": json.dumps({
                "conn_type": "spark", "host": host, "port": int(port),
                "extra": {"conf": {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                                   "spark.pyspark.python": sys.executable}}}),
            # the local environment is this host: its state and processes live in a host directory every
            # worker on the host uses (docs/deployment.md); the workers' own disks are separate
            "BROKERBENCH_LOCAL_STATE_ROOT": str(self.root / "local-host"),
            "BROKERBENCH_HOME": str(self.root / "scheduler-home"),
            **self.extra_env,
        }
        self.airflow("db", "migrate", timeout=300)
        for name, argv in self.COMPONENTS.items():
            self._spawn(name, [a.format(port=self.port) for a in argv], self.env, self.root)
        for name in self.WORKERS:
            wd = self.worker_dir(name)
            (wd / "airflow").mkdir(parents=True, exist_ok=True)
            env = {**self.env, "AIRFLOW_HOME": str(wd / "airflow"), "BROKERBENCH_HOME": str(wd / "home"),
                   "BROKERBENCH_DEPLOY_WORKER": name,
                   "AIRFLOW__CORE__HOSTNAME_CALLABLE": "worker_hostname.hostname",
                   "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), self.env.get("PYTHONPATH")) if p)}
            self._spawn(name, ["celery", "worker", "--concurrency", "2", "--celery-hostname", f"{name}@%h",
                               "--skip-serve-logs", "--without-gossip", "--without-mingle"], env, wd)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if self.http.get(f"{self.url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(2)
        raise TimeoutError(f"the api-server did not answer on {self.url} within {timeout_s:.0f} s; "
                           f"see {self.root}/api-server.log")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        log = open(self.root / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), *argv], env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(cwd))

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"airflow {name} exited with {p.returncode}:\n{tail}")

    def airflow(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run([str(Path(sys.executable).parent / "airflow"), *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout, cwd=str(self.root))
        if done.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)}: exit {done.returncode}:\n{done.stdout[-2000:]}\n"
                               f"{done.stderr[-3000:]}")
        return done

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        # anything else of the deployment (a stray task runner) goes too
        for proc in self.processes():
            try:
                proc.kill()
            except psutil.Error:
                pass
        for part in (self.spark, self.celery, self.s3):
            try:
                if part is not None:
                    part.stop()
            except Exception as e:  # noqa: BLE001 - stop the rest whatever one did
                print(f"stopping {type(part).__name__}: {e}")
        self.pg.stop()

    def processes(self) -> list[psutil.Process]:
        """Processes of this deployment or its runs still alive (by their environment)."""
        found = []
        root = str(self.root)
        for proc in psutil.process_iter(["pid"]):
            try:
                env = proc.environ()
            except (psutil.Error, OSError):
                continue
            if env.get("AIRFLOW_HOME", "").startswith(root) or env.get("BROKERBENCH_STATE_DIR", "").startswith(
                    str(self.root / "local-host")) or env.get("BROKERBENCH_HOME", "").startswith(root):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        return found

    # -- the REST API -------------------------------------------------------------------
    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        self.check_alive()
        return self.http.request(method, f"{self.url}/api/v2{path}", timeout=30, **kw)

    def ok(self, method: str, path: str, **kw: Any) -> Any:
        r = self.api(method, path, **kw)
        if r.status_code >= 300:
            raise AssertionError(f"{method} {path}: HTTP {r.status_code}: {r.text[:2000]}")
        return r.json() if r.content else None

    def wait_for(self, what: str, predicate, timeout_s: float, poll_s: float = 3.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
            time.sleep(poll_s)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/dags/{dag_id}/dagRuns/{requests.utils.quote(run_id, safe='')}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/dags/{dag_id}/dagRuns/{requests.utils.quote(run_id, safe='')}/taskInstances",
                       params={"limit": 200})["task_instances"]
