"""The worker's recording: intervals, counters derived from samples, probes dropped."""

import json
import time

import pytest

from brokerbench.worker.drivers.base import parse_properties
from brokerbench.worker.payload import STAMP_SIZE, key_iterator, payload_pool
from brokerbench.worker.recorder import IntervalWriter, Recorder


def read(path):
    return [json.loads(line) for line in open(path)]


def test_interval_records_hold_counts_and_histograms(tmp_path):
    rec = Recorder()
    out = tmp_path / "w.jsonl"
    w = IntervalWriter(str(out), {"interval_s": 60, "phase": "measure", "worker": "t-0"}, rec,
                       subscriptions=1, progress=lambda s: None)
    w.start(time.time_ns(), 1)
    rec.s.delay_ns += [1_000, 2_000, 3_000]          # 3 sent
    rec.s.publish_ns += [1_500_000, 2_500_000]       # 2 acked: 1.5 ms, 2.5 ms
    rec.s.e2e_ns += [3_000_000, time.time_ns()]      # 1 received + 1 late probe (send time 0)
    rec.error("boom")
    w.finish()
    lines = read(out)
    assert [r["record"] for r in lines] == ["meta", "interval", "end"]
    iv = lines[1]
    assert (iv["sent"], iv["acked"], iv["received"], iv["send_errors"]) == (3, 2, 1, 1)
    assert iv["backlog"] == 1  # 2 acked x 1 subscription - 1 received
    assert iv["publish_latency_us"]["min"] == 1500 and iv["publish_latency_us"]["max"] == 2500
    assert iv["e2e_latency_us"]["count"] == 1 and iv["e2e_latency_us"]["max"] == 3000
    assert iv["publish_delay_us"]["sum"] == 6
    assert lines[2]["status"] == "ok" and lines[2]["totals"]["sent"] == 3


def test_intervals_close_on_schedule(tmp_path):
    rec = Recorder()
    out = tmp_path / "w.jsonl"
    w = IntervalWriter(str(out), {"interval_s": 0.2, "phase": "measure", "worker": "t-0"}, rec,
                       subscriptions=0, progress=lambda s: None)
    w.start(time.time_ns(), 1)
    for _ in range(5):
        rec.s.delay_ns.append(1)
        time.sleep(0.1)
    time.sleep(0.25)
    w.finish()
    intervals = [r for r in read(out) if r["record"] == "interval"]
    assert len(intervals) >= 3
    assert [r["index"] for r in intervals] == list(range(len(intervals)))
    assert sum(r["sent"] for r in intervals) == 5
    for a, b in zip(intervals, intervals[1:]):
        assert a["end_ns"] == b["start_ns"]


def test_payload_pool_sizes_and_file(tmp_path):
    pool = payload_pool({"messageSize": 100})
    assert [len(p) for p in pool] == [100 - STAMP_SIZE]
    rnd = payload_pool({"messageSize": 1000, "useRandomizedPayloads": True, "randomBytesRatio": 0.25,
                        "randomizedPayloadPoolSize": 3})
    assert len(rnd) == 3 and all(len(p) == 992 and p.endswith(bytes(992 - 248)) for p in rnd)
    f = tmp_path / "payload.bin"
    f.write_bytes(b"x" * 64)
    assert payload_pool({"messageSize": 64, "payloadFile": str(f)}) == [b"x" * 56]
    with pytest.raises(ValueError, match="payloadFile"):
        payload_pool({"messageSize": 65, "payloadFile": str(f)})


def test_keys_and_properties():
    assert next(key_iterator("NO_KEY")) is None
    rr = key_iterator("KEY_ROUND_ROBIN")
    assert [next(rr) for _ in range(3)] == [b"0", b"1", b"2"]
    with pytest.raises(ValueError, match="keyDistributor"):
        key_iterator("SOMETIMES")
    assert parse_properties("acks=all\n# c\nlinger.ms = 1\n") == {"acks": "all", "linger.ms": "1"}
    assert parse_properties({"a": 1}) == {"a": "1"}
