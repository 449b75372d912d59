"""The emulated CUDA device's own checks (docs/cuda.md, "The emulated device"): kernels
with the bugs it must catch (tests/emulator/wrong_kernels.cu), each failing with a message
that names the kernel and what went wrong, and each beside its correct twin, which runs
and gives the right numbers (so a check that fired on everything would fail here too)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from codegen.compile.extension import build_extension
from codegen.targets.registry import target

SOURCE = Path(__file__).resolve().parent / "emulator" / "wrong_kernels.cu"
DEVICE = SOURCE.with_name("test_device.h")  # its Device (racing_kernels.cu's too)
FULL, HALF = 0xFFFFFFFF, 0x0000FFFF


@pytest.fixture(scope="module")
def kernels():
    built = build_extension({"wrong_kernels.cu": SOURCE.read_text(),
                             "test_device.h": DEVICE.read_text()}, "wrong_kernels",
                            target("cuda", emulate=True))
    spec = importlib.util.spec_from_file_location("wrong_kernels", built)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["forward", "reverse", "shuffle"])
def order(request, monkeypatch):
    """The order in which a block's threads run between barriers (MDL_CUDA_EMULATOR)."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", f"order={request.param},seed=4")
    return request.param


def fails(result, *fragments: str) -> None:
    error, _ = result
    assert error.startswith("emulated CUDA device: "), error
    for fragment in fragments:
        assert fragment in error, error


def passes(result, want) -> None:
    error, got = result
    assert error == ""
    np.testing.assert_array_equal(got, want)


def test_a_missing_barrier_before_reading_shared_memory(kernels, order):
    passes(kernels.shared_race(True), [sum(range(256))])
    # thread 0 runs first in the forward order and finds cell[1] unwritten; last in the
    # reverse order, it finds thread 1's write there since the last barrier
    why = {"forward": "before any thread of the block wrote it",
           "reverse": "which thread 1 wrote since the last __syncthreads: a race"}
    fails(kernels.shared_race(False), "kernel block_sum, block 0, thread 0 reads shared cell[1]",
          why.get(order, ""))


def test_a_barrier_in_a_branch_some_threads_skip(kernels, order):
    passes(kernels.divergent_barrier(256), [1.0])
    fails(kernels.divergent_barrier(128), "kernel barrier_in_branch, block 0",
          "has exited while thread", "waits at __syncthreads", "barrier divergence")


def test_threads_at_two_different_barriers(kernels, order):
    fails(kernels.different_barriers(), "kernel two_barriers, block 0, thread",
          "at the one at", "barrier divergence")


def test_a_wrong_shuffle_mask(kernels, order):
    lanes = np.arange(64) % 32
    passes(kernels.shuffle(FULL, False), np.full(64, lanes.sum() / 2))
    passes(kernels.shuffle(HALF, True), np.where(lanes < 16, 120.0, lanes))
    fails(kernels.shuffle(HALF, False), "kernel warp_sum, block 0, thread",
          "has a mask that leaves out its own lane")
    fails(kernels.shuffle(FULL, True), "kernel half_warp_sum, block 0, thread 16 has exited",
          "waits for it at the shuffle", "its mask names lane 16")


def test_a_host_pointer_passed_to_a_kernel(kernels):
    passes(kernels.host_pointer(True), [2.0, 4.0, 6.0])
    fails(kernels.host_pointer(False), "kernel scale: argument 1 of 3 (double const*)",
          "not device memory", "a kernel reads only device memory")


def test_a_kernel_reading_past_its_allocation(kernels):
    passes(kernels.past_the_end(3), [6.0])
    fails(kernels.past_the_end(4), "kernel read_past, block 0, thread 0: read or wrote",
          "0 bytes past the end of a 24-byte device allocation")


def test_a_late_barrier_on_the_fast_path_is_an_error(kernels, monkeypatch):
    monkeypatch.delenv("MDL_CUDA_EMULATOR", raising=False)  # "fibers" would leave no fast path
    fails(kernels.fast_path_barrier(), "kernel late_barrier, block 0, thread",
          "met __syncthreads", "on the emulator's fast path")


def test_cublas_argument_rules_and_extents(kernels):
    a = np.arange(1.0, 7.0).reshape(3, 2).T  # column-major A (2 x 3) is 1..6
    b = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]).T
    passes(kernels.gemm(2, 6), (a @ b).T.ravel())  # C column-major
    error, _ = kernels.gemm(1, 6)
    assert error.startswith("emulated cuBLAS: cublasDgemm_64(N, N, m=2, n=2, k=3): lda = 1 "
                            "is below max(1, m = 2)"), error
    fails(kernels.gemm(2, 5), "cublasDgemm_64(N, N, m=2, n=2, k=3): operand A (2 x 3, "
          "leading dimension 2, 48 bytes)", "of a 40-byte device allocation",
          "does not lie inside one device allocation")


