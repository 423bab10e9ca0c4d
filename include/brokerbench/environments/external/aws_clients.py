"""The aws environment's client half for the external environment (setting ``clients: aws``).

:class:`AwsClientFleet` is an :class:`~..aws.environment.AwsEnvironment` with client
instances only: provision creates the run's security group (SSH from the
controller) and ``counts.client`` instances tagged with the run; host setup,
the worker package, the agent, host metrics and teardown by tag are the aws
environment's. No broker or metadata instance, no deploy: the brokers are the
external clusters, which the client hosts must reach at the connections'
addresses.
"""

from __future__ import annotations

import logging
from typing import Any

from typing_extensions import override

from ..aws.environment import AwsEnvironment
from ..aws.settings_check import check_client_settings, client_count
from ..base import BrokerEndpoint, EnvironmentFailure

log = logging.getLogger("brokerbench")


class AwsClientFleet(AwsEnvironment):
    """Client instances of one external run; ``settings``: the external setting ``aws`` (the aws environment's
    names) with ``state_dir`` set by the external environment."""

    name = "aws-clients"

    @override
    def brokers(self) -> list[str]:
        return []  # the security group opens SSH only: the brokers are not on the fleet

    @override
    def needs_metadata(self) -> bool:
        return False

    @override
    def counts(self) -> dict[str, int]:
        return {"client": client_count(self.settings.counts)}

    @override
    def checked_cost(self) -> dict[str, Any]:
        return check_client_settings(self.settings.model_dump(), self.plan)

    @override
    def deploy(self, broker: str, broker_settings: dict[str, Any], variant: str,
               driver_overrides: dict[str, Any], *, jvm_options: list[str] | None = None) -> BrokerEndpoint:
        raise EnvironmentFailure("the client fleet deploys no broker", broker)

    @override
    def health(self, broker: str) -> dict[str, Any]:
        raise EnvironmentFailure("the client fleet has no broker", broker)

    @override
    def undeploy(self, broker: str) -> None:
        return None


__all__ = ["AwsClientFleet"]
