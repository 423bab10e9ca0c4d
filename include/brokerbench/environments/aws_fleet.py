"""EC2 fleets of the ``aws`` environment: cost, provisioning, teardown by tag.

Everything goes through the Amazon provider's :class:`EC2Hook` (the client the
provider's ``EC2CreateInstanceOperator`` / ``EC2TerminateInstanceOperator``
use, with the same ``run_instances`` arguments), configured by an Airflow
``aws`` connection; no credential is ever a parameter.

Guarantees:

* **One fleet per DAG run.** Every resource carries the tags
  ``brokerbench:run`` (``<dag_id>/<run_id>``), ``brokerbench:role`` and
  ``brokerbench:purpose``. Provisioning first looks for instances with the
  run's tag and only creates what is missing, with a client token derived
  from the run, role and generation, so a retried task never creates a
  second fleet.
* **Teardown cannot leak.** :func:`terminate_run` finds instances by the
  run's tag (not by ids passed around) and waits until they are terminated.
  Each instance also protects itself: ``InstanceInitiatedShutdownBehavior =
  terminate`` plus a ``shutdown -h +N`` scheduled from user data at the
  run's maximum lifetime, so a dead controller still stops the bill.
* **Cost before anything is created.** :func:`estimate_cost` multiplies the
  instance types' hourly prices by the expected duration; a run above the
  cost cap is refused before the first API call that costs money.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from typing import Any

from .base import EnvironmentError_

log = logging.getLogger("brokerbench")

RUN_TAG = "brokerbench:run"
ROLE_TAG = "brokerbench:role"
PURPOSE_TAG = "brokerbench:purpose"
EXPIRES_TAG = "brokerbench:expires-at"
ROLES = ("broker", "metadata", "client")
LIVE_STATES = ["pending", "running", "stopping", "stopped"]

#: On-demand Linux prices, USD per hour, us-east-1 (2025). Settings
#: ``prices_usd_per_hour`` add or replace entries; an instance type without a
#: price is refused (a cost cap that cannot be checked is no cap).
PRICES_USD_PER_HOUR: dict[str, float] = {
    "i3.4xlarge": 1.248, "i3.2xlarge": 0.624, "i3.xlarge": 0.312,
    "i3en.2xlarge": 0.904, "i3en.xlarge": 0.452, "i3en.3xlarge": 1.356,
    "c5.2xlarge": 0.34, "c5.4xlarge": 0.68, "c5.xlarge": 0.17,
    "m5n.8xlarge": 1.904, "m5.large": 0.096, "m5.xlarge": 0.192,
    "t2.small": 0.023, "t3.small": 0.0208, "t3.medium": 0.0416, "t3.micro": 0.0104,
}

#: Ports each broker needs from the controller (prepare topics, health checks).
#: Between fleet hosts everything is open (the security group refers to itself).
CONTROLLER_PORTS = {"kafka": [9092], "pulsar": [6650, 8080], "rabbitmq": [5672]}


def run_hash(run_key: str) -> str:
    return hashlib.sha1(run_key.encode()).hexdigest()[:12]


def expected_minutes(plan: Any | None) -> float:
    """Expected wall time of a run: 20 min setup, 6 min per broker deployment,
    warm-up + measured phase + 1 min per workload, 10 min analysis and teardown."""
    if plan is None:
        return 60.0
    total = 20.0 + 10.0 + 6.0 * len(plan.deployments())
    for item in plan.items:
        w = item.workload
        total += float(w.warmup_duration_minutes or 0) + float(w.test_duration_minutes or 0) + 1.0
    return total


def role_counts(settings: dict[str, Any], needs_metadata: bool) -> dict[str, int]:
    counts = {"broker": 3, "metadata": 3 if needs_metadata else 0, "client": 2,
              **{k: int(v) for k, v in {**(settings.get("counts") or {}),
                                         **(settings.get("instance_counts") or {})}.items()}}
    if not needs_metadata:
        counts["metadata"] = 0
    return counts


def estimate_cost(instance_types: dict[str, str], counts: dict[str, int], minutes: float,
                  cap_usd: float | None, max_lifetime_hours: float,
                  prices: dict[str, float] | None = None) -> dict[str, Any]:
    """Hourly price of the fleet x expected duration, and whether it fits the cap."""
    table = {**PRICES_USD_PER_HOUR, **(prices or {})}
    roles, per_hour, unknown = {}, 0.0, []
    for role, n in counts.items():
        if n <= 0:
            continue
        itype = instance_types[role]
        price = table.get(itype)
        if price is None:
            unknown.append(itype)
            continue
        roles[role] = {"instance_type": itype, "count": n, "usd_per_hour_each": price,
                       "usd_per_hour": round(price * n, 4)}
        per_hour += price * n
    hours = minutes / 60.0
    est = {"roles": roles, "usd_per_hour": round(per_hour, 4), "expected_hours": round(hours, 3),
           "expected_usd": round(per_hour * hours, 2), "max_lifetime_hours": max_lifetime_hours,
           "max_usd": round(per_hour * max_lifetime_hours, 2), "cost_cap_usd": cap_usd,
           "prices": "on-demand us-east-1; override with settings prices_usd_per_hour"}
    if unknown:
        est["refused"] = (f"no hourly price known for instance type(s) {', '.join(sorted(set(unknown)))}: "
                          "add them to settings prices_usd_per_hour so the cost cap can be checked")
    elif cap_usd is not None and est["expected_usd"] > cap_usd:
        est["refused"] = (f"expected cost ${est['expected_usd']:.2f} ({per_hour:.2f} $/h x {hours:.2f} h) is "
                          f"above the cost cap ${cap_usd:.2f} (param cost_cap_usd)")
    elif hours > max_lifetime_hours:
        est["refused"] = (f"expected duration {hours:.2f} h is longer than the instances' maximum lifetime "
                          f"{max_lifetime_hours:.2f} h (settings max_lifetime_hours): they would shut "
                          "themselves down mid-run")
    return est


class Fleet:
    """EC2 calls for one run, through the provider's EC2Hook (client API)."""

    def __init__(self, run_key: str, aws_conn_id: str, region_name: str | None = None):
        from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

        self.run_key = run_key
        self.hook = EC2Hook(aws_conn_id=aws_conn_id, region_name=region_name, api_type="client_type")
        self.ec2 = self.hook.conn
        self.tag = run_hash(run_key)

    # -- lookups ---------------------------------------------------------------
    def instances(self, states: list[str] | None = None, role: str | None = None) -> list[dict[str, Any]]:
        filters = [{"Name": f"tag:{RUN_TAG}", "Values": [self.run_key]}]
        if states:
            filters.append({"Name": "instance-state-name", "Values": states})
        if role:
            filters.append({"Name": f"tag:{ROLE_TAG}", "Values": [role]})
        out = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for r in page["Reservations"]:
                out += r["Instances"]
        return sorted(out, key=lambda i: (_tags(i).get("Name", ""), i["InstanceId"]))

    # -- security group ----------------------------------------------------------
    def security_group(self, controller_cidr: str, brokers: list[str], vpc_id: str | None) -> str:
        """The run's security group (found again by tag, else created): SSH and the
        brokers' client ports from the controller's address only; anything between
        members of the group."""
        filters = [{"Name": f"tag:{RUN_TAG}", "Values": [self.run_key]}]
        found = self.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
        if found:
            return found[0]["GroupId"]
        kw: dict[str, Any] = {"GroupName": f"brokerbench-{self.tag}",
                              "Description": f"brokerbench run {self.run_key}"[:255],
                              "TagSpecifications": [{"ResourceType": "security-group",
                                                     "Tags": self.tags("security-group",
                                                                       "SSH and broker ports of the run")}]}
        if vpc_id:
            kw["VpcId"] = vpc_id
        gid = self.ec2.create_security_group(**kw)["GroupId"]
        ports = sorted({22, *(p for b in brokers for p in CONTROLLER_PORTS.get(b, []))})
        perms = [{"IpProtocol": "tcp", "FromPort": p, "ToPort": p,
                  "IpRanges": [{"CidrIp": controller_cidr, "Description": "brokerbench controller"}]} for p in ports]
        perms.append({"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": gid, "Description": "fleet members"}]})
        self.ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=perms)
        log.info("security group %s: ports %s from %s, all traffic within the fleet", gid, ports, controller_cidr)
        return gid

    def delete_security_groups(self, attempts: int = 10, wait_s: float = 3.0) -> list[str]:
        filters = [{"Name": f"tag:{RUN_TAG}", "Values": [self.run_key]}]
        deleted = []
        for sg in self.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]:
            for i in range(attempts):
                try:
                    self.ec2.delete_security_group(GroupId=sg["GroupId"])
                    deleted.append(sg["GroupId"])
                    break
                except Exception as e:  # noqa: BLE001 - DependencyViolation while instances shut down
                    if i == attempts - 1:
                        raise EnvironmentError_(f"security group {sg['GroupId']} not deleted: {e}") from e
                    time.sleep(wait_s)
        return deleted

    # -- instances ------------------------------------------------------------------
    def tags(self, role: str, purpose: str, expires_at: str | None = None, index: int | None = None
             ) -> list[dict[str, str]]:
        name = f"bb-{self.tag}-{role}" + (f"-{index}" if index is not None else "")
        tags = {"Name": name, RUN_TAG: self.run_key, ROLE_TAG: role, PURPOSE_TAG: purpose,
                "brokerbench:dag-run-hash": self.tag}
        if expires_at:
            tags[EXPIRES_TAG] = expires_at
        return [{"Key": k, "Value": v} for k, v in tags.items()]

    def ensure_role(self, role: str, count: int, instance_type: str, launch: dict[str, Any],
                    purpose: str, lifetime_minutes: int) -> list[dict[str, Any]]:
        """``count`` live instances of ``role``: those found by tag, plus the missing ones."""
        existing = self.instances(["pending", "running"], role)
        missing = count - len(existing)
        if missing <= 0:
            if existing:
                log.info("%s: %d instance(s) found by tag %s, reused", role, len(existing), RUN_TAG)
            return existing[:count] if count else []
        # the generation changes when earlier instances of the role are gone, so a
        # re-provision after a teardown gets new instances, a retry the same ones
        gone = len(self.instances(["shutting-down", "terminated", "stopping", "stopped"], role))
        token = hashlib.sha1(f"{self.run_key}|{role}|{count}|{gone}".encode()).hexdigest()[:40]
        expires = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=lifetime_minutes)
                   ).strftime("%Y-%m-%dT%H:%M:%SZ")
        kw = dict(launch)
        kw.update(InstanceType=instance_type, MinCount=missing, MaxCount=missing,
                  ClientToken=f"bb-{token}", InstanceInitiatedShutdownBehavior="terminate",
                  TagSpecifications=[{"ResourceType": "instance", "Tags": self.tags(role, purpose, expires)},
                                     {"ResourceType": "volume", "Tags": self.tags(role, purpose, expires)}])
        log.info("%s: creating %d x %s (client token bb-%s)", role, missing, instance_type, token[:12])
        created = self.ec2.run_instances(**kw)["Instances"]
        # give each instance its own Name (role-index) now that ids are known
        for i, inst in enumerate(created, start=len(existing)):
            self.ec2.create_tags(Resources=[inst["InstanceId"]],
                                 Tags=[{"Key": "Name", "Value": f"bb-{self.tag}-{role}-{i}"}])
        return existing + created

    def wait_running(self, ids: list[str], timeout_s: float = 600, poll_s: float = 2.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = []
            for page in self.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids):
                for r in page["Reservations"]:
                    found += r["Instances"]
            states = {i["InstanceId"]: i["State"]["Name"] for i in found}
            bad = {k: v for k, v in states.items() if v not in ("pending", "running")}
            if bad:
                raise EnvironmentError_(f"instances left the pending/running states while starting: {bad}")
            if all(v == "running" for v in states.values()) and len(states) == len(ids):
                return found
            if time.monotonic() > deadline:
                raise EnvironmentError_(f"instances not running after {timeout_s:.0f} s: {states}")
            time.sleep(poll_s)

    def terminate_run(self, timeout_s: float = 600, poll_s: float = 2.0) -> dict[str, Any]:
        """Terminate every instance tagged with the run, wait until terminated,
        delete the run's security group. Idempotent."""
        live = self.instances(LIVE_STATES)
        ids = [i["InstanceId"] for i in live]
        record: dict[str, Any] = {"terminated": ids, "by": f"tag {RUN_TAG}={self.run_key}", "errors": []}
        if ids:
            # a stopped instance cannot be protected by its own shutdown any more: terminate
            for chunk in range(0, len(ids), 500):
                self.hook.terminate_instances(instance_ids=ids[chunk:chunk + 500])
            deadline = time.monotonic() + timeout_s
            while True:
                left = [i["InstanceId"] for i in self.instances(LIVE_STATES + ["shutting-down"])]
                if not left:
                    break
                if time.monotonic() > deadline:
                    record["errors"].append(f"not terminated after {timeout_s:.0f} s: {left}")
                    break
                time.sleep(poll_s)
        try:
            record["security_groups_deleted"] = self.delete_security_groups()
        except EnvironmentError_ as e:
            record["errors"].append(str(e))
        record["remaining"] = [i["InstanceId"] for i in self.instances(LIVE_STATES)]
        return record


