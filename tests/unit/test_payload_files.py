"""payloadFile comes only from the payload directories, and an OMB payload name's size is checked before a
byte of it is allocated or written."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
import yaml

from brokerbench.spec import SpecError, load_workload
from brokerbench.spec.roots import payload_dirs
from brokerbench.spec.workload import omb_payload, omb_payload_size

WORKLOAD = {"name": "t", "topics": 1, "partitionsPerTopic": 1, "messageSize": 100, "producerRate": 100,
            "testDurationMinutes": 1}


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BROKERBENCH_PAYLOAD_DIRS", raising=False)
    return tmp_path / "home"


def workload(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({**WORKLOAD, **changes}))
    return path


def refused(path: Path) -> SpecError:
    with pytest.raises(SpecError) as e:
        load_workload(path)
    assert (e.value.file, e.value.field) == (str(path), "payloadFile"), str(e.value)
    return e.value


def test_the_payload_directories_and_their_order(tmp_path, monkeypatch, home):
    from brokerbench.spec.roots import spec_root

    extra = [tmp_path / "a", tmp_path / "b"]
    monkeypatch.setenv("BROKERBENCH_PAYLOAD_DIRS", os.pathsep.join(map(str, extra)))
    assert payload_dirs() == [(spec_root() / "payload").resolve(), *(d.resolve() for d in extra),
                              (home / "payload").resolve()]


def test_an_absolute_path_outside_is_refused_even_when_its_size_matches(tmp_path):
    size = Path("/etc/passwd").stat().st_size
    e = refused(workload(tmp_path, payloadFile="/etc/passwd", messageSize=size))
    assert "lies outside the payload directories" in str(e) and "BROKERBENCH_PAYLOAD_DIRS" in str(e)
    assert all(str(d) in str(e) for d in payload_dirs())


@pytest.mark.parametrize("name", ["../../../../../../../etc/passwd", "payload/../../../../../../../etc/passwd",
                                  "../w.yaml"])
def test_dot_dot_escapes_are_refused(tmp_path, name):
    e = refused(workload(tmp_path, payloadFile=name, messageSize=Path("/etc/passwd").stat().st_size))
    assert "lies outside the payload directories" in str(e)


def test_a_symlink_leading_out_of_a_payload_directory_is_refused(tmp_path, monkeypatch):
    allowed = tmp_path / "payloads"
    allowed.mkdir()
    secret = tmp_path / "secret.data"
    secret.write_bytes(b"s" * 100)
    (allowed / "innocent.data").symlink_to(secret)
    monkeypatch.setenv("BROKERBENCH_PAYLOAD_DIRS", str(allowed))
    e = refused(workload(tmp_path, payloadFile="innocent.data"))
    assert "lies outside the payload directories" in str(e) and str(allowed.resolve()) in str(e)


def test_a_file_inside_a_payload_directory_is_used_by_relative_or_absolute_name(tmp_path, monkeypatch):
    allowed = tmp_path / "payloads"
    (allowed / "sub").mkdir(parents=True)
    (allowed / "sub" / "mine.data").write_bytes(b"m" * 100)
    monkeypatch.setenv("BROKERBENCH_PAYLOAD_DIRS", str(allowed))
    expected = str((allowed / "sub" / "mine.data").resolve())
    for name in ("sub/mine.data", "payload/sub/mine.data", str(allowed / "sub" / "mine.data")):
        assert load_workload(workload(tmp_path, payloadFile=name)).payload_path == expected


def test_a_file_that_is_not_in_a_payload_directory_is_not_found_and_the_directories_named(tmp_path):
    (tmp_path / "mine.data").write_bytes(b"m" * 100)
    e = refused(workload(tmp_path, payloadFile="mine.data"))
    assert "not found" in str(e) and "payload files come from" in str(e)


def _no_files_under(path: Path) -> bool:
    return not path.exists() or not any(p.is_file() for p in path.rglob("*"))


@pytest.mark.parametrize("name, message_size, text", [
    ("payload/payload-99999999999Kb.data", 100, "holds 102,399,999,998,976 bytes; a payload must be <= "),
    ("payload-300000000b.data", 100, "holds 300,000,000 bytes; a payload must be <= "),
    ("payload-300000000b.data", 300_000_000, "field 'messageSize': must be <= "),
    ("payload-200b.data", 100, "holds 200 bytes but messageSize is 100"),
    (f"payload-{'9' * 5000}b.data", 100, "a payload must be <= "),
], ids=["99999999999Kb", "300000000b vs 100", "300000000b vs 300000000", "200b vs 100", "5000 digits"])
def test_an_omb_payload_name_is_checked_before_anything_is_allocated_or_written(tmp_path, home, name,
                                                                                 message_size, text):
    path = workload(tmp_path, payloadFile=name, messageSize=message_size)
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as e:
            load_workload(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text in str(e.value)
    assert e.value.field in ("payloadFile", "messageSize")
    assert peak < 4 * 1024 * 1024, f"{peak:,} bytes allocated while refusing"
    assert _no_files_under(home / "payload"), "a payload file was written"


def test_omb_payload_size_reads_nothing():
    assert omb_payload_size("payload/payload-1Kb.data") == 1024
    assert omb_payload_size("payload-20b.data") == 20
    assert omb_payload_size("mine.data") is None
    assert omb_payload_size(f"payload-{'9' * 5000}Kb.data") > 10**20


def test_omb_payload_refuses_a_size_above_the_bound_without_writing(home):
    with pytest.raises(ValueError, match="a payload must be <= 134,217,728 bytes"):
        omb_payload("payload/payload-131073Kb.data")
    with pytest.raises(ValueError, match="holds 100 bytes but messageSize is 64"):
        omb_payload("payload-100b.data", message_size=64)
    assert _no_files_under(home / "payload")
    assert omb_payload("payload-100b.data", message_size=100).stat().st_size == 100


def test_the_worker_refuses_a_payload_file_of_another_size_without_reading_it(tmp_path):
    from brokerbench.worker.payload import payload_pool

    big = tmp_path / "big.data"
    with big.open("wb") as f:
        f.truncate(512 * 1024 * 1024)  # sparse: takes no disk, but would take 512 MiB to read
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="has 536870912 bytes, messageSize is 100"):
            payload_pool({"messageSize": 100, "payloadFile": str(big)})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
