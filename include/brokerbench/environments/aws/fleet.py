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
* **Teardown cannot leak.** :meth:`Fleet.terminate_run` finds instances by
  the run's tag (not by ids passed around), waits until they are terminated
  (EC2's ``instance_terminated`` waiter), then deletes the security group.
  A provision that fails cleans up after itself the same way before its
  error leaves it; :func:`cleanup_run` does it from anywhere (an Airflow
  ``on_failure_callback``) with nothing but the run key. Each instance also
  protects itself: ``InstanceInitiatedShutdownBehavior = terminate`` plus a
  ``shutdown -h +N`` scheduled from user data at the run's maximum lifetime,
  so a dead controller still stops the bill.
* **Leftovers are reused only when consistent.** :meth:`Fleet.reconcile`
  runs at the start of every provision: instances of the run left by an
  earlier attempt whose process died are kept when they match what this
  attempt wants (role, instance type, AMI, security group, subnet, key pair,
  count), every other one is terminated; the security group's rules are
  brought back to the wanted set.
* **Cost before anything is created.** :func:`estimate_cost` multiplies the
  instance types' hourly prices by the expected duration; a run above the
  cost cap is refused before the first API call that costs money.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import re
import time
from typing import Any, Mapping, Sequence

from ..base import EnvironmentFailure

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


def deploy_count(plan: Any) -> int:
    """The broker deployments a run makes: one per (broker, variant) of the plan, and in an A/B run that redeploys
    its sides one more at every change of side (ABBA: about one per pair of trials)."""
    count = 0
    for broker, variant in plan.deployments():
        items = plan.items_for(broker, variant)
        count += 1 + (sum(1 for a, b in zip(items, items[1:]) if a.side != b.side)
                      if plan.redeploys_sides(broker) else 0)
    return count


def expected_minutes(plan: Any | None) -> float:
    """Expected wall time of a run: 20 min setup, 6 min per broker deployment (an A/B run's changes of side
    included), warm-up + measured phase + 1 min per workload, 10 min analysis and teardown."""
    if plan is None:
        return 60.0
    total = 20.0 + 10.0 + 6.0 * deploy_count(plan)
    for item in plan.items:
        w = item.workload
        total += float(w.warmup_duration_minutes or 0) + float(w.test_duration_minutes or 0) + 1.0
    return total


def role_counts(counts: Mapping[str, Any], instance_counts: Mapping[str, Any], needs_metadata: bool) -> dict[str, int]:
    """Instances per role: 3 brokers, 3 metadata hosts (where needed), 2 clients, refined by the setting
    ``counts`` and then by the run param ``instance_counts``."""
    out = {"broker": 3, "metadata": 3 if needs_metadata else 0, "client": 2,
           **{k: int(v) for k, v in {**counts, **instance_counts}.items()}}
    if not needs_metadata:
        out["metadata"] = 0
    return out


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
    expected, at_most = per_hour * hours, per_hour * max_lifetime_hours
    # figures kept to 4 decimals: $0.0129 must not read as (or compare like) $0.01
    est = {"roles": roles, "usd_per_hour": round(per_hour, 4), "expected_hours": round(hours, 3),
           "expected_usd": round(expected, 4), "max_lifetime_hours": max_lifetime_hours,
           "max_usd": round(at_most, 4), "cost_cap_usd": cap_usd,
           "prices": "on-demand us-east-1; override with settings prices_usd_per_hour"}
    if unknown:
        est["refused"] = (f"no hourly price known for instance type(s) {', '.join(sorted(set(unknown)))}: "
                          "add them to settings prices_usd_per_hour so the cost cap can be checked")
        est["refused_field"] = "instance_types"
    elif cap_usd is not None and expected > cap_usd:  # exact, not the rounded figures
        a, b = money_pair(expected, cap_usd)
        est["refused"] = (f"expected cost {a} ({per_hour:.4f} $/h x {hours:.3f} h) is above the cost cap {b} "
                          "(param cost_cap_usd)")
        est["refused_field"] = "cost_cap_usd"
    elif hours > max_lifetime_hours:
        est["refused"] = (f"expected duration {hours:.2f} h is longer than the instances' maximum lifetime "
                          f"{max_lifetime_hours:.2f} h (settings max_lifetime_hours): they would shut "
                          "themselves down mid-run")
        est["refused_field"] = "max_lifetime_hours"
    return est


def money(usd: float, digits: int | None = None) -> str:
    """``$12.58``, ``$0.0129``: 2 decimals from $10 up, 4 below (cents of cents matter there)."""
    if digits is None:
        digits = 2 if abs(usd) >= 10 else 4
    return f"${usd:.{digits}f}"


def money_pair(a: float, b: float) -> tuple[str, str]:
    """Two amounts printed as :func:`money` does, with more decimals (8 at most) where it takes
    more to tell them apart: ``$0.0129`` vs ``$0.0100``, ``$25.004`` vs ``$25.000``."""
    digits = 2 if min(abs(a), abs(b)) >= 10 else 4
    while digits < 8 and f"{a:.{digits}f}" == f"{b:.{digits}f}" and a != b:
        digits += 1
    return money(a, digits), money(b, digits)


class Fleet:
    """EC2 calls for one run, through the provider's EC2Hook (client API)."""

    def __init__(self, run_key: str, aws_conn_id: str, region_name: str | None = None):
        # Airflow: loaded where this runs under Airflow, not on import
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
    def security_groups(self) -> list[dict[str, Any]]:
        filters = [{"Name": f"tag:{RUN_TAG}", "Values": [self.run_key]}]
        return self.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]

    def security_group(self, controller_cidr: str, brokers: list[str], vpc_id: str | None) -> str:
        """The run's security group (found again by tag, else created): SSH and the
        brokers' client ports from the controller's address only; anything between
        members of the group. A group found again gets exactly these rules back
        (an earlier attempt may have died between creating it and opening ports,
        or opened them to another address)."""
        ports = sorted({22, *(p for b in brokers for p in CONTROLLER_PORTS.get(b, []))})
        found = [g for g in self.security_groups() if not vpc_id or g.get("VpcId") == vpc_id]
        if found:
            gid = found[0]["GroupId"]
            self._set_rules(found[0], controller_cidr, ports)
            return gid
        kw: dict[str, Any] = {"GroupName": f"brokerbench-{self.tag}",
                              "Description": f"brokerbench run {self.run_key}"[:255],
                              "TagSpecifications": [{"ResourceType": "security-group",
                                                     "Tags": self.tags("security-group",
                                                                       "SSH and broker ports of the run")}]}
        if vpc_id:
            kw["VpcId"] = vpc_id
        gid = self.ec2.create_security_group(**kw)["GroupId"]
        self.ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=_permissions(
            _wanted_rules(gid, controller_cidr, ports)))
        log.info("security group %s: ports %s from %s, all traffic within the fleet", gid, ports, controller_cidr)
        return gid

    def _set_rules(self, group: dict[str, Any], controller_cidr: str, ports: list[int]) -> None:
        gid = group["GroupId"]
        wanted = _wanted_rules(gid, controller_cidr, ports)
        have = _rules_of(group.get("IpPermissions") or [])
        add, drop = wanted - have, have - wanted
        if drop:
            self.ec2.revoke_security_group_ingress(GroupId=gid, IpPermissions=_permissions(drop))
        if add:
            self.ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=_permissions(add))
        log.info("security group %s found by tag %s, reused%s", gid, RUN_TAG,
                 f": {len(add)} rule(s) added, {len(drop)} revoked" if add or drop else "")

    def delete_security_groups(self, attempts: int = 10, wait_s: float = 3.0,
                               group_ids: list[str] | None = None) -> list[str]:
        """Delete the run's security groups (all, or ``group_ids``). Call only once the
        instances in them are terminated; a DependencyViolation (network interfaces
        still detaching) is retried ``attempts`` times."""
        deleted = []
        for sg in self.security_groups():
            if group_ids is not None and sg["GroupId"] not in group_ids:
                continue
            for i in range(attempts):
                try:
                    self.ec2.delete_security_group(GroupId=sg["GroupId"])
                    deleted.append(sg["GroupId"])
                    break
                except Exception as e:  # noqa: BLE001 - DependencyViolation while instances shut down
                    if "NotFound" in str(e):
                        break
                    if i == attempts - 1:
                        raise EnvironmentFailure(f"security group {sg['GroupId']} not deleted: {e}") from e
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

    def reconcile(self, wanted: dict[str, dict[str, Any]], security_group: str) -> dict[str, Any]:
        """Instances of the run left by an earlier attempt (a provision whose process
        died, or that ran with other settings): keep those that match ``wanted``
        (``{role: {"count", "instance_type", "image_id", "subnet_id", "key_name"}}``),
        terminate the rest and wait until they are gone; also delete the run's other
        security groups (another VPC) once nothing is in them.

        Kept: pending or running, a role this run wants, the wanted instance type,
        AMI, subnet and key pair, in ``security_group``, at most ``count`` per role
        (lowest names first). Terminated: everything else of the run, stopped and
        stopping instances included (they no longer shut themselves down)."""
        keep: list[str] = []
        drop: dict[str, str] = {}
        per_role: dict[str, int] = {}
        for inst in self.instances(LIVE_STATES):
            iid, role = inst["InstanceId"], _tags(inst).get(ROLE_TAG)
            want = wanted.get(role or "")
            why = None
            if inst["State"]["Name"] not in ("pending", "running"):
                why = f"state {inst['State']['Name']}"
            elif not want or not want.get("count"):
                why = f"role {role!r} not wanted"
            elif inst.get("InstanceType") != want["instance_type"]:
                why = f"instance type {inst.get('InstanceType')}, wanted {want['instance_type']}"
            elif want.get("image_id") and inst.get("ImageId") != want["image_id"]:
                why = f"image {inst.get('ImageId')}, wanted {want['image_id']}"
            elif want.get("subnet_id") and inst.get("SubnetId") != want["subnet_id"]:
                why = f"subnet {inst.get('SubnetId')}, wanted {want['subnet_id']}"
            elif want.get("key_name") and inst.get("KeyName") != want["key_name"]:
                why = f"key pair {inst.get('KeyName')}, wanted {want['key_name']}"
            elif security_group not in {g["GroupId"] for g in inst.get("SecurityGroups") or []}:
                why = f"not in security group {security_group}"
            elif per_role.get(str(role), 0) >= want["count"]:
                why = f"more {role} instances than the {want['count']} wanted"
            if why:
                drop[iid] = why
            else:
                keep.append(iid)
                per_role[str(role)] = per_role.get(str(role), 0) + 1
        for iid, why in drop.items():
            log.warning("%s of run %s left by an earlier attempt is not reusable (%s): terminating", iid,
                        self.run_key, why)
        record: dict[str, Any] = {"kept": keep, "terminated": dict(drop), "security_groups_deleted": []}
        left = self.terminate(list(drop))
        if left:
            raise EnvironmentFailure(f"instances of run {self.run_key} left by an earlier attempt could not be "
                                    f"terminated: {left}")
        stale = [g["GroupId"] for g in self.security_groups() if g["GroupId"] != security_group]
        if stale:
            record["security_groups_deleted"] = self.delete_security_groups(group_ids=stale)
        if keep:
            log.info("%d instance(s) of run %s left by an earlier attempt reused: %s", len(keep), self.run_key,
                     ", ".join(keep))
        return record

    def ensure_role(self, role: str, count: int, instance_type: str, launch: dict[str, Any],
                    purpose: str, lifetime_minutes: int) -> list[dict[str, Any]]:
        """``count`` live instances of ``role``: those found by tag, plus the missing ones."""
        existing = self._name_uniquely(role, self.instances(["pending", "running"], role))
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
        return existing + self._name_uniquely(role, created, taken=existing)

    def _name_uniquely(self, role: str, insts: list[dict[str, Any]],
                       taken: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """Every instance of the role named ``bb-<hash>-<role>-<index>``, no name twice: host
        names key the host directories and pinned host keys. Instances whose name has no
        index (created, then the process died before naming them) or repeats one get a
        free index."""
        pattern = re.compile(rf"^bb-{self.tag}-{re.escape(role)}-(\d+)$")
        used = {_tags(i).get("Name") for i in taken}
        keeps: dict[str, str] = {}  # name -> the instance that keeps it (first one holding it)
        for inst in insts:
            name = _tags(inst).get("Name", "")
            if pattern.match(name) and name not in used and name not in keeps:
                keeps[name] = inst["InstanceId"]
        used |= set(keeps)
        free = (f"bb-{self.tag}-{role}-{n}" for n in range(100_000) if f"bb-{self.tag}-{role}-{n}" not in used)
        out = []
        for inst in insts:
            name = _tags(inst).get("Name", "")
            if keeps.get(name) != inst["InstanceId"]:
                name = next(free)
                self.ec2.create_tags(Resources=[inst["InstanceId"]], Tags=[{"Key": "Name", "Value": name}])
                inst = {**inst, "Tags": [t for t in inst.get("Tags", []) if t["Key"] != "Name"]
                        + [{"Key": "Name", "Value": name}]}
            out.append(inst)
        return out

    def wait_running(self, ids: list[str], timeout_s: float = 600, poll_s: float = 2.0) -> list[dict[str, Any]]:
        """Wait (EC2's ``instance_running`` waiter) until every instance runs; their descriptions."""
        if not ids:
            return []
        try:
            self.ec2.get_waiter("instance_running").wait(InstanceIds=ids, WaiterConfig=_waiter_config(
                timeout_s, poll_s))
        except Exception as e:  # noqa: BLE001 - WaiterError: a state that cannot become running, or time out
            states = {i["InstanceId"]: i["State"]["Name"] for i in self._describe(ids)}
            raise EnvironmentFailure(f"instances not running (waited up to {timeout_s:.0f} s): {states}: {e}") from e
        return self._describe(ids)

    def _describe(self, ids: list[str]) -> list[dict[str, Any]]:
        found = []
        for page in self.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids):
            for r in page["Reservations"]:
                found += r["Instances"]
        return found

    def terminate(self, ids: list[str], timeout_s: float = 600, poll_s: float = 5.0) -> list[str]:
        """Terminate ``ids`` and wait (EC2's ``instance_terminated`` waiter) until they are;
        returns the ids not terminated (after a time-out or an error)."""
        if not ids:
            return []
        for chunk in range(0, len(ids), 500):
            self.hook.terminate_instances(instance_ids=ids[chunk:chunk + 500])
        return self.wait_terminated(ids, timeout_s, poll_s)

    def wait_terminated(self, ids: list[str], timeout_s: float = 600, poll_s: float = 5.0) -> list[str]:
        """Wait with EC2's ``instance_terminated`` waiter; the ids still not terminated."""
        left: list[str] = []
        for chunk in range(0, len(ids), 100):
            part = ids[chunk:chunk + 100]
            try:
                self.ec2.get_waiter("instance_terminated").wait(InstanceIds=part,
                                                                WaiterConfig=_waiter_config(timeout_s, poll_s))
            except Exception as e:  # noqa: BLE001 - WaiterError: timed out, or an unexpected state
                still = [i["InstanceId"] for i in self._describe(part) if i["State"]["Name"] != "terminated"]
                log.error("instances not terminated after waiting: %s (%s)", still, e)
                left += still
        return left

    def terminate_run(self, timeout_s: float = 600, poll_s: float = 5.0) -> dict[str, Any]:
        """Terminate every instance tagged with the run, wait until terminated,
        then delete the run's security group (only then: it cannot go while an
        instance is in it). Idempotent."""
        ids = [i["InstanceId"] for i in self.instances(LIVE_STATES)]
        shutting = [i["InstanceId"] for i in self.instances(["shutting-down"]) if i["InstanceId"] not in ids]
        record: dict[str, Any] = {"terminated": ids, "by": f"tag {RUN_TAG}={self.run_key}", "errors": []}
        left = self.terminate(ids, timeout_s, poll_s) + self.wait_terminated(shutting, timeout_s, poll_s)
        if left:
            record["errors"].append(f"not terminated after {timeout_s:.0f} s: {left}; the security group is "
                                    "kept until they are")
            record["security_groups_deleted"] = []
        else:
            try:
                record["security_groups_deleted"] = self.delete_security_groups()
            except EnvironmentFailure as e:
                record["errors"].append(str(e))
        record["remaining"] = [i["InstanceId"] for i in self.instances(LIVE_STATES)]
        record["security_groups_remaining"] = [g["GroupId"] for g in self.security_groups()]
        return record


