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


def test_the_settings_are_one_typed_object_passed_on_to_the_brokers(tmp_path):
    """LocalEnvironment holds one LocalSettings (no dict beside it); the brokers it makes get the same object."""
    from brokerbench.environments.local import check_brokers
    from brokerbench.environments.machine import make_broker

    env = LocalEnvironment("brokerbench_smoke/manual__1", {"state_dir": str(tmp_path), "kafka_heap_mb": 512,
                                                           "broker_implementations": {"kafka": "tansu"}})
    assert isinstance(env.settings, LocalSettings) and not hasattr(env, "local_settings")
    assert env.state_dir == tmp_path.resolve()
    assert make_broker("kafka", env.state_dir, env.settings, for_start=True).settings is env.settings
    assert LocalEnvironment("brokerbench_smoke/manual__1", env.settings).settings is env.settings
    # a stand-in says which version was asked only when the settings named one (not the model's default)
    assert "asked" not in check_brokers(env.settings, ["kafka"])["kafka"]["note"]
    named = env.settings.model_copy(update={"broker_versions": {"kafka": "3.9.1"}})
    assert "(asked: 3.9.1)" in check_brokers(named, ["kafka"])["kafka"]["note"]
