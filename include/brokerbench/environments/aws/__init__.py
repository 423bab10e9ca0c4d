"""The ``aws`` environment: EC2 fleets, host setup over SSH, brokers of a requested version.

Modules: :mod:`.environment` (the :class:`~.environment.AwsEnvironment` and its
settings check), :mod:`.fleet` (EC2 instances by tag, cost), :mod:`.ssh`
(hosts over SSH), :mod:`.brokers` (install-mode deploys from the host
scripts), :mod:`.templates` (``include/infra/aws``), :mod:`.worker_package`
(the wheel installed on the hosts) and :mod:`.agent` (what runs *on* a host).

Nothing is imported here: the agent runs on hosts that have the worker's
dependencies only, and ``python -m brokerbench.environments.aws.agent`` must
not pull in the controller's modules.
"""
