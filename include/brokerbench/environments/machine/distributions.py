"""Apache Kafka and Apache Pulsar of any version, resolved from Maven Central into a cache.

A broker version is a *distribution*: a directory of jars (the runtime closure
of the broker artifact plus the logging jars Apache's own distribution adds)
that ``java -cp '<lib>/*' <main class>`` starts. The jars come from Maven
Central, once per version, through Maven (``mvn dependency:copy-dependencies``
on a generated pom), into a cache outside every run::

    <cache>/<broker>/<version>/lib/*.jar        the classpath
    <cache>/<broker>/<version>/manifest.json    artifact, version, every jar with its sha256 and size

``<cache>`` is ``BROKERBENCH_BROKER_CACHE``, else ``$XDG_CACHE_HOME/brokerbench/brokers``
(``~/.cache/brokerbench/brokers``). A version in the cache is used without
Maven and without the network; the manifest (checksums included) goes into
the run's provenance. Resolution holds a file lock per version, so tasks that
resolve the same version at once do it once.

==========  =====================================  ===================================================
broker      artifact                               logging added (as Apache's distribution does)
==========  =====================================  ===================================================
kafka 3.x   org.apache.kafka:kafka_2.13:<version>  reload4j + slf4j-reload4j (log4j 1 API, which 3.x uses)
kafka 4.x   org.apache.kafka:kafka_2.13:<version>  log4j-core + the log4j2 slf4j binding
pulsar      org.apache.pulsar:pulsar-broker:<v>    log4j-api/-core/slf4j binding pinned to one log4j version
==========  =====================================  ===================================================

Every ``org.apache.pulsar`` jar of a Pulsar distribution has the requested
version (checked after resolution).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import EnvironmentFailure
from ..processes import locked
from ..settings import LocalSettings

log = logging.getLogger("brokerbench")

#: broker -> (groupId, artifactId) of the broker artifact on Maven Central
ARTIFACTS = {"kafka": ("org.apache.kafka", "kafka_2.13"), "pulsar": ("org.apache.pulsar", "pulsar-broker")}
#: the brokers' own perf tools (brokerbench.crosscheck), resolved the same way into ``<cache>/<tool>/<version>``:
#: tool -> (groupId, artifactId); Kafka's and Pulsar's at the deployed broker's version
TOOL_ARTIFACTS = {"kafka-tools": ("org.apache.kafka", "kafka-tools"),
                  "pulsar-testclient": ("org.apache.pulsar", "pulsar-testclient"),
                  "perf-test": ("com.rabbitmq", "perf-test")}
#: the versions run when no ``broker_versions`` setting names one (Kafka's 4.x line, Pulsar's 4.0 LTS)
DEFAULT_VERSIONS = {b: v for b, v in LocalSettings().broker_versions.items() if b in ARTIFACTS}
#: a version is digits and dots with an optional qualifier; anything else never reaches Maven
VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?([.-][A-Za-z0-9]+)*$")
#: log4j 2 used when a closure has none of its own (the version Kafka 4.1 ships)
LOG4J2_FALLBACK = "2.24.3"
RELOAD4J = "1.2.25"
#: broker -> the parent pom whose dependencyManagement its build resolves with (imported as a BOM)
BUILD_POMS = {"pulsar": ("org.apache.pulsar", "pulsar"), "pulsar-testclient": ("org.apache.pulsar", "pulsar")}
#: tool -> the BOM that pins every module of its project to one version: a tool whose own jar a registry lacks at
#: the broker's version runs as the jar of a neighbouring release with every library at the broker's version
#: (``resolve(tool, neighbour, libraries=broker_version)``)
LIBRARY_BOMS = {"pulsar-testclient": ("org.apache.pulsar", "pulsar-bom")}
#: how the cache entries were made; an entry made otherwise is resolved again
RESOLVER_REVISION = 2
#: Maven 3.8 can search a large dependency graph for minutes when the registry lacks one of its artifacts
RESOLVE_TIMEOUT_S = 300.0


class DistributionError(EnvironmentFailure):
    """A broker version that cannot be resolved; names the broker, version, artifact and reason."""

    def __init__(self, broker: str, version: str, reason: str):
        self.broker, self.version, self.reason = broker, version, reason
        g, a = ARTIFACTS.get(broker) or TOOL_ARTIFACTS.get(broker) or ("?", "?")
        self.artifact = f"{g}:{a}:{version}"
        super().__init__(f"{broker} version {version!r} cannot be resolved (artifact {self.artifact}): {reason}")


@dataclass
class Distribution:
    """A broker version on this machine: its jars and where they came from."""

    broker: str
    version: str
    lib: Path
    #: "maven" (resolved into the cache) or "home" (an unpacked Apache tarball given by kafka_home / pulsar_home)
    source: str
    #: "log4j1" (reload4j, Kafka 3.x) or "log4j2"
    logging_api: str
    manifest: dict[str, Any] = field(default_factory=dict)

    def classpath(self) -> str:
        """The JVM classpath: every jar of ``lib`` (the JVM expands the wildcard)."""
        return str(self.lib / "*")

    def provenance(self) -> dict[str, Any]:
        """What the run's provenance records: artifact, source, cache directory, jars with sha256."""
        return {**self.manifest, "lib": str(self.lib), "source": self.source}


