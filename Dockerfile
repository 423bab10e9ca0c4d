# brokerbench Airflow image: Airflow 3.3 with the amazon, apache-spark and ssh
# providers, a Java runtime for Spark (spark-submit runs the aggregation job
# inside the worker container in local mode, or submits to the cluster the
# `brokerbench_spark` connection names), and the brokerbench package.
#
#   docker build -t brokerbench:0.1.0 .
#
# The base image's Python (3.11) matches the pinned constraints.txt.
FROM apache/airflow:3.3.2-python3.11

USER root
# Java for spark-submit and for Apache Kafka / Apache Pulsar; Maven resolves their versions from
# Maven Central into BROKERBENCH_BROKER_CACHE (a volume keeps it across containers); rabbitmq-server,
# chrony and openssh-client for the `local` environment (brokers as processes inside the container) and SSH.
# JAVA_HOME is a symlink to wherever the JDK landed (java-17-openjdk-amd64, -arm64...),
# so the image builds for both architectures.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      openjdk-17-jdk-headless maven rabbitmq-server chrony openssh-client procps \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/brokerbench-java \
 && /usr/lib/jvm/brokerbench-java/bin/java -version \
 && mkdir -p /opt/brokerbench-cache/brokers && chown -R airflow:root /opt/brokerbench-cache
ENV JAVA_HOME=/usr/lib/jvm/brokerbench-java \
    SPARK_LOCAL_IP=127.0.0.1 \
    BROKERBENCH_BROKER_CACHE=/opt/brokerbench-cache/brokers

USER airflow
WORKDIR /opt/brokerbench
COPY --chown=airflow:root requirements.txt constraints.txt pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.txt -c constraints.txt
COPY --chown=airflow:root include/ include/
COPY --chown=airflow:root spark_jobs/ spark_jobs/
COPY --chown=airflow:root dags/ dags/
COPY --chown=airflow:root plugins/ plugins/
# Editable, so the aws environment finds this source tree and builds the brokerbench wheel it
# installs on the fleet hosts from it (pip wheel --no-build-isolation: setuptools >= 77 for
# the PEP 639 license field, and wheel). A plain `pip install .` works too (package data
# ships in the wheel); the hosts then need the setting worker_wheel.
RUN pip install --no-cache-dir "setuptools>=77" wheel \
 && pip install --no-cache-dir --no-deps -e .

ENV AIRFLOW__CORE__DAGS_FOLDER=/opt/brokerbench/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/brokerbench/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    BROKERBENCH_HOME=/opt/airflow/brokerbench \
    BROKERBENCH_RESULTS_ROOT=/opt/airflow/brokerbench/results \
    AIRFLOW_CONN_BROKERBENCH_SPARK='{"conn_type": "spark", "host": "local[*]"}'
