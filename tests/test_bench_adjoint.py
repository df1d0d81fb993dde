"""``tiered bench adjoint`` on a tiny RTM: every row, both regimes, identical images."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import cached_pages, in_memory_fs

from tiered.bench.adjoint import child_env
from tiered.cli import main

FIELDS = {"name", "regime", "wall_s", "forward_s", "backward_s", "setup_s", "stall_s",
          "recomputed_steps", "peak_rss_bytes", "bytes_written", "bytes_read"}


@pytest.mark.filterwarnings("ignore:Numba not available")
def test_bench_adjoint_quick_writes_every_row(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "adjoint.json"
    assert main(["bench", "adjoint", "--quick", "--json", str(out),
                 "--workdir", str(tmp_path)]) == 0
    written = json.loads(out.read_text())
    rows = written["rows"]
    assert {r["regime"] for r in rows} == {"page-cache", "beyond-memory"}
    assert len(rows) == 2 * 10
    # the targets, judged on this run: 3 per regime, each with a verdict and a reason
    assert len(written["targets"]) == 6
    assert all(v["met"] in (True, False, None) and v["why"] for v in written["targets"])
    fixed = child_env()["MALLOC_MMAP_THRESHOLD_"]
    for row in rows:
        assert FIELDS <= set(row), row["name"]
        assert row["malloc_mmap_threshold"] == fixed, row["name"]  # every row alike
        if row["name"] != "compute-only":
            assert row["image_identical"], (row["regime"], row["name"])
    by = {(r["regime"], r["name"]): r for r in rows}
    for name in ("pyrevolve-memory", "schedules-multistage-numpy", "tiered-multistage"):
        assert by["page-cache", name]["recomputed_steps"] > 0
    assert by["page-cache", "tiered-reverse"]["recomputed_steps"] == 0
    for (regime, _), row in by.items():  # by default, direct I/O beyond memory only
        assert row["direct_io"] == (regime == "beyond-memory")
    for (regime, _), row in by.items():  # the bound is np.save's time over compute only's
        naive, base = by[regime, "np.save/np.load"], by[regime, "compute-only"]
        assert row["speedup_bound"] == pytest.approx(naive["wall_s"] / base["wall_s"])
        assert row["speedup_vs_numpy"] == pytest.approx(naive["wall_s"] / row["wall_s"])
        floor = by[regime, "bare-thread"]
        assert row["vs_bare_thread"] == pytest.approx(row["wall_s"] / floor["wall_s"])
    history = 200 * 160 * 160 * 4  # the quick run's snapshots: in-memory holds them all
    assert (by["page-cache", "in-memory"]["peak_rss_bytes"]
            > by["page-cache", "compute-only"]["peak_rss_bytes"] + history // 2)
    if not in_memory_fs(tmp_path):  # the emulation must really send every row's reads to the device
        for name in ("np.save/np.load", "pyrevolve-disk", "schedules-multistage-numpy",
                     "tiered-reverse", "tiered-reverse-dense", "tiered-multistage",
                     "bare-thread"):
            assert by["beyond-memory", name]["device_read_bytes"] > 0, name
    # (holes are not compared here: a quick snapshot is 100 KiB, one whole 64 KiB block,
    # so the sparse and dense rows write within noise of each other; tests/test_sparse.py
    # checks the blocks a file allocates)
    for row in rows:  # the solver's thread and the others, measured in the row's process
        assert 0 <= row["solver_wait_s"] < row["wall_s"], row["name"]
        assert row["background_cpu_s"] >= 0, row["name"]
        assert 0 <= row["solver_runq_s"] < row["wall_s"], row["name"]  # Linux: CI's machine
        assert isinstance(row["solver_blocks"], int) and row["solver_blocks"] >= 0
    for (regime, name), row in by.items():  # time in the row's own store and load calls
        if name in ("in-memory", "np.save/np.load", "tiered-reverse", "bare-thread"):
            assert 0 < row["calls_s"] < row["forward_s"] + row["backward_s"], (regime, name)
    # writing every snapshot to a file inside the call costs more than a copy into memory
    assert (by["beyond-memory", "np.save/np.load"]["calls_s"]
            > by["beyond-memory", "in-memory"]["calls_s"])
    # the lanes and the ring's thread drained and read back states beside the solver
    for name in ("tiered-reverse", "bare-thread"):
        assert by["beyond-memory", name]["background_cpu_s"] > 0.01, name
    printed = capsys.readouterr()
    assert "tiered-reverse" in printed.out
    assert "2x faster than np.save" in printed.out  # the verdicts follow the table
    assert "\r" not in printed.err and "it/s" not in printed.err  # bars: on a terminal only


def test_rows_option_runs_a_subset_with_the_reference_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "adjoint.json"
    assert main(["bench", "adjoint", "--quick", "--rows", "tiered-reverse", "--json", str(out),
                 "--workdir", str(tmp_path)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert sorted((r["regime"], r["name"]) for r in rows) == sorted(
        (regime, name) for regime in ("page-cache", "beyond-memory")
        for name in ("compute-only", "np.save/np.load", "tiered-reverse"))
    assert not any("vs_bare_thread" in r for r in rows)  # the floor did not run
    assert main(["bench", "adjoint", "--quick", "--rows", "tiered-reverse,no-such-row",
                 "--workdir", str(tmp_path)]) == 2
    assert "no-such-row" in capsys.readouterr().err
    from tiered.bench import adjoint, rtm

    with pytest.raises(ValueError, match="must include"):  # the ratios need both
        adjoint.run(rtm.RTMConfig(nz=64, nx=64, nt=20, sponge=8), workdir=tmp_path,
                    rows=("compute-only", "tiered-reverse"))


def test_rounds_report_the_median_round(tmp_path: Path) -> None:
    from tiered.bench import adjoint, rtm

    cfg = rtm.RTMConfig(nz=64, nx=64, nt=20, sponge=8)
    rows = adjoint.run(cfg, workdir=tmp_path, rows=("compute-only", "np.save/np.load",
                                                    "tiered-reverse"), rounds=3)
    assert len(rows) == 6
    for row in rows:
        walls = row["wall_s_rounds"]
        assert len(walls) == 3 and row["wall_s"] == sorted(walls)[1]
        base = next(r for r in rows if r["regime"] == row["regime"]
                    and r["name"] == "compute-only")["wall_s_rounds"]
        assert row["vs_compute_rounds"] == [w / b for w, b in zip(walls, base, strict=True)]
        if row["name"] != "compute-only":
            assert row["image_identical"]


def test_device_rows_on_torch_tensors(tmp_path: Path) -> None:
    """``--device``: the rows a GPU code compares, with the wavefields as torch tensors
    (on torch's CPU device here; tests/gpu_check.sh runs them on CUDA)."""
    import os

    from tiered.bench import adjoint, rtm

    cfg = rtm.RTMConfig(nz=64, nx=64, nt=24, sponge=8,
                        device=os.environ.get("TIERED_TEST_DEVICE", "cpu"))
    rows = adjoint.run(cfg, workdir=tmp_path, rows=adjoint.DEVICE_ROWS)
    assert {(r["regime"], r["name"]) for r in rows} == {
        (regime, name) for regime in adjoint.REGIMES for name in adjoint.DEVICE_ROWS}
    fixed = child_env()["MALLOC_MMAP_THRESHOLD_"]
    for row in rows:
        assert FIELDS <= set(row), row["name"]
        assert row["malloc_mmap_threshold"] == fixed, row["name"]  # every row alike
        if row["name"] != "compute-only":
            assert row["image_identical"], (row["regime"], row["name"])
    tiered_row = next(r for r in rows if r["name"] == "tiered-reverse")
    assert tiered_row["bytes_written"] > 0  # half the history left memory
    with pytest.raises(ValueError, match="cannot run with device"):
        adjoint.run(cfg, workdir=tmp_path, rows=("compute-only", "pyrevolve-memory"))


@pytest.mark.parametrize("cold", [False, True])
def test_bare_ring_returns_every_state_and_deletes_what_it_read(tmp_path: Path,
                                                                 cold: bool) -> None:
    """The ``bare-thread`` row's ring: a forward pass through 20 slots of 100 states, a
    backward pass in reverse, every state back bit for bit, no file left behind."""
    from tiered.bench.bare import BareRing

    rng = np.random.default_rng(7)
    states = [rng.standard_normal((32, 48)).astype(np.float32) for _ in range(100)]
    ring = BareRing(tmp_path / "ring", (32, 48), np.dtype(np.float32), 20, cold=cold)
    try:
        for n, state in enumerate(states):
            ring.store(n, state)
        for n in reversed(range(100)):
            assert np.array_equal(ring.revisit(n), states[n]), n
            if n == 50:  # a bad revisit mid-pass raises and leaves the ring working
                with pytest.raises(KeyError, match="never stored"):
                    ring.revisit(200)
                with pytest.raises(KeyError, match="already revisited"):
                    ring.revisit(60)
    finally:
        ring.close()
    assert list((tmp_path / "ring").iterdir()) == []


def test_cold_io_fsync_runs_tiered_and_the_ring_as_the_plain_files(tmp_path: Path) -> None:
    out = tmp_path / "adjoint.json"
    assert main(["bench", "adjoint", "--quick", "--cold-io", "fsync", "--json", str(out),
                 "--rows", "tiered-reverse,bare-thread", "--workdir", str(tmp_path)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["cold_io"] for r in rows} == {"fsync"} and len(rows) == 2 * 4
    assert not any(r["direct_io"] for r in rows)  # what each row's own process used
    by = {(r["regime"], r["name"]): r for r in rows}
    for name in ("tiered-reverse", "bare-thread"):
        assert by["page-cache", name]["image_identical"]
        assert by["beyond-memory", name]["image_identical"]
        if not in_memory_fs(tmp_path):
            assert by["beyond-memory", name]["device_read_bytes"] > 0, name
    from tiered.bench import adjoint, rtm

    with pytest.raises(ValueError, match="cold_io must be one of"):
        adjoint.run(rtm.RTMConfig(nz=64, nx=64, nt=20, sponge=8), workdir=tmp_path,
                    cold_io="mmap")
    with pytest.raises(ValueError, match="cold_io must be one of"):
        adjoint.AdjointBench(cfg=rtm.RTMConfig(), regime="beyond-memory", workdir=tmp_path,
                             cold_io="Direct")


@pytest.mark.parametrize("singlefile", [True, False])
def test_pyrevolve_disk_storage_is_dropped_when_cold(tmp_path: Path, singlefile: bool) -> None:
    """Beyond memory pyrevolve's files leave the page cache after each save, as np.save's do."""
    pyrevolve = pytest.importorskip("pyrevolve", reason="needs tiered[adjoint]")
    from pyrevolve.profiling import Profiler
    from pyrevolve.storage import DiskStorage

    from tiered.bench.adjoint_rows import cold_disk_storage

    if in_memory_fs(tmp_path):
        pytest.skip("on tmpfs every file is memory: nothing to tell apart")
    assert pyrevolve is not None
    shape = (64, 64)  # 4 pages per checkpoint
    storage = DiskStorage(64 * 64, 6, np.float32, profiler=Profiler(),
                          filedir=str(tmp_path) + "/", singlefile=singlefile)
    cold_disk_storage(storage)
    states = [np.full(shape, n, np.float32) for n in range(6)]
    for n, state in enumerate(states):
        storage.save(n, [state])
    files = [p for p in Path(storage.filedir).iterdir() if p.is_file()]
    assert files and sum(cached_pages(path) for path in files) == 0
    try:
        for n in reversed(range(6)):
            back = np.zeros(shape, np.float32)
            storage.load(n, [back])
            assert np.array_equal(back, states[n]), n
    finally:
        if singlefile:  # pyrevolve keeps its one file open for writing and reading
            storage.storage_w.close()
            storage.storage_r.close()


@pytest.mark.parametrize(("cold", "direct"), [(False, True), (True, True), (True, False)])
def test_bare_ring_keeps_cold_files_out_of_the_page_cache(tmp_path: Path, cold: bool,
                                                          direct: bool) -> None:
    """Beyond memory the ring's files are not in the page cache, with direct I/O or with
    fsync + DONTNEED (``--cold-io fsync``); in the page-cache regime they are."""
    from tiered.bench.bare import BareRing

    if in_memory_fs(tmp_path):
        pytest.skip("on tmpfs every file is memory: nothing to tell apart")
    state = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) + 1  # 4 pages each
    ring = BareRing(tmp_path / "ring", (64, 64), np.dtype(np.float32), 10, cold=cold,
                    direct=direct)
    try:
        assert bool(ring._direct) == (cold and direct)
        for n in range(40):
            ring.store(n, state * n)
        with ring._cond:  # the forward pass's writes land (no read starts before a revisit)
            ring._cond.wait_for(lambda: ring._writing == 0 or ring._error is not None,
                                timeout=60)
        ring._check()  # an I/O error in the ring's thread fails here, with its cause
        assert ring._writing == 0
        files = sorted((tmp_path / "ring").iterdir())
        assert len(files) >= 20
        cached = sum(cached_pages(path) for path in files)
        assert cached == 0 if cold else cached == 4 * len(files)
        for n in reversed(range(40)):
            assert np.array_equal(ring.revisit(n), state * n), n
    finally:
        ring.close()


def _in_thread(fn: Callable[[], object], timeout: float = 60.0) -> BaseException | None:
    """Run ``fn`` on a thread; return what it raised. A hang fails the test, not CI."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{fn} still running after {timeout} s"
    return raised[0] if raised else None


def test_bare_ring_raises_what_its_io_thread_hit(tmp_path: Path) -> None:
    from tiered.bench.bare import BareRing

    ring = BareRing(tmp_path / "ring", (64,), np.dtype(np.float64), 10, cold=False)
    (tmp_path / "ring").rmdir()  # every write now fails

    def forward() -> None:
        for n in range(50):
            ring.store(n, np.full(64, n, np.float64))

    error = _in_thread(forward)
    assert isinstance(error, RuntimeError) and "bare ring I/O failed" in str(error)
    error = _in_thread(ring.close)  # and close() says so too
    assert isinstance(error, RuntimeError)
    for slots, depth in ((8, 8), (20, 0)):
        with pytest.raises(ValueError, match="more slots than its depth|at least 1"):
            BareRing(tmp_path / "other", (4,), np.dtype(np.float32), slots, cold=False,
                     depth=depth)


def test_solver_waits_split_the_threads_sleeps_from_its_cpu_queue() -> None:
    from tiered.bench.adjoint import _solver_sched, _solver_waits
    from tiered.console import table

    before = _solver_sched()
    assert before is not None  # Linux, as CI's machine
    flag = threading.Event()
    waiter = threading.Thread(target=lambda: flag.wait(0.05))
    waiter.start()
    for _ in range(20):  # the main thread sleeps 20 times: each is a voluntary switch
        flag.wait(0.001)
    waiter.join()
    split = _solver_waits(before, _solver_sched())
    assert split["solver_blocks"] is not None and split["solver_blocks"] >= 20
    assert split["solver_runq_s"] is not None and split["solver_runq_s"] >= 0
    off_linux = _solver_waits(None, before)
    assert off_linux == {"solver_runq_s": None, "solver_blocks": None}
    assert table([{"a": None, "b": 1.0}], ["a", "b"]).splitlines()[1].split() == ["1.000"]


def test_rows_run_with_malloc_thresholds_fixed_unless_the_caller_set_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert child_env()["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
    assert child_env()["PATH"] == os.environ["PATH"]  # the rest of the environment is ours
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert child_env()["MALLOC_MMAP_THRESHOLD_"] == "131072"


def test_later_rounds_run_the_rows_in_a_repeatable_shuffled_order() -> None:
    from tiered.bench.adjoint import ROWS, round_order

    assert round_order(ROWS, 0) == list(ROWS)  # the first round as given
    later = [round_order(ROWS, i) for i in range(1, 6)]
    assert all(sorted(order) == sorted(ROWS) for order in later)  # every row, once
    assert any(order != list(ROWS) for order in later)
    assert later == [round_order(ROWS, i) for i in range(1, 6)]  # seeded by the round