def cache_root() -> Path:
    if os.environ.get("BROKERBENCH_BROKER_CACHE"):
        return Path(os.environ["BROKERBENCH_BROKER_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "brokerbench" / "brokers"


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, hex (read in 1 MB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _jar_version(jars: list[str], artifact: str) -> str | None:
    """The version of ``artifact`` among jar file names (``<artifact>-<version>[-classifier].jar``)."""
    for name in jars:
        m = re.match(rf"^{re.escape(artifact)}-(\d[\w.]*?)(-linux-[\w_]+|-tests)?\.jar$", name)
        if m:
            return m.group(1)
    return None


def logging_api(broker: str, version: str) -> str:
    return "log4j1" if broker in ("kafka", "kafka-tools") and version.split(".")[0] in ("0", "1", "2", "3") else "log4j2"


def _logging_deps(broker: str, version: str, jars: list[str]) -> list[tuple[str, str, str]]:
    """The logging jars Apache's distribution adds to the broker artifact's closure."""
    if broker == "perf-test":
        return []  # PerfTest ships its own logging (logback)
    slf4j = _jar_version(jars, "slf4j-api") or "1.7.36"
    if logging_api(broker, version) == "log4j1":
        return [("ch.qos.reload4j", "reload4j", RELOAD4J), ("org.slf4j", "slf4j-reload4j", slf4j)]
    found = [v for a in ("log4j-slf4j2-impl", "log4j-slf4j-impl", "log4j-core", "log4j-api")
             if (v := _jar_version(jars, a))]
    log4j = max(found, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)), default=LOG4J2_FALLBACK)
    binding = "log4j-slf4j2-impl" if slf4j.startswith("2.") else "log4j-slf4j-impl"
    return [("org.apache.logging.log4j", a, log4j) for a in ("log4j-api", "log4j-core", binding)]


def _pom(broker: str, version: str, extra: list[tuple[str, str, str]], libraries: str | None = None) -> str:
    """The pom whose runtime closure is the distribution; ``libraries``: the version of every other module of
    the project (through :data:`LIBRARY_BOMS`), when the artifact itself is taken at ``version``."""
    g, a = ARTIFACTS.get(broker) or TOOL_ARTIFACTS[broker]
    deps = [(g, a, version), *extra]
    body = "".join(f"<dependency><groupId>{dg}</groupId><artifactId>{da}</artifactId><version>{dv}</version>"
                   f"</dependency>" for dg, da, dv in deps)
    pinned = "".join(f"<dependency><groupId>{dg}</groupId><artifactId>{da}</artifactId><version>{dv}</version>"
                     f"</dependency>" for dg, da, dv in extra)
    if broker in BUILD_POMS:
        # the versions the broker's own build uses for every third-party library (Maven's "nearest wins"
        # alone mixes e.g. OpenTelemetry versions that do not work together); the logging pins above win
        boms = [BUILD_POMS[broker]]
        if libraries:
            boms.insert(0, LIBRARY_BOMS[broker])  # first: the modules' own versions win over the build pom's
        for bg, ba in boms:
            pinned += (f"<dependency><groupId>{bg}</groupId><artifactId>{ba}</artifactId>"
                       f"<version>{libraries or version}</version><type>pom</type><scope>import</scope></dependency>")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>brokerbench.resolve</groupId><artifactId>{broker}</artifactId><version>1</version>"
            "<packaging>pom</packaging>"
            f"<dependencyManagement><dependencies>{pinned}</dependencies></dependencyManagement>"
            f"<dependencies>{body}</dependencies></project>\n")