def _tags(inst: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in inst.get("Tags", [])}


def host_record(inst: dict[str, Any]) -> dict[str, Any]:
    tags = _tags(inst)
    return {"name": tags.get("Name", inst["InstanceId"]), "instance_id": inst["InstanceId"],
            "role": tags.get(ROLE_TAG), "instance_type": inst.get("InstanceType"),
            "private_ip": inst.get("PrivateIpAddress"), "public_ip": inst.get("PublicIpAddress"),
            "availability_zone": inst.get("Placement", {}).get("AvailabilityZone"),
            "image_id": inst.get("ImageId"), "expires_at": tags.get(EXPIRES_TAG)}


def sweep_expired(aws_conn_id: str, region_name: str | None = None, grace_minutes: float = 15.0,
                  dry_run: bool = False, now: dt.datetime | None = None) -> dict[str, Any]:
    """Terminate every brokerbench instance, of any run, past its maximum lifetime.

    The last layer of "teardown cannot leak": an instance whose
    ``brokerbench:expires-at`` tag lies more than ``grace_minutes`` in the past
    outlived both its run's teardown task and its own scheduled shutdown
    (a user-data failure, a stopped instance). Instances without the tag are
    reported, never touched; instances of other owners are never listed.
    """
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

    hook = EC2Hook(aws_conn_id=aws_conn_id, region_name=region_name, api_type="client_type")
    now = now or dt.datetime.now(dt.timezone.utc)
    cutoff = now - dt.timedelta(minutes=grace_minutes)
    filters = [{"Name": "tag-key", "Values": [RUN_TAG]}, {"Name": "instance-state-name", "Values": LIVE_STATES}]
    expired, alive, untagged = [], [], []
    for page in hook.conn.get_paginator("describe_instances").paginate(Filters=filters):
        for r in page["Reservations"]:
            for inst in r["Instances"]:
                tags = _tags(inst)
                entry = {"instance_id": inst["InstanceId"], "run": tags.get(RUN_TAG),
                         "state": inst["State"]["Name"], "expires_at": tags.get(EXPIRES_TAG)}
                try:
                    expires = dt.datetime.strptime(tags[EXPIRES_TAG], "%Y-%m-%dT%H:%M:%SZ").replace(
                        tzinfo=dt.timezone.utc)
                except (KeyError, ValueError):
                    untagged.append(entry)
                    continue
                (expired if expires < cutoff else alive).append(entry)
    ids = [e["instance_id"] for e in expired]
    for e in expired:
        log.warning("%s of run %s expired at %s (%s): %s", e["instance_id"], e["run"], e["expires_at"], e["state"],
                    "would terminate (dry run)" if dry_run else "terminating")
    for e in untagged:
        log.warning("%s of run %s has no valid %s tag: left alone", e["instance_id"], e["run"], EXPIRES_TAG)
    if ids and not dry_run:
        for chunk in range(0, len(ids), 500):
            hook.terminate_instances(instance_ids=ids[chunk:chunk + 500])
    log.info("sweep: %d expired instance(s) %s, %d within their lifetime, %d without expiry tag",
             len(ids), "found (dry run)" if dry_run else "terminated", len(alive), len(untagged))
    return {"checked_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "grace_minutes": grace_minutes, "dry_run": dry_run,
            "expired": expired, "terminated": [] if dry_run else ids, "within_lifetime": alive,
            "without_expiry_tag": untagged}
