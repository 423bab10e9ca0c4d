"""The JVM load engine: the worker in Java (``include/jvm-worker``), with the brokers' own Java clients.

The Python drivers are the limit for some brokers (pulsar-client reaches about 17,000 msg/s per process
where pulsar-perf reaches 330,000: docs/benchmarks-harness.md); the JVM engine runs the same job with the
Java client and writes the same result file (docs/results-format.md, the same histogram buckets), so
everything after the worker takes its results unchanged. It is chosen like a client library
(``client_libraries: {"pulsar": "pulsar-client-java"}``, alias ``java``); the Python worker validates the
job and prepares the topics with the broker's Python driver, then runs the engine as a child process
(:func:`run_job`).

Built once with Maven from ``include/jvm-worker`` into the broker cache
(``<BROKERBENCH_BROKER_CACHE or ~/.cache/brokerbench/brokers>/jvm-worker/<source hash>/``: the worker's jar,
``lib/`` with the client jars, ``manifest.json`` with every jar's SHA-256). ``mvn -o`` first (offline, when
Maven's local repository already holds everything), else online (Maven Central); a cached build needs
neither Maven nor the network. The source hash covers the pom and every source file, so a changed engine
is built afresh.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from brokerbench.worker.job import Job

#: the Maven module (this file is include/brokerbench/worker/jvm.py)
SOURCE_DIR = Path(__file__).resolve().parents[2] / "jvm-worker"
JAR_NAME = "brokerbench-jvm-worker.jar"
MAIN_CLASS = "brokerbench.jvm.Main"
#: broker -> the JVM engine's client library (what result rows record) and the pom property of its version
JVM_LIBRARIES: dict[str, tuple[str, str]] = {
    "pulsar": ("pulsar-client-java", "pulsar.version"),
    "kafka": ("kafka-clients-java", "kafka.version"),
    "rabbitmq": ("amqp-client-java", "amqp-client.version"),
}
#: a build of the engine made elsewhere (jar, lib/, manifest.json): what the aws environment ships to client hosts,
#: whose installed package has no engine sources to build from (docs/worker.md "The JVM engine")
ENGINE_DIR_ENV = "BROKERBENCH_JVM_ENGINE_DIR"
#: the JVM's options (BROKERBENCH_JVM_WORKER_OPTS replaces them): a small heap, the worker holds only
#: histograms and the messages in flight
DEFAULT_JVM_OPTS = ["-Xms128m", "-Xmx768m", "-XX:+UseParallelGC", "-XX:TieredStopAtLevel=4"]
#: how long a build may take (the first one downloads the client jars and Maven's plugins)
BUILD_TIMEOUT_S = 900.0


class JvmEngineError(RuntimeError):
    """The engine could not be built or started (names what to do)."""


def library_version(broker: str) -> str:
    """The Java client's version the pom pins for ``broker`` (e.g. 4.0.7 for pulsar-client-java); on a host
    without the engine's sources (an installed package), the one the shipped build's manifest records."""
    prop = JVM_LIBRARIES[broker][1]
    if not (SOURCE_DIR / "pom.xml").exists():
        shipped = manifest()
        if shipped is None:
            raise JvmEngineError(f"no JVM engine sources ({SOURCE_DIR}) and no shipped build (${ENGINE_DIR_ENV})")
        return str(shipped["libraries"][broker]["version"])
    m = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", (SOURCE_DIR / "pom.xml").read_text())
    if not m:
        raise JvmEngineError(f"{SOURCE_DIR / 'pom.xml'} has no <{prop}>")
    return m.group(1).strip()


def cache_root() -> Path:
    """The broker cache (as brokerbench.environments.machine.distributions.cache_root, which the worker may not
    import: docs/architecture.md)."""
    if os.environ.get("BROKERBENCH_BROKER_CACHE"):
        return Path(os.environ["BROKERBENCH_BROKER_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "brokerbench" / "brokers"


def _sources() -> list[Path]:
    files = [SOURCE_DIR / "pom.xml"] + sorted(p for p in (SOURCE_DIR / "src").rglob("*") if p.is_file())
    return [p for p in files if "__pycache__" not in p.parts]


def source_hash() -> str:
    """SHA-256 over the pom and every source file (relative path and content)."""
    h = hashlib.sha256()
    for p in _sources():
        h.update(str(p.relative_to(SOURCE_DIR)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def engine_dir() -> Path:
    """The engine's build: the directory ``$BROKERBENCH_JVM_ENGINE_DIR`` names (a build shipped to this host), else
    this source's build in the broker cache."""
    shipped = os.environ.get(ENGINE_DIR_ENV)
    if shipped:
        return Path(shipped)
    return cache_root() / "jvm-worker" / source_hash()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def manifest() -> dict[str, Any] | None:
    """The cached build's manifest (None when it is not built)."""
    path = engine_dir() / "manifest.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