def cleanup_run(run_key: str, aws_conn_id: str = "brokerbench_aws", region_name: str | None = None,
                timeout_s: float = 600) -> dict[str, Any]:
    """Terminate every instance tagged with ``run_key`` (waiting until terminated) and delete
    the run's security group: what a failed provision leaves, found by tag from any process.

    Never raises: meant for an Airflow ``on_failure_callback`` (whose exceptions Airflow
    only logs). The record says what was terminated and deleted, and ``errors`` /
    ``remaining`` / ``security_groups_remaining`` what was not."""
    record: dict[str, Any] = {"run_key": run_key, "errors": []}
    try:
        result = Fleet(run_key, aws_conn_id, region_name).terminate_run(timeout_s=timeout_s)
        record["errors"] += result.pop("errors", [])
        record.update(result)
    except Exception as e:  # noqa: BLE001 - reported, never raised
        record["errors"].append(f"{type(e).__name__}: {e}")
    if record["errors"] or record.get("remaining") or record.get("security_groups_remaining"):
        log.error("cleanup of run %s incomplete: %s", run_key, record)
    else:
        log.info("cleanup of run %s: terminated %s, security groups deleted %s", run_key,
                 record.get("terminated") or "nothing", record.get("security_groups_deleted") or "none")
    return record


