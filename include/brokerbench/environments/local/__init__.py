"""The ``local`` environment: real brokers as processes on loopback on this machine (:mod:`.environment`)."""

from .environment import LocalEnvironment, LocalSettingsError, brokerbench_home, check_brokers, state_dir_for

__all__ = ["LocalEnvironment", "LocalSettingsError", "brokerbench_home", "check_brokers", "state_dir_for"]
