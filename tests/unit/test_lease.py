"""Environment leases: one run at a time on the hosts, whichever process asks."""

import multiprocessing
import time

import pytest

from brokerbench import lease


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def test_second_run_waits_until_the_first_releases():
    assert lease.acquire("local@h", "run-a", note="suite smoke") is None
    busy = lease.acquire("local@h", "run-b")
    assert isinstance(busy, lease.Busy)
    text = str(busy)
    assert "run-a" in text and "suite smoke" in text and "1 of 1 slot" in text
    # the holder renews, the other does not get in
    assert lease.acquire("local@h", "run-a") is None
    lease.renew("local@h", "run-a")
    assert lease.release("local@h", "run-a") is True
    assert lease.acquire("local@h", "run-b") is None
    assert set(lease.holders("local@h")) == {"run-b"}


def test_slots_allow_that_many_runs():
    assert lease.acquire("aws", "r1", slots=2) is None
    assert lease.acquire("aws", "r2", slots=2) is None
    busy = lease.acquire("aws", "r3", slots=2)
    assert busy is not None and set(busy.holders) == {"r1", "r2"}


def test_renew_without_the_lease_is_refused_naming_the_holder():
    lease.acquire("local@h", "run-a")
    with pytest.raises(lease.LeaseLost, match=r"run-b does not hold .*held by run-a"):
        lease.renew("local@h", "run-b")


def test_an_expired_lease_is_dropped(caplog):
    lease.acquire("local@h", "crashed", ttl_s=0.05)
    time.sleep(0.1)
    with caplog.at_level("WARNING", logger="brokerbench"):
        assert lease.acquire("local@h", "next") is None
    assert "crashed expired" in caplog.text


def _race(lock_dir: str, name: str, out) -> None:
    import os

    os.environ["BROKERBENCH_LOCK_DIR"] = lock_dir
    out.put((name, lease.acquire("local@h", name) is None))


def test_processes_racing_for_one_slot_get_it_once(lock_dir):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(lock_dir), f"run-{i}", out)) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = [out.get(timeout=5) for _ in procs]
    winners = [name for name, won in results if won]
    assert len(winners) == 1
    assert set(lease.holders("local@h")) == set(winners)


def test_held_context_waits_then_gives_up_with_the_reason():
    lease.acquire("local@h", "run-a", note="nightly")
    with pytest.raises(TimeoutError, match="run-a"):
        with lease.held("local@h", "script", wait_s=0.2, poll_s=0.05):
            pass
    lease.release("local@h", "run-a")
    with lease.held("local@h", "script"):
        assert set(lease.holders("local@h")) == {"script"}
    assert lease.holders("local@h") == {}


def test_the_trigger_fires_when_the_lease_is_released(lock_dir):
    import asyncio

    from brokerbench.triggers import LeaseFreeTrigger

    lease.acquire("local@h", "run-a")
    trigger = LeaseFreeTrigger("local@h", 1, str(lock_dir), poll_s=0.05)
    assert LeaseFreeTrigger(**trigger.serialize()[1]).store == str(lock_dir)

    async def wait_for_event():
        gen = trigger.run()
        task = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.3)
        assert not task.done()  # still held: the trigger keeps waiting
        await asyncio.to_thread(lease.release, "local@h", "run-a")
        return await asyncio.wait_for(task, 5)

    event = asyncio.run(wait_for_event())
    assert event.payload == {"scope": "local@h", "free": True}


def test_a_lease_bound_to_a_process_goes_with_it(caplog):
    """`brokerbench bench` runs a whole DAG in one process; a stopped one frees the environment at once."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert lease.acquire("local@h", "bench-run", bound_pid=proc.pid, ttl_s=3600) is None
        assert lease.acquire("local@h", "next") is not None  # its process lives: still held
    finally:
        proc.kill()
        proc.wait()
    with caplog.at_level("WARNING", logger="brokerbench"):
        assert lease.acquire("local@h", "next") is None
    assert "process running that run" in caplog.text


# -- the lease in S3 (workers that share nothing but the results bucket) ---------------------------------

from tests.aws_fixtures import moto_server  # noqa: E402,F401 - a fixture


def test_s3_store_workers_racing_for_one_slot_get_it_once(moto_server, monkeypatch):
    """Six racers, each with its own S3 client and nothing on disk in common, race for one slot of a lease
    kept in the results bucket: S3's conditional writes let exactly one of them take it."""
    import json
    import threading

    from tests.aws_fixtures import s3_client

    monkeypatch.delenv("BROKERBENCH_LOCK_DIR")
    s3_client(moto_server).create_bucket(Bucket="bench-leases")
    uri = "s3://bench-leases/results"
    store = lease.store_for(uri)
    assert str(store) == "s3://bench-leases/results/locks"
    results: dict[str, bool] = {}
    start = threading.Barrier(6)

    def race(name: str) -> None:
        mine = lease.S3Store(f"{uri}/locks", client=s3_client(moto_server))
        start.wait()
        results[name] = lease.acquire("aws", name, store=mine) is None

    threads = [threading.Thread(target=race, args=(f"run-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [name for name, won in results.items() if won]
    assert len(results) == 6 and len(winners) == 1, results
    assert set(lease.holders("aws", store)) == set(winners)
    # the document is where the store says, readable by anyone with the bucket
    body = s3_client(moto_server).get_object(Bucket="bench-leases", Key="results/locks/aws.json")["Body"].read()
    assert set(json.loads(body)["holders"]) == set(winners)
    # renew, release and the trigger's view work the same way
    lease.renew("aws", winners[0], store)
    with pytest.raises(lease.LeaseLost, match=f"held by {winners[0]}"):
        lease.renew("aws", "run-x", store)
    assert lease.release("aws", winners[0], store) is True
    assert lease.holders("aws", lease.store_at(str(store))) == {}


def test_the_store_follows_the_results_root(tmp_path, monkeypatch):
    monkeypatch.delenv("BROKERBENCH_LOCK_DIR")
    assert str(lease.store_for(str(tmp_path / "results"))) == str(tmp_path / "results" / "locks")
    monkeypatch.setenv("BROKERBENCH_LOCK_DIR", str(tmp_path / "override"))
    assert str(lease.store_for("s3://any/where")) == str(tmp_path / "override")
