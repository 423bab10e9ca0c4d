"""The external environment on an Apache Pulsar it did not start: a loopback Pulsar standalone with token
authentication (``pulsar_token_auth``), started once for the module by the local environment and given to
brokerbench only as a connection with a service URL, an admin URL and a token.

A run measures through the token (client, admin REST calls of prepare and teardown), sets the driver's
persistence on its own topics and never on the namespace, and leaves the namespace's topic list as it was;
a wrong token fails the run without leaving anything.
"""

from __future__ import annotations

import json
import secrets
import uuid

import pytest

from brokerbench.environments.external.cluster import pulsar_objects, pulsar_request
from brokerbench.environments.external.connections import Cluster
from brokerbench.environments.machine.apache_pulsar import hs256_token
from brokerbench.pipeline.context import RunContext
from brokerbench.util import run_prefix
from tests.integration.test_external_clusters import SHORT, assert_measured, run_with

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pulsar(tmp_path_factory):
    from brokerbench.environments.local import LocalEnvironment

    env = LocalEnvironment("test_external/pulsar", {"state_dir": str(tmp_path_factory.mktemp("pulsar")),
                                                    "disk_baseline_mb": 0, "pulsar_heap_mb": 512,
                                                    "pulsar_token_auth": True, "start_timeout_s": 300})
    env.provision()
    try:
        ep = env.deploy("pulsar", {}, "fsync-off", {})
        yield {"endpoint": ep, "token": env._broker("pulsar").state()["token"]}
    finally:
        env.teardown()


def connection(pulsar, token: str) -> str:
    return json.dumps({"conn_type": "pulsar", "extra": {"service_url": pulsar["endpoint"].service_url,
                                                        "admin_url": pulsar["endpoint"].http_url, "token": token}})


def admin_view(pulsar) -> Cluster:
    return Cluster("pulsar", "test", service_url=pulsar["endpoint"].service_url,
                   admin_url=pulsar["endpoint"].http_url, client_config={"token": pulsar["token"]})


def test_a_token_run_measures_sets_persistence_per_topic_and_leaves_the_namespace_as_it_was(pulsar, tmp_path,
                                                                                            monkeypatch):
    view = admin_view(pulsar)
    theirs = run_prefix("someone/else") + "-their-topic"
    pulsar_request(view, "PUT", f"persistent/public/default/{theirs}")
    namespace_policy = pulsar_request(view, "GET", "namespaces/public/default/persistence")
    before = pulsar_objects(view)
    print("pulsar topics before:", before)
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_PULSAR", connection(pulsar, pulsar["token"]))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external",
                      "brokers": ["pulsar"], "variants": ["as-configured"], **SHORT})
    # the suite's driver (pulsar-default) has a persistence policy: set on the run's topics only
    seen: dict[str, object] = {}
    from brokerbench.worker.drivers import pulsar_client

    real_admin = pulsar_client.PulsarClientDriver._admin

    def watching(self, method, path, body):
        real_admin(self, method, path, body)
        if path.endswith("/persistence"):
            seen[path] = pulsar_request(view, "GET", path)

    monkeypatch.setattr(pulsar_client.PulsarClientDriver, "_admin", watching)
    record = run_with(ctx, "pulsar", "as-configured", None)
    after = pulsar_objects(view)
    print("pulsar topics after:", after)
    assert after == before and theirs in after["topics"]
    assert record["errors"] == []
    deleted = record["clusters"]["pulsar"]["deleted"]["topics"]
    assert deleted and all(t.startswith(run_prefix(ctx.run_key) + "-") for t in deleted)
    assert_measured(ctx)
    # the persistence policy went to the run's topic, the namespace's stayed as it was
    assert seen and all(f"/{run_prefix(ctx.run_key)}-" in p for p in seen), seen
    assert all(v and v.get("bookkeeperEnsemble") == 1 for v in seen.values()), seen
    assert pulsar_request(view, "GET", "namespaces/public/default/persistence") == namespace_policy
    said = json.loads((ctx.run_dir / "provenance" / "pulsar__as-configured.json").read_text())
    assert said["durability"]["cluster"]["version"] and said["version"] == said["durability"]["cluster"]["version"]
    # the version asked of the cluster (the admin API) is the row's, the one the local environment deployed
    print(f"pulsar: deployed {pulsar['endpoint'].version}, external reads {said['version']!r} "
          f"({said['version_source']})")
    assert said["version"] == pulsar["endpoint"].version and "/admin/v2/brokers/version" in said["version_source"]
    assert pulsar["token"] not in "".join(f.read_text(errors="replace") for f in ctx.run_dir.rglob("*")
                                          if f.is_file())


def test_a_token_the_cluster_did_not_sign_is_refused(pulsar, tmp_path, monkeypatch):
    view = admin_view(pulsar)
    before = pulsar_objects(view)
    forged = hs256_token("admin", secrets.token_bytes(32))
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_PULSAR", connection(pulsar, forged))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external",
                      "brokers": ["pulsar"], "variants": ["as-configured"], **SHORT})
    with pytest.raises(Exception, match="HTTP 401 .*the connection.s token was refused") as e:
        run_with(ctx, "pulsar", "as-configured", None)
    print("forged token:", str(e.value)[:300])
    assert pulsar_objects(view) == before
