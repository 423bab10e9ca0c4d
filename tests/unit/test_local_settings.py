"""The local environment holds its settings as a LocalSettings: defaults from the model, a bad value refused
naming the setting."""

import pytest

from brokerbench.environments.local.environment import LocalEnvironment, LocalSettingsError
from brokerbench.environments.settings import LocalSettings


def test_the_environment_reads_the_models_defaults_and_the_suites_values(tmp_path):
    env = LocalEnvironment("brokerbench_smoke/manual__1", {"state_dir": str(tmp_path), "metrics_interval_s": 2})
    defaults = LocalSettings()
    assert env.settings.tuned_profile == defaults.tuned_profile == "latency-performance"
    assert env.settings.disk_baseline_mb == defaults.disk_baseline_mb
    assert env.settings.metrics_interval_s == 2.0


def test_a_bad_setting_is_refused_by_name(tmp_path):
    with pytest.raises(LocalSettingsError, match="disk_baseline_mb") as e:
        LocalEnvironment("brokerbench_smoke/manual__1", {"state_dir": str(tmp_path), "disk_baseline_mb": "lots"})
    assert e.value.setting == "disk_baseline_mb"
