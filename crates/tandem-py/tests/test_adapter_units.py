"""The engine-free parts of the engine plug-ins on their own (no cluster, no engine): version
refusal, request ids, page ids from token slots, the ledger's pairing and deadlines, and that
``import tandem`` and the adapter modules import no engine and no torch."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace as NS

import pytest

import tandem
from tandem.adapter import keys, versions
from tandem.adapter.ledger import Ledger
from tandem.adapter.offload import StagingPages


def test_another_engine_version_is_refused_naming_both() -> None:
    with pytest.raises(versions.UnsupportedEngineVersion) as e:
        versions.require("sglang", installed="0.5.22")
    assert "0.5.22" in str(e.value) and "0.5.23" in str(e.value)
    assert e.value.installed == "0.5.22" and e.value.supported == "0.5.23"
    assert versions.require("vllm", installed="0.33.0") == "0.33.0"
    assert versions.require("vllm", installed="0.33.0+cu130") == "0.33.0+cu130"
    assert "is not installed" in str(versions.UnsupportedEngineVersion("vllm", None, "0.33.0"))


def test_engine_modules_refuse_when_the_engine_is_missing_or_another_version() -> None:
    code = (
        "import tandem.adapter.versions as v\n"
        "for m in ('tandem.sglang', 'tandem.vllm'):\n"
        "    try:\n"
        "        __import__(m)\n"
        "    except v.UnsupportedEngineVersion as e:\n"
        "        print(m, 'refused:', e)\n"
        "    else:\n"
        "        print(m, 'imported')\n"
        "import sys\n"
        "print('torch' in sys.modules, 'sglang' in sys.modules, 'vllm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    for line, engine, pin in zip(lines, ("sglang", "vllm"), ("0.5.23", "0.33.0")):
        installed = versions.installed_version(engine)
        if installed is None or installed.split("+")[0] != pin:
            assert "refused:" in line and pin in line, line
    if all(versions.installed_version(e) is None for e in ("sglang", "vllm")):
        assert lines[-1] == "False False False"  # nothing heavy was imported


def test_request_ids_are_equal_for_equal_calls_and_apart_otherwise() -> None:
    ks = [bytes([i]) * 32 for i in range(4)]
    a = keys.request_id("get", ks)
    assert a == keys.request_id("get", [k.hex() for k in ks])  # bytes and hex str alike
    assert a != keys.request_id("set", ks) and a != keys.request_id("get", ks[:3])
    assert 0 <= a < keys.UNPAIRED and keys.is_paired(a)
    u = keys.request_id("exists", ks, paired=False)
    assert not keys.is_paired(u) and u < 1 << 62
    with pytest.raises(ValueError):
        keys.request_id("get", [b""])


def test_pages_of_slots() -> None:
    assert keys.pages_of_slots([64, 65, 66, 67, 8, 9, 10, 11], 4, 32) == [16, 2]
    with pytest.raises(ValueError, match="whole number"):
        keys.pages_of_slots([0, 1, 2], 4, 32)
    with pytest.raises(ValueError, match="does not start"):
        keys.pages_of_slots([1, 2, 3, 4], 4, 32)
    with pytest.raises(ValueError, match="past the pool"):
        keys.pages_of_slots([128, 129, 130, 131], 4, 32)


def task(epoch: int, seq: int) -> tandem.TaskId:
    return tandem.TaskId(epoch, seq)


def test_follower_pairs_calls_with_frames_by_position_whichever_comes_first() -> None:
    led = Ledger(epoch=3, follower=True)
    # The frame comes first for the first call, the call first for the second.
    led.frame_start(NS(task=task(3, 0), kind="store", request=7, block_hashes=(1, 2), page_ids=(10, 11)))
    s1 = led.expect("store", 7, {1: 20, 2: 21})
    s2 = led.expect("store", 7, {1: 30, 2: 31})
    led.frame_start(NS(task=task(3, 1), kind="store", request=7, block_hashes=(2,), page_ids=(11,)))
    binds = led.take_binds()
    assert [b.bind_pages() for b in binds] == [[20, 21], [31]]
    assert led.take_binds() == []
    led.frame_outcome(NS(task=task(3, 1), kind="store", request=7, result="failed", reason="x"))
    led.frame_outcome(NS(task=task(3, 0), kind="store", request=7, result="ok", reason=None))
    assert s1.ok and not s2.ok and s2.reason == "x"
    assert led.open_slots() == 0


def test_refused_task_without_start_settles_the_call_at_its_position() -> None:
    led = Ledger(epoch=1, follower=True)
    s = led.expect("store", 9, {5: 1})
    led.frame_outcome(NS(task=task(1, 4), kind="store", request=9, result="failed", reason="tier full"))
    assert s.settled and not s.ok and s.reason == "tier full"


def test_a_call_that_timed_out_keeps_its_position() -> None:
    led = Ledger(epoch=1, follower=True)
    first = led.wait(led.expect("lookup", 5), 0.01)
    assert first.abandoned and not first.settled
    second = led.expect("lookup", 5)
    led.frame_lookup(NS(request=5, matched_blocks=3))  # the first call's answer
    led.frame_lookup(NS(request=5, matched_blocks=0))
    assert first.matched == 3 and second.matched == 0
    # The first call gave up, so the load its lookup announced still takes a position.
    third = led.expect("load", 5, {1: 1})
    led.frame_start(NS(task=task(1, 0), kind="load", request=5, block_hashes=(1,), page_ids=(1,)))
    led.frame_start(NS(task=task(1, 1), kind="load", request=5, block_hashes=(1,), page_ids=(1,)))
    assert third.task == task(1, 1)


def test_unpaired_lookups_are_not_tracked_by_followers() -> None:
    led = Ledger(epoch=1, follower=True)
    for _ in range(1000):
        led.frame_lookup(NS(request=keys.UNPAIRED | 5, matched_blocks=1))
    assert led.open_slots() == 0 and led._streams == {}


def test_new_epoch_aborts_unknown_tasks_and_leaves_started_ones_to_frame_zero() -> None:
    led = Ledger(epoch=1, follower=True)
    unknown = led.expect("load", 1, {1: 1})
    started = led.expect("store", 2, {2: 2})
    led.frame_start(NS(task=task(1, 0), kind="store", request=2, block_hashes=(2,), page_ids=(2,)))
    waiter = threading.Thread(target=led.wait, args=(started, 5.0))
    waiter.start()
    assert led.new_epoch(2) == 1
    assert unknown.result == "aborted"
    assert not started.settled
    led.frame_outcome(NS(task=task(1, 0), kind="store", request=2, result="ok", reason=None))  # redelivered
    waiter.join(timeout=5)
    assert started.ok


def test_leader_tracks_by_task_ignores_frame_lookups_and_binds_from_the_frame() -> None:
    led = Ledger(epoch=1, follower=False)
    s = led.track("load", 4, task(1, 2), {1: 5, 2: 6, 3: 7})
    led.frame_lookup(NS(request=4, matched_blocks=1))
    assert led.take_binds() == []  # no start yet
    # Pages follow the frame's blocks (fewer than the call's, in its order), never the call's.
    led.frame_start(NS(task=task(1, 2), kind="load", request=4, block_hashes=(3, 2), page_ids=()))
    (b,) = led.take_binds()
    assert b is s and b.bind_pages() == [7, 6]
    assert led.take_binds() == []
    led.not_started(NS(task=task(1, 2)))
    assert s.result == "not_started"
    old = led.track("store", 4, task(0, 9))
    assert old.result == "aborted"


def test_staging_pages() -> None:
    st = StagingPages(4)
    a = st.take(3)
    assert a == [0, 1, 2] and st.take(2) is None and st.free == 1
    st.give(a)
    assert st.free == 4 and sorted(st.take(4)) == [0, 1, 2, 3]


def test_an_outcome_does_not_settle_a_follower_call_before_its_pages_were_checked() -> None:
    led = Ledger(epoch=1, follower=True)
    s = led.expect("store", 3, {1: 9})
    led.frame_start(NS(task=task(1, 0), kind="store", request=3, block_hashes=(1,), page_ids=(4,)))
    led.frame_outcome(NS(task=task(1, 0), kind="store", request=3, result="ok", reason=None))
    assert not s.settled  # the pages (9 here, 4 at the leader) are not checked yet
    (b,) = led.take_binds()
    led.fail_local(b, "pages differ")
    assert s.settled and not s.ok