def _waiter_config(timeout_s: float, poll_s: float) -> dict[str, int]:
    delay = max(1, int(round(poll_s)))
    return {"Delay": delay, "MaxAttempts": max(1, math.ceil(timeout_s / delay))}


def _wanted_rules(gid: str, controller_cidr: str, ports: list[int]) -> set[tuple]:
    rules: set[tuple] = {("cidr", "tcp", p, p, controller_cidr) for p in ports}
    rules.add(("group", "-1", None, None, gid))
    return rules


def _rules_of(permissions: list[dict[str, Any]]) -> set[tuple]:
    out: set[tuple] = set()
    for p in permissions:
        proto = str(p.get("IpProtocol"))
        lo, hi = (None, None) if proto == "-1" else (p.get("FromPort"), p.get("ToPort"))
        out |= {("cidr", proto, lo, hi, r["CidrIp"]) for r in p.get("IpRanges") or []}
        out |= {("cidr6", proto, lo, hi, r["CidrIpv6"]) for r in p.get("Ipv6Ranges") or []}
        out |= {("group", proto, lo, hi, g["GroupId"]) for g in p.get("UserIdGroupPairs") or []}
        out |= {("prefix", proto, lo, hi, pl["PrefixListId"]) for pl in p.get("PrefixListIds") or []}
    return out