def ensure_built(progress: Callable[[str], None] = print) -> dict[str, Any]:
    """The engine's manifest, building it first when the cache does not hold this source's build.

    One build at a time per source hash (a file lock); Maven offline first, then online."""
    target = engine_dir()
    with _locked(target.parent / f"{target.name}.lock"):
        found = manifest()
        if found is not None:
            return found
        if os.environ.get(ENGINE_DIR_ENV):
            raise JvmEngineError(f"${ENGINE_DIR_ENV} names {target}, which holds no engine build (manifest.json)")
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JvmEngineError("the JVM engine needs Maven for its first build (make setup installs it), "
                                 f"or a build in {target}")
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="jvm-worker-build-", dir=target.parent) as tmp:
            src = Path(tmp) / "src"
            shutil.copytree(SOURCE_DIR, src, ignore=shutil.ignore_patterns("target"))
            mode, out = "offline", None
            for mode, args in (("offline", ["-o"]), ("online", [])):
                out = subprocess.run([mvn, "-B", "-q", *args, "package"], cwd=src, capture_output=True, text=True,
                                     timeout=BUILD_TIMEOUT_S)
                if out.returncode == 0:
                    break
            assert out is not None
            if out.returncode != 0:
                tail = "\n".join((out.stdout + out.stderr).splitlines()[-15:])
                raise JvmEngineError(f"building the JVM engine with Maven failed (offline and online):\n{tail}")
            staged = Path(tmp) / "engine"
            (staged / "lib").mkdir(parents=True)
            shutil.copy2(src / "target" / JAR_NAME, staged / JAR_NAME)
            for jar in sorted((src / "target" / "lib").glob("*.jar")):
                shutil.copy2(jar, staged / "lib" / jar.name)
            record = {
                "engine": "jvm", "source_hash": source_hash(), "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "maven": mode, "build_s": round(time.monotonic() - t0, 1),
                "jar": {"name": JAR_NAME, "sha256": _sha256(staged / JAR_NAME)},
                "libraries": {b: {"client_library": lib, "version": library_version(b)}
                              for b, (lib, _) in JVM_LIBRARIES.items()},
                "lib": [{"name": j.name, "sha256": _sha256(j), "size": j.stat().st_size}
                        for j in sorted((staged / "lib").glob("*.jar"))],
            }
            (staged / "manifest.json").write_text(json.dumps(record, indent=2))
            if target.exists():
                shutil.rmtree(target)  # a build interrupted before its manifest
            staged.rename(target)
        progress(f"JVM engine built with Maven ({mode}) in {record['build_s']:.0f} s: {target}")
        return record


def java_command(*args: str) -> list[str]:
    """``java <options> -cp <engine> brokerbench.jvm.Main <args>`` (the engine built first when needed)."""
    from brokerbench import __version__

    m = ensure_built()
    home = engine_dir()
    opts = os.environ.get("BROKERBENCH_JVM_WORKER_OPTS", "").split() or DEFAULT_JVM_OPTS
    java = shutil.which("java")
    if java is None:
        raise JvmEngineError("the JVM engine needs a JDK 17 (java on PATH)")
    return [java, *opts, f"-Dbrokerbench.version={__version__}", f"-Dbrokerbench.engine.sha256={m['jar']['sha256']}",
            "-cp", f"{home / JAR_NAME}:{home / 'lib'}/*", MAIN_CLASS, *args]


def command(job_path: str, out_path: str) -> list[str]:
    """The java command line of one run of the engine."""
    return java_command("run", "--job", job_path, "--out", out_path)


def run_job(job: Job, out_path: str, progress: Callable[[str], None] = print) -> tuple[int, str]:
    """Run one phase in the engine: (exit code, the last line of its error output)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="bb-jvm-job-", delete=False) as f:
        f.write(job.to_json())
        job_path = f.name
    try:
        argv = command(job_path, out_path)
        jar = ((manifest() or {}).get("jar") or {}).get("sha256", "?")
        progress(f"[{job.worker}] {job.phase}: the JVM engine in {engine_dir()} (jar SHA-256 {jar[:12]}...)")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", bufsize=1)
        errors: list[str] = []

        def relay_errors() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                line = line.rstrip("\n")
                errors.append(line)
                del errors[:-50]
                progress(line)

        import threading

        t = threading.Thread(target=relay_errors, daemon=True)
        t.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            progress(line.rstrip("\n"))
        proc.wait()
        t.join(timeout=5)
        last = next((e for e in reversed(errors) if e.startswith("brokerbench-jvm-worker:")),
                    errors[-1] if errors else "")
        return proc.returncode, last
    finally:
        os.unlink(job_path)
