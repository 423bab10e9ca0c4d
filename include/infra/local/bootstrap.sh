#!/usr/bin/env bash
# Installs what brokerbench needs on this machine, idempotently:
#   - Debian packages (when run as root): rabbitmq-server (local RabbitMQ
#     broker), a Java runtime (Spark), python3-venv, chrony, openssh-server
#     (the loopback sshd the aws tests use), shellcheck (the aws scripts' check),
#     postgresql (the deployment test's metadata database: a cluster of its
#     own on a loopback port, the packaged one is not used), prometheus (the
#     external-cluster tests' "cluster's own Prometheus", started on a loopback
#     port of their own) and chromium (the tests look at the Airflow UI and the
#     served report as a user would);
#   - the project virtualenv with pinned Python packages (requirements-dev.txt:
#     the runtime set of requirements.txt plus test and lint tools; constraints.txt)
#     and brokerbench itself (editable);
#   - the Airflow metadata database (SQLite, inside the project).
# Usage: include/infra/local/bootstrap.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
VENV=${1:-.venv}
PYTHON=${PYTHON:-python3}

need_pkgs=()
# a JDK 17 (Spark; Apache Kafka and Apache Pulsar) and Maven (resolves broker versions from Maven Central)
command -v java >/dev/null 2>&1 || need_pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_pkgs+=(maven)
command -v strace >/dev/null 2>&1 || need_pkgs+=(strace)  # the durability test counts a broker's fsync calls
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need_pkgs+=(rabbitmq-server)
command -v chronyd >/dev/null 2>&1 || [ -x /usr/sbin/chronyd ] || need_pkgs+=(chrony)
[ -x /usr/sbin/sshd ] || need_pkgs+=(openssh-server)
command -v shellcheck >/dev/null 2>&1 || need_pkgs+=(shellcheck)  # aws install scripts are checked
# the aws broker scripts on the loopback fleet: ip (a bookie's interface), curl (Pulsar's health)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need_pkgs+=(iproute2)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
"$PYTHON" -c "import venv, ensurepip" >/dev/null 2>&1 || need_pkgs+=(python3-venv)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_pkgs+=(postgresql)
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
[ -x /usr/bin/prometheus ] || need_pkgs+=(prometheus)  # the external tests read broker metrics from it
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ]; then
    echo "bootstrap: installing Debian packages: ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >/dev/null
    # the Debian package may start services on systems with an init: brokerbench
    # starts its own nodes on its own ports, so stop the packaged one if it runs
    for svc in rabbitmq-server postgresql prometheus; do
      if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        systemctl stop "$svc" || true
      fi
    done
  else
    echo "bootstrap: not root, cannot install Debian packages: ${need_pkgs[*]}" >&2
    echo "bootstrap: install them (sudo apt-get install ${need_pkgs[*]}) and run again" >&2
  fi
fi

stamp="$VENV/.brokerbench-installed"
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing Python packages (about 2 minutes the first time)"
  "$VENV/bin/python" -m pip install -q --upgrade pip wheel
  "$VENV/bin/python" -m pip install -q -r requirements-dev.txt -c constraints.txt
  "$VENV/bin/python" -m pip install -q --no-deps -e .
  touch "$stamp"
fi

export AIRFLOW_HOME=${AIRFLOW_HOME:-$PWD/.airflow}
if [ ! -f "$AIRFLOW_HOME/airflow.db" ]; then
  echo "bootstrap: creating the Airflow database in $AIRFLOW_HOME"
  mkdir -p "$AIRFLOW_HOME"
  "$VENV/bin/airflow" db migrate >/dev/null
fi
echo "bootstrap: ready"
