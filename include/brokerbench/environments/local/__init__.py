"""The ``local`` environment: real brokers as processes on loopback on this machine (:mod:`.environment`)."""

from .environment import LocalEnvironment, brokerbench_home, state_dir_for

__all__ = ["LocalEnvironment", "brokerbench_home", "state_dir_for"]