def test_a_missing_stream_synchronization_shows_in_deferred_mode(kernels, monkeypatch):
    passes(kernels.copy_back(True), [2.0, 4.0, 6.0])
    passes(kernels.copy_back(False), [2.0, 4.0, 6.0])  # at once: the bug hides
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")
    passes(kernels.copy_back(True), [2.0, 4.0, 6.0])
    error, seen = kernels.copy_back(False)
    assert error == "" and np.isnan(seen).all(), seen  # the copy had not run yet


def test_a_memset_not_waited_for_lands_after_a_non_blocking_streams_copy(kernels,
                                                                        monkeypatch):
    """cudaMemset queues on the legacy stream, which a non-blocking stream's work does not
    wait for (the device's allocate zeroed memory so, and a GPU under load zeroed inputs,
    parameters and outputs after they were written)."""
    passes(kernels.zeroed_then_filled(False), [2.0, 4.0, 6.0])  # at once: the bug hides
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")
    passes(kernels.zeroed_then_filled(True), [2.0, 4.0, 6.0])
    passes(kernels.zeroed_then_filled(False), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("mode", ["", "deferred"])
def test_a_captured_graph_replays_its_work_on_what_memory_holds_then(kernels, monkeypatch, mode):
    monkeypatch.setenv("MDL_CUDA_EMULATOR", mode)
    passes(kernels.graph(0), [0, 0, 0, 20, 40, 60, 200, 400, 600])


@pytest.mark.parametrize("unsafe, refused", [
    (1, "cudaMalloc while a stream is capturing"),
    (2, "cudaStreamSynchronize of a capturing stream"),
    (3, "cudaMemcpyAsync with cudaMemcpyDeviceToHost on a capturing stream"),
    (4, "cudaMemcpy while a stream is capturing"),
])
def test_a_call_cuda_refuses_during_capture_invalidates_it(kernels, unsafe, refused):
    error, seen = kernels.graph(unsafe)
    call, ended = error.split(" | ")
    assert call.startswith("emulated CUDA device: " + refused), call
    assert ended.startswith("emulated CUDA device: cudaStreamEndCapture: the capture was "
                            "invalidated by " + refused), ended
    assert seen == [0, 0, 0]


def test_an_event_not_reached_yet_has_no_time(kernels, monkeypatch):
    """cudaEventElapsedTime of events the stream has not reached is cudaErrorNotReady (a
    profiled build's missing wait would show), of an event never recorded an error."""
    never = ("emulated CUDA device: cudaEventElapsedTime: an event that is not live or was "
             "never recorded")
    for wait in (True, False):  # at once: the stream reached both before the call
        assert kernels.event_times(wait) == (" | " + never, [1.0])
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "deferred")
    assert kernels.event_times(True) == (" | " + never, [1.0])
    error, seen = kernels.event_times(False)
    assert error == ("emulated CUDA device: cudaEventElapsedTime: an event whose stream has "
                     "not reached it (synchronize the stream first) | " + never), error
    assert seen == [0.0]


def test_an_unknown_setting_is_an_error(kernels, monkeypatch):
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "order=sideways")
    fails(kernels.host_pointer(True), "MDL_CUDA_EMULATOR: order=sideways",
          "forward, reverse or shuffle")


def test_a_bad_setting_met_by_cudamalloc_sticks(kernels, monkeypatch):
    """QA: met first by cudaMalloc (making a model), a bad setting was refused for that
    call alone, where a launch's or a copy's sticks until the device is reset, as
    docs/cuda.md says of every bad value."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "order=sideways")
    assert kernels.malloc_after_a_bad_setting("") == (
        "emulated CUDA device: MDL_CUDA_EMULATOR: order=sideways: an order is forward, "
        "reverse or shuffle")
    monkeypatch.delenv("MDL_CUDA_EMULATOR")
    passes(kernels.host_pointer(True), [2.0, 4.0, 6.0])  # a new device (cudaDeviceReset)


@pytest.mark.parametrize("value", ["seed=18446744073709551616", "seed=99999999999999999999999",
                                   "seed=abc", "seed=-1", "seed="])
def test_a_seed_it_cannot_take_is_an_error_naming_it(kernels, monkeypatch, value):
    """QA: a seed past 2**64 - 1 raised `IndexError: stoull` (std::out_of_range through
    pybind11), no word of the variable; `seed=abc` was an "unknown setting"."""
    monkeypatch.setenv("MDL_CUDA_EMULATOR", value)
    fails(kernels.host_pointer(True),
          f"MDL_CUDA_EMULATOR: {value}: seed= takes a number from 0 to 2**64 - 1")
    monkeypatch.setenv("MDL_CUDA_EMULATOR", "seed=18446744073709551615,order=shuffle")
    passes(kernels.host_pointer(True), [2.0, 4.0, 6.0])