def _permissions(rules: set[tuple]) -> list[dict[str, Any]]:
    keys = {"cidr": ("IpRanges", "CidrIp"), "cidr6": ("Ipv6Ranges", "CidrIpv6"),
            "group": ("UserIdGroupPairs", "GroupId"), "prefix": ("PrefixListIds", "PrefixListId")}
    out = []
    for kind, proto, lo, hi, value in sorted(rules, key=str):
        perm: dict[str, Any] = {"IpProtocol": proto}
        if lo is not None:
            perm.update(FromPort=lo, ToPort=hi)
        listkey, itemkey = keys[kind]
        item = {itemkey: value}
        if kind == "cidr":
            item["Description"] = "brokerbench controller"
        elif kind == "group":
            item["Description"] = "fleet members"
        perm[listkey] = [item]
        out.append(perm)
    return out


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
    # Airflow: loaded where this runs under Airflow, not on import
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

    hook = EC2Hook(aws_conn_id=aws_conn_id, region_name=region_name, api_type="client_type")
    now = now or dt.datetime.now(dt.timezone.utc)
    cutoff = now - dt.timedelta(minutes=grace_minutes)
    filters = [{"Name": "tag-key", "Values": [RUN_TAG]}, {"Name": "instance-state-name", "Values": LIVE_STATES}]
    expired: list[dict[str, Any]] = []
    alive: list[dict[str, Any]] = []
    untagged: list[dict[str, Any]] = []
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
