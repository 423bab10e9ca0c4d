"""Unit tests need no broker, no Spark and no network: resolving a broker version from Maven Central fails
loudly here (a test that needs Apache Kafka or Pulsar belongs in tests/integration)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_maven(monkeypatch):
    from brokerbench.environments.machine import distributions

    def refuse(work, pom, out, broker, version):
        raise AssertionError(f"a unit test tried to resolve {broker} {version} from Maven Central: ask for a "
                             "stand-in (broker_implementations) or move the test to tests/integration")

    monkeypatch.setattr(distributions, "_copy_dependencies", refuse)
