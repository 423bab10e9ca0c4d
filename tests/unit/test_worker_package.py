"""The wheel the aws environment installs on fleet hosts (built here, no SSH)."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from brokerbench.environments.aws.worker_package import build_wheel, source_id, source_root, worker_package
from brokerbench.environments.base import EnvironmentFailure


def test_the_wheel_holds_the_package_and_is_reused_while_the_sources_are_unchanged(tmp_path):
    root = source_root()
    assert root is not None and (root / "pyproject.toml").is_file()
    first = build_wheel(tmp_path)
    assert first.package_id == source_id(root) and first.origin == f"built from {root}"
    with zipfile.ZipFile(first.wheel) as whl:
        names = whl.namelist()
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "brokerbench/worker/runner.py" in names and "brokerbench/environments/aws/agent.py" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "dags/"))]
    assert "Provides-Extra: worker" in metadata and "apache-airflow" not in metadata
    mtime = first.wheel.stat().st_mtime_ns
    again = build_wheel(tmp_path)
    assert again.wheel == first.wheel and again.wheel.stat().st_mtime_ns == mtime  # not rebuilt


def test_a_given_wheel_is_identified_by_its_file_hash(tmp_path):
    wheel = tmp_path / "brokerbench-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a zip, but a file")
    pkg = worker_package(str(wheel), tmp_path / "out")
    assert pkg.wheel == wheel and pkg.package_id == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert not (tmp_path / "out").exists()  # nothing built


@pytest.mark.parametrize("name", ["missing.whl", "brokerbench.tar.gz"])
def test_a_bad_worker_wheel_setting_is_named(tmp_path, name):
    if name.endswith(".tar.gz"):
        (tmp_path / name).write_text("x")
    with pytest.raises(EnvironmentFailure, match="worker_wheel"):
        worker_package(str(tmp_path / name), tmp_path / "out")


@pytest.mark.parametrize("setting, value", [("worker_install", "sometimes"), ("worker_pip_args", "--pre")])
def test_bad_install_settings_are_refused_by_name(tmp_path, setting, value):
    from brokerbench.environments.aws.environment import AwsEnvironment

    with pytest.raises(EnvironmentFailure, match=setting):
        AwsEnvironment("t/bad-install", {"state_dir": str(tmp_path / "state"), setting: value})


def test_the_package_is_installed_only_into_the_venv_brokerbench_owns(tmp_path):
    from brokerbench.environments.aws.environment import AwsEnvironment

    own = AwsEnvironment("t/own", {"state_dir": str(tmp_path / "a"), "remote_dir": "/opt/bb"})
    given = AwsEnvironment("t/given", {"state_dir": str(tmp_path / "b"), "remote_python": "/usr/bin/python3"})
    never = AwsEnvironment("t/never", {"state_dir": str(tmp_path / "c"), "worker_install": "never"})
    assert own.installs_worker and own.remote_python == "/opt/bb/venv/bin/python"
    assert not given.installs_worker and not never.installs_worker
