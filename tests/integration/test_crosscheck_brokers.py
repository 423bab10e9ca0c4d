"""Cross-check smoke: the vendor's perf tool and brokerbench's worker both produce figures on one broker.

A few seconds per side against a broker the local environment deploys on
loopback (the ``local_env`` fixture tears it down). Only that each side
produced figures is asserted, never their values: agreement is the
benchmark's business (bench/crosscheck.py), not a timed test's.
"""

from __future__ import annotations

import pytest

from brokerbench import crosscheck as xc
from brokerbench.spec.clients import CLIENT_LIBRARIES

pytestmark = pytest.mark.integration


def both_sides_measured(result: dict, broker: str, drivers: tuple[str, ...]) -> None:
    rows = [r for r in result["rows"] if r["phase"] != "e2e"]
    vendor = [r for r in rows if r["side"] == xc.VENDOR]
    ours = [r for r in rows if r["side"] == xc.BROKERBENCH]
    assert len(vendor) == 1 and len(ours) == len(drivers), xc.format_table(rows)
    for r in rows:
        assert r["broker"] == broker
        assert r["achieved_msg_s"], r
        assert r["publish_p50_ms"] is not None and r["publish_p99_ms"] is not None, r
    for r in ours:
        assert r["ratio_publish_p50"] is not None and r["ratio_achieved"] is not None, r
    assert result["provenance"]["tool_version"]
    assert set(result["provenance"]["client_libraries"]) == set(drivers)


def test_rabbitmq_perf_test_and_the_worker_both_measure(local_env, tmp_path):
    ep = local_env.deploy("rabbitmq", {}, "fsync-off", {}).to_dict()
    result = xc.crosscheck("rabbitmq", ep, ep["version"], rates=(500.0,), sizes=(100,), seconds=3,
                           max_probe=False, work_dir=tmp_path / "xc")
    both_sides_measured(result, "rabbitmq", CLIENT_LIBRARIES["rabbitmq"])
    assert result["provenance"]["tool"] == "PerfTest"
    # PerfTest runs a consumer: end-to-end figures on both sides
    assert all(r["e2e_p50_ms"] is not None for r in result["rows"]), xc.format_table(result["rows"])


@pytest.mark.slow
def test_kafka_producer_performance_and_the_worker_both_measure(local_env, tmp_path):
    local_env.settings = local_env.settings.model_copy(update=xc.LOCAL_HEAPS)
    ep = local_env.deploy("kafka", {}, "fsync-off", {}).to_dict()
    result = xc.crosscheck("kafka", ep, ep["version"], rates=(500.0,), sizes=(100,), seconds=3, max_probe=False,
                           work_dir=tmp_path / "xc")
    both_sides_measured(result, "kafka", CLIENT_LIBRARIES["kafka"])
    assert result["provenance"]["tool_version"] == ep["version"]
    # the end-to-end phase: EndToEndLatency, then each driver with a consumer at the rate the tool reached
    e2e = [r for r in result["rows"] if r["phase"] == "e2e"]
    assert [r["side"] for r in e2e] == [xc.VENDOR] + [xc.BROKERBENCH] * len(CLIENT_LIBRARIES["kafka"])
    assert e2e[0]["client"].startswith("EndToEndLatency") and e2e[0]["rate_msg_s"] > 0, xc.format_table(e2e)
    for r in e2e:
        assert r["e2e_p50_ms"] is not None and r["e2e_p99_ms"] is not None, r
        assert r["rate_msg_s"] == e2e[0]["rate_msg_s"]
    assert all(r["ratio_e2e_p50"] is not None for r in e2e[1:]), xc.format_table(e2e)


@pytest.mark.slow
def test_pulsar_perf_and_the_worker_both_measure_after_a_warmup(local_env, tmp_path):
    local_env.settings = local_env.settings.model_copy(update=xc.LOCAL_HEAPS)
    ep = local_env.deploy("pulsar", {}, "fsync-off", {}).to_dict()
    result = xc.crosscheck("pulsar", ep, ep["version"], rates=(500.0,), sizes=(100,), seconds=3, max_probe=False,
                           work_dir=tmp_path / "xc", warmup_s=1.0)
    both_sides_measured(result, "pulsar", CLIENT_LIBRARIES["pulsar"])
    # pulsar-perf leaves its warm-up out, so the worker does too: both measured 3 s
    assert result["settings"]["vendor_leaves_out_warmup"] and {r["seconds"] for r in result["rows"]} == {3.0}
    assert all("first 1 s left out" in r["note"] for r in result["rows"]), xc.format_table(result["rows"])
    # the tool's libraries are the broker's version, whichever release its own jar is
    assert result["provenance"]["tool_libraries_version"] == ep["version"]
