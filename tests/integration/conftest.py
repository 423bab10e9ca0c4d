"""Fixtures for integration tests that run real brokers on loopback."""

from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds (still runs by default)")


@pytest.fixture
def local_env(tmp_path):
    """A LocalEnvironment with its own state dir under tmp_path; torn down afterwards
    whatever the test did, so no broker outlives its test."""
    from brokerbench.environments.local import LocalEnvironment

    env = LocalEnvironment("test_dag/manual__test", {"state_dir": str(tmp_path / "state"),
                                                      "disk_baseline_mb": 8})
    env.provision()
    yield env
    env.teardown()