def _mvn_reason(output: str) -> str:
    """The line of Maven's output that says why (``Could not find artifact ...``), shortened."""
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)  # Maven's colours
    lines = [l.replace("[ERROR]", "").strip() for l in output.splitlines() if "[ERROR]" in l]
    for l in lines:
        m = re.search(r"(Could not (find|resolve|transfer) [^:]*?artifact.*?)(: Could not| -> \[Help|$)", l)
        if m:
            return re.sub(r"\s+", " ", m.group(1))[:400]
        m = re.search(r"Failure to find (\S+) in (\S+)", l)  # a failure Maven remembered from an earlier try
        if m:
            return f"Could not find artifact {m.group(1)} in {m.group(2)}"
    for l in lines:
        if l:
            return l[:400]
    return (output.strip().splitlines() or ["no output"])[-1][:400]


def _copy_dependencies(work: Path, pom: str, out: Path, broker: str, version: str) -> list[str]:
    mvn = shutil.which("mvn") or "mvn"
    (work / "pom.xml").write_text(pom)
    # every repository a pom of the closure declares (e.g. Confluent's) is mirrored to Maven Central: versions
    # come from one place. Global settings, so a user's ~/.m2/settings.xml (a company mirror) still applies.
    url = os.environ.get("BROKERBENCH_MAVEN_MIRROR", "https://repo.maven.apache.org/maven2")
    (work / "settings.xml").write_text(
        "<settings><mirrors><mirror><id>brokerbench-central</id><mirrorOf>*</mirrorOf>"
        f"<url>{url}</url></mirror></mirrors></settings>\n")
    argv = [mvn, "-B", "-q", "-U", "-gs", str(work / "settings.xml"), "-f", str(work / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
    if os.environ.get("BROKERBENCH_MAVEN_REPO"):  # Maven's local repository (default ~/.m2/repository)
        argv.append(f"-Dmaven.repo.local={os.environ['BROKERBENCH_MAVEN_REPO']}")
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DistributionError(broker, version, f"Maven did not finish within {RESOLVE_TIMEOUT_S:.0f} s (it "
                                                 "searches the whole dependency graph when an artifact of it is "
                                                 "missing from the registry)") from None
    if p.returncode != 0:
        raise DistributionError(broker, version, _mvn_reason(p.stdout + "\n" + p.stderr))
    return sorted(x.name for x in out.glob("*.jar"))


def _check_manifest(d: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("resolver_revision") != RESOLVER_REVISION:
        return None
    for jar in manifest.get("jars", []):
        f = d / "lib" / jar["name"]
        if not f.is_file() or f.stat().st_size != jar["bytes"]:
            return None
    return manifest


def _entry(version: str, libraries: str | None) -> str:
    """The cache directory of a version (``<tool version>+libraries-<version>`` for a tool on other libraries)."""
    return f"{version}+libraries-{libraries}" if libraries and libraries != version else version


def cached(broker: str, version: str, libraries: str | None = None) -> Distribution | None:
    """The cached distribution of ``broker`` ``version``, or None when it is not (completely) in the cache."""
    d = cache_root() / broker / _entry(version, libraries)
    manifest = _check_manifest(d)
    if manifest is None:
        return None
    return Distribution(broker, version, d / "lib", "maven", manifest["logging_api"], manifest)


def cached_versions(broker: str) -> list[str]:
    """The versions of ``broker`` (or of a tool of :data:`TOOL_ARTIFACTS`) completely in the cache, by name: the
    entries :func:`cached` would use (a tool on another version's libraries as ``<version>+libraries-<v>``).
    Incomplete entries (an interrupted resolution, another resolver revision) are left out."""
    d = cache_root() / broker
    try:
        entries = [e for e in d.iterdir() if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return []
    return sorted(e.name for e in entries if _check_manifest(e) is not None)


def resolve(broker: str, version: str | None = None, *, libraries: str | None = None) -> Distribution:
    """``broker`` at ``version`` (default :data:`DEFAULT_VERSIONS`), from the cache or Maven Central.

    ``libraries`` (tools of :data:`LIBRARY_BOMS` only): every module of the project but the artifact itself at
    this version, e.g. Pulsar's perf tool of 4.0.6 on the client and broker libraries of 4.0.7.
    Raises :class:`DistributionError` naming the version, the artifact and Maven's reason.
    """
    if broker not in ARTIFACTS and broker not in TOOL_ARTIFACTS:
        raise EnvironmentFailure(f"{broker} is not resolved from Maven Central (only "
                                 f"{', '.join([*ARTIFACTS, *TOOL_ARTIFACTS])})")
    if not version and broker not in DEFAULT_VERSIONS:
        raise DistributionError(broker, "", "no version given")
    version = str(version or DEFAULT_VERSIONS[broker]).strip()
    for v in (version, libraries):
        if v is not None and not VERSION_RE.match(v):
            raise DistributionError(broker, v, "not a version number (expected e.g. 4.1.1 or 3.9.1)")
    if libraries == version:
        libraries = None
    if libraries and broker not in LIBRARY_BOMS:
        raise DistributionError(broker, version, f"no BOM pins its libraries to {libraries} (only "
                                                 f"{', '.join(LIBRARY_BOMS)})")
    found = cached(broker, version, libraries)
    if found:
        return found
    root = cache_root() / broker
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f".{_entry(version, libraries)}.lock"):
        found = cached(broker, version, libraries)  # another task resolved it while we waited
        if found:
            return found
        return _resolve_locked(broker, version, root, libraries)


def _resolve_locked(broker: str, version: str, root: Path, libraries: str | None = None) -> Distribution:
    g, a = ARTIFACTS.get(broker) or TOOL_ARTIFACTS[broker]
    if not shutil.which("mvn"):
        raise DistributionError(broker, version, "Maven (mvn) is not installed: the bootstrap installs Debian's "
                                                 "'maven' when run as root")
    log.info("resolving %s %s (%s:%s:%s) from Maven Central into %s", broker, version, g, a, version, root)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=root) as tmp:
        work = Path(tmp)
        first = _copy_dependencies(work, _pom(broker, version, [], libraries), work / "closure", broker, version)
        extra = _logging_deps(broker, version, first)
        lib = work / "dist" / "lib"
        jars = _copy_dependencies(work, _pom(broker, version, extra, libraries), lib, broker, version)
        if broker in ("pulsar", "pulsar-testclient"):
            own = f"{a}-{version}.jar"
            others = [n for n in jars if n.startswith("pulsar-") and n != own
                      and not n.endswith(f"-{libraries or version}.jar")]
            if others:  # every org.apache.pulsar artifact at one version
                raise DistributionError(broker, version, "the closure mixes Pulsar versions: " + ", ".join(others))
        manifest: dict[str, Any] = {
            "broker": broker, "version": version, "artifact": f"{g}:{a}:{version}", "repository": "Maven Central",
            "resolver_revision": RESOLVER_REVISION,
            "libraries_version": libraries or version,
            "logging_api": logging_api(broker, version),
            "logging_jars": [f"{dg}:{da}:{dv}" for dg, da, dv in extra],
            "resolved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "resolve_s": None,
            "jars": [{"name": n, "bytes": (lib / n).stat().st_size, "sha256": sha256_file(lib / n)} for n in jars],
        }
        manifest["resolve_s"] = round(time.monotonic() - t0, 1)
        (work / "dist" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        dest = root / _entry(version, libraries)
        if dest.exists():
            shutil.rmtree(dest)  # an incomplete earlier attempt (its manifest did not check out)
        os.replace(work / "dist", dest)
    log.info("%s %s resolved in %.1f s: %d jars, %.0f MB", broker, version, manifest["resolve_s"], len(jars),
             sum(j["bytes"] for j in manifest["jars"]) / 1e6)
    return Distribution(broker, version, dest / "lib", "maven", manifest["logging_api"], manifest)


def from_home(broker: str, home: str | os.PathLike[str]) -> Distribution:
    """An unpacked Apache tarball (``kafka_2.13-x.y.z``: ``libs/``; ``apache-pulsar-x.y.z``: ``lib/``)."""
    home = Path(home)
    lib = home / ("libs" if broker == "kafka" else "lib")
    if not lib.is_dir():
        raise EnvironmentFailure(f"{lib} does not exist: {home} is not an unpacked Apache "
                                f"{'Kafka' if broker == 'kafka' else 'Pulsar'} distribution", host=broker)
    names = sorted(x.name for x in lib.glob("*.jar"))
    if broker == "kafka":
        version = _jar_version(names, "kafka_2.13") or _jar_version(names, "kafka_2.12") or "unknown"
    else:
        version = next((n.rsplit("-", 1)[-1][:-4] for n in names if n.startswith("org.apache.pulsar-pulsar-broker-")),
                       None) or _jar_version(names, "pulsar-broker") or "unknown"
    api = "log4j1" if any(n.startswith(("reload4j", "log4j-1.")) for n in names) else "log4j2"
    manifest = {"broker": broker, "version": version, "artifact": f"unpacked distribution {home}",
                "logging_api": api, "jars": [{"name": n, "bytes": (lib / n).stat().st_size} for n in names]}
    return Distribution(broker, version, lib, "home", api, manifest)


def java() -> str:
    """The java binary: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise EnvironmentFailure("no java on PATH and no JAVA_HOME: Apache Kafka and Apache Pulsar need a JDK 17 "
                                "(the bootstrap installs Debian's openjdk-17-jdk-headless when run as root)")
    return found


def log4j_options(dist: Distribution, config_dir: Path, log_file: Path) -> list[str]:
    """JVM options that send the broker's log to ``log_file`` (a config written into ``config_dir``)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    if dist.logging_api == "log4j1":
        conf = config_dir / "log4j.properties"
        conf.write_text("log4j.rootLogger=INFO, file\n"
                        "log4j.appender.file=org.apache.log4j.FileAppender\n"
                        f"log4j.appender.file.File={log_file}\n"
                        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
                        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
                        "log4j.logger.org.apache.kafka.clients=WARN\n")
        return [f"-Dlog4j.configuration=file:{conf}"]
    conf = config_dir / "log4j2.properties"
    conf.write_text("status = warn\n"
                    "appender.file.type = File\n"
                    "appender.file.name = file\n"
                    f"appender.file.fileName = {log_file}\n"
                    "appender.file.layout.type = PatternLayout\n"
                    "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
                    "rootLogger.level = info\n"
                    "rootLogger.appenderRef.file.ref = file\n")
    return [f"-Dlog4j2.configurationFile={conf}", f"-Dlog4j.configurationFile={conf}"]
