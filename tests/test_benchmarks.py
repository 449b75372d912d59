"""The benchmark suite (benchmarks/, `python -m benchmarks`) on tiny sizes: it runs end to
end, its JSON has every row, and every number of mdl's comes from a model whose loss and
gradients matched each peer's on the same weights. A peer's rows say "not installed" where
it is absent: jax in CI, torch too where only the README's test command installed things."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.cases import (BEAM_WIDTH, COMPILE, DECODE, FORWARD, GROUPS, JAX, MDL, SCRIPT,
                              TORCH, TRAIN, by_name, cases, flops, select, sgemm_case)
from benchmarks.data import ponder_trips
from benchmarks.measure import TOLERANCE, Plan, measure_case, relative_error
from benchmarks.memory import ALTERNATE_ROUNDS
from benchmarks.pool import WorkerError
from benchmarks.suite import ok
from codegen import cli

REPO = Path(__file__).resolve().parents[1]
THREADS = min(2, len(os.sched_getaffinity(0)))
NEEDS = {TORCH: "torch", SCRIPT: "torch", COMPILE: "torch", JAX: "jax"}  # peer: package
INSTALLED = {peer: importlib.util.find_spec(package) is not None
             for peer, package in NEEDS.items()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One quick run of the whole suite: its exit status, JSON and output directory."""
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--skip-compile",
                           "--threads", str(THREADS), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    return done, json.loads((out / "results.json").read_text()), out


def test_the_quick_run_succeeds_and_writes_its_outputs(run):
    done, result, out = run
    assert done.returncode == 0, done.stderr[-3000:]
    assert ok(result)
    text = (out / "results.md").read_text()
    assert text in done.stdout
    assert all(f"## {group}:" in text for group in GROUPS)
    plotted = (out / "ratios.png").exists()
    assert plotted == (importlib.util.find_spec("matplotlib") is not None)
    assert ("no plot: matplotlib is not installed" in done.stderr) != plotted


def test_every_case_and_pass_has_a_row(run):
    _, result, _ = run
    timed = [c for c in cases(quick=True) if c.group != "memory"]
    assert [(r["case"], r["pass"]) for r in result["rows"]] == \
        [(c.name, p) for c in timed for p in c.passes]
    assert [r["case"] for r in result["memory"]] == \
        [c.name for c in cases(quick=True) if c.group == "memory"]
    assert set(result["peak"]["gflops"]) == {"1", str(THREADS)}
    assert result["meta"]["threads"] == THREADS and result["meta"]["quick"]


def test_mdl_is_timed_only_against_peers_that_computed_the_same_math(run):
    _, result, _ = run
    for row in result["rows"]:
        ours = row["results"][MDL]
        assert ours["status"] == "ok" and ours["ms"] > 0
        assert ours["gflops"] == pytest.approx(row["flops"] / ours["ms"] / 1e6)
        assert ours["peak_fraction"] == pytest.approx(
            ours["gflops"] / result["peak"]["gflops"][str(THREADS)])
        for peer, theirs in row["results"].items():
            if peer == MDL or not INSTALLED[peer]:
                continue
            assert theirs["status"] == "ok", (row["case"], peer, theirs)
            assert theirs["max_rel_err"] <= TOLERANCE
            assert theirs["ratio"] == pytest.approx(ours["ms"] / theirs["ms"])
        assert TORCH in row["results"]


@pytest.mark.parametrize("peer", sorted(NEEDS))
def test_a_peer_that_is_not_installed_says_so_in_its_rows(run, peer):
    if INSTALLED[peer]:
        pytest.skip(f"{NEEDS[peer]} is installed here")
    _, result, _ = run
    rows = [row for row in result["rows"] if peer in row["results"]]
    if not rows:
        pytest.skip(f"no row times {peer} (the suite ran with --skip-compile)")
    for row in rows:
        assert row["results"][peer] == {"status": f"not installed ({NEEDS[peer]})"}


def test_memory_rows_compare_each_loop_option_with_stored_activations(run):
    _, result, _ = run
    stored = result["memory"][0]
    for row in result["memory"]:
        assert row["status"] == "ok" and row["growth_mib"] >= 0 and row["step_ms"] > 0
        assert row["vs_stored"]["max_rel_err"] <= TOLERANCE
        # times from one process running every option's step in turn, ratios round by round
        steps = row["steps_in_turn"]
        assert len(steps) == ALTERNATE_ROUNDS and row["step_ms"] == statistics.median(steps)
        assert row["vs_stored"]["time_ratio"] == pytest.approx(statistics.median(
            t / s for t, s in zip(steps, stored["steps_in_turn"])))
    assert stored["loop"] == "stored"
    assert stored["vs_stored"]["max_rel_err"] == 0.0


GRADS = {"loss": np.float32(3.0), "lstm/W": np.arange(6, dtype=np.float32).reshape(2, 3)}


@pytest.mark.parametrize("theirs, agrees", [
    (GRADS, True),
    ({**GRADS, "lstm/W": GRADS["lstm/W"] * (1 + 1e-6)}, True),       # rounding
    ({**GRADS, "lstm/W": GRADS["lstm/W"] * (1 + 1e-3)}, False),      # other math
    ({**GRADS, "loss": np.float32(3.01)}, False),
    ({**GRADS, "lstm/W": GRADS["lstm/W"].T.reshape(2, 3)}, False),   # a layout mix-up
])
def test_the_check_tells_same_math_from_different_math(theirs, agrees):
    assert (relative_error(GRADS, theirs) <= TOLERANCE) == agrees


@pytest.mark.parametrize("loss, agrees", [(3.01, True), (3.5, False)])
def test_a_loss_whose_terms_cancel_is_compared_at_the_scale_of_its_terms(loss, agrees):
    ours = {**GRADS, "loss_scale": np.float64(1e3)}  # terms of size 1e3 summing to 3
    assert (relative_error(ours, {**GRADS, "loss": np.float32(loss)}) <= TOLERANCE) == agrees


def test_decoded_tokens_must_be_the_same_tokens():
    """A token of 5000 against 4999, among 35 near 5000, is 3e-5 of their norm: integer
    arrays are compared exactly, so that another choice is never within tolerance."""
    tokens = np.full(35, 5000, np.int32)
    ours = {"tokens": tokens, "scores": np.float32([-3.0])}
    assert relative_error(ours, {**ours, "scores": np.float32([-3.0000001])}) <= TOLERANCE
    other = tokens.copy()
    other[7] = 4999
    assert relative_error(ours, {**ours, "tokens": other}) == float("inf")


def test_a_peer_that_leaves_out_a_gradient_fails_its_check():
    with pytest.raises(WorkerError, match="lacks lstm/W"):
        relative_error(GRADS, {"loss": GRADS["loss"]})


def test_a_run_with_differing_outputs_is_not_ok():
    row = {"results": {MDL: {"status": "ok"}, TORCH: {"status": "outputs differ"}}}
    assert not ok({"rows": [row], "memory": []})
    row["results"][TORCH]["status"] = "not installed (torch)"
    assert ok({"rows": [row], "memory": []})


def test_flops_count_the_products_of_the_issue():
    lstm = next(c for c in cases(quick=False) if c.name == "lstm-t35-b32-h256")
    assert flops(lstm, TRAIN) == 3 * 35 * 2 * 32 * (256 + 256) * 4 * 256
    crf = next(c for c in cases(quick=False) if c.name == "crf-t35-b32-h256")
    assert flops(crf, TRAIN) == 3 * (2 * 35 * 2 * 32 * (256 + 256) * 4 * 256  # two LSTMs
                                     + 35 * 2 * 32 * 512 * 16)               # the emissions
    stacked = next(c for c in cases(quick=False) if c.name == "stacked-t35-b1-h256")
    assert flops(stacked, FORWARD) == 2 * 35 * 2 * 1 * (256 + 256) * 4 * 256  # two layers
    ponder = next(c for c in cases(quick=False) if c.name == "ponder-t35-b32-h256")
    assert ponder_trips(ponder) == 174  # 4 or 5 a step: the `while` decides
    assert flops(ponder, TRAIN) == 3 * (2 * 35 + 174) * 2 * 32 * 256 * 256
    for group, rows in (("greedy", 32), ("beam", 32 * BEAM_WIDTH)):  # the LSTM, the logits
        decode = next(c for c in cases(quick=False) if c.name == f"{group}-t35-b32-h256-v96")
        assert flops(decode, DECODE) == 35 * 2 * rows * ((256 + 256) * 4 * 256 + 256 * 96)


def test_the_gpu_rows_are_issue_9s_sizes_and_travel_by_name():
    gpu = cases(quick=False, device="cuda")
    assert {c.device for c in gpu} == {"cuda"} and not [c for c in gpu if c.group == "memory"]
    assert [c.name for c in select(gpu, ["lstm"])] == [
        "gpu-lstm-t35-b1-h128", "gpu-lstm-t35-b32-h256", "gpu-lstm-t35-b64-h1024",
        "gpu-lstm-t35-b256-h512"]
    assert [c.name for c in select(gpu, ["milstm"])] == [
        "gpu-milstm-t35-b1-h128", "gpu-milstm-t35-b32-h256", "gpu-milstm-t35-b64-h1024"]
    assert [c.name for c in select(gpu, ["greedy"])] == [
        "gpu-greedy-t35-b1-h128-v96", "gpu-greedy-t35-b32-h256-v96",
        "gpu-greedy-t35-b1-h512-v10000", "gpu-greedy-t35-b32-h512-v10000"]
    for quick in (False, True):  # a worker finds every case, CPU or GPU, by its name
        for case in [*cases(quick, "cuda"), sgemm_case(quick, "cuda"), *cases(quick)]:
            assert by_name(case.name, quick) == case


@pytest.mark.parametrize("only, names", [
    (["memory"], ["memory-stored-t1000-b16-h256", "memory-recompute-t1000-b16-h256",
                  "memory-checkpoint-t1000-b16-h256-k32"]),
    (["lstm-*-b32-*"], ["lstm-t35-b32-h256", "lstm-t35-b32-h512", "lstm-t100-b32-h256"]),
    (["generation", "milstm-t35-b1-h128"], ["generation-t35-b1-h128", "milstm-t35-b1-h128"]),
])
def test_only_selects_groups_names_and_patterns(only, names):
    assert [c.name for c in select(cases(quick=False), only)] == names


@pytest.mark.parametrize("args, message", [
    (["--only", "lsmt"], "--only lsmt: no such case (--quick runs every case at a tiny size, "
                         "named by it: give a group or a pattern such as lstm-*); there are "
                         "lstm, stacked, generation"),
    (["--reps", "0"], "--reps must be >= 1"),
    (["--threads", "999"], "--threads between 1 and"),
])
def test_bad_options_are_usage_errors(args, message, capsys):
    assert cli.main(["bench", "--quick", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_gpu_rows_need_a_gpu(capsys):
    from codegen.compile.cuda_toolkit import gpu_capabilities
    if gpu_capabilities():
        pytest.skip("a GPU is here: the GPU rows run")
    assert cli.main(["bench", "--quick", "--device", "cuda"]) == 2
    assert "--device cuda runs the GPU rows, on an NVIDIA GPU" in capsys.readouterr().err


class FakeProcess:
    """A worker that answers at once: its check gives `arrays`, each call takes `ms`."""

    def __init__(self, framework, arrays, ms, fails=None):
        self.framework, self.arrays, self.ms, self.fails = framework, arrays, ms, fails

    def call(self, op, **fields):
        if op == self.fails:
            raise WorkerError(f"{op} went wrong")
        if op == "check":
            np.savez(fields["path"], **self.arrays)
        return {"setup": {"notes": {}}, "time": {"ms": [self.ms] * fields.get("reps", 0)}}.get(
            op, {})


class FakePool:
    def __init__(self, processes):
        self.processes = processes

    def get(self, framework):
        process = self.processes[framework]
        if process is None:
            raise WorkerError(f"not installed ({framework})", missing=True)
        return process


@pytest.mark.parametrize("mdl_fails, statuses", [
    (None, {MDL: "ok", TORCH: "ok", SCRIPT: "outputs differ", COMPILE: "failed: setup went "
            "wrong", JAX: "not installed (jax)"}),
    ("check", {MDL: "failed: check went wrong", **{fw: "skipped: the mdl model failed"
                                                   for fw in (TORCH, SCRIPT, COMPILE, JAX)}}),
])
def test_a_case_times_only_the_peers_that_agree_with_a_working_mdl(tmp_path, mdl_fails,
                                                                      statuses):
    case = next(c for c in cases(quick=True) if c.group == "milstm")
    other = {**GRADS, "lstm/W": GRADS["lstm/W"] + 1}
    pool = FakePool({MDL: FakeProcess(MDL, GRADS, 2.0, mdl_fails),
                     TORCH: FakeProcess(TORCH, GRADS, 4.0),
                     SCRIPT: FakeProcess(SCRIPT, other, 1.0),
                     COMPILE: FakeProcess(COMPILE, GRADS, 1.0, "setup"), JAX: None})
    plan = Plan(reps=3, rounds=2, warmups=1, step_calls=1, settle=0.0, memory_rounds=1,
                skip_compile=False, work=tmp_path)
    row, = measure_case(case, pool, plan, peak=100.0)
    assert {fw: r["status"] for fw, r in row["results"].items()} == statuses
    timed = {fw: r for fw, r in row["results"].items() if "ms" in r}
    if mdl_fails:
        assert not timed
    else:
        assert set(timed) == {MDL, TORCH}
        assert timed[TORCH]["ratio"] == 0.5 and timed[MDL]["ms"] == 2.0


def test_isa_avx2_restricts_every_framework_and_the_report_says_so(monkeypatch):
    """`--isa avx2`: mdl builds with -march=x86-64-v3 (a key of its own), MKL, oneDNN,
    OpenBLAS and XLA are told AVX2; the machine's description says the run is
    restricted."""
    from benchmarks.machine import cpu, describe, isa_environment
    from codegen.compile import flags
    assert isa_environment("native") == {}
    env = isa_environment("avx2")
    assert env["MDL_MARCH"] == "x86-64-v3" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["OPENBLAS_CORETYPE"] == "Haswell"
    assert env["XLA_FLAGS"].endswith("--xla_cpu_max_isa=AVX2")
    native = flags.host_compiler()["identity"]
    monkeypatch.setenv("MDL_MARCH", env["MDL_MARCH"])
    assert "-march=x86-64-v3" in flags.compile_flags()
    assert flags.host_compiler()["identity"] != native
    c = cpu()
    assert c.isa in ("AVX-512", "AVX2", "AVX", "SSE2") or c.isa == os.uname().machine
    assert describe("avx2").endswith("; run restricted to AVX2)")
    assert c.model in describe() and c.vendor in describe()


def test_products_times_each_blas_and_checks_its_result(capsys, monkeypatch):
    """`python -m benchmarks.products`: each library's product is checked against NumPy's
    (a wrong transpose or stride is an error, not a fast row), and the table has a row per
    product of each size with the fastest named."""
    from benchmarks import products
    assert products.main(["--sizes", "2x8", "--rounds", "1", "--reps", "1", "--steps", "3",
                          "--only", "mkl,openblas"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| 2, 8 |")]
    assert [r.split(" | ")[1] for r in rows] == [
        "step", "step backward", "hoisted input", "input gradient", "weight gradient"]
    assert all(r.split(" | ")[-1].rstrip(" |") in ("mkl", "mkl-packed", "openblas")
               for r in rows)
    # Operands other than those products.cpp multiplied (as a call with the wrong
    # transpose would give): the sums differ, and the run stops.
    real = products.operands
    monkeypatch.setattr(products, "operands", lambda p: (real(p)[0], -real(p)[1]))
    with pytest.raises(RuntimeError, match="sum of the product"):
        products.main(["--sizes", "2x8", "--rounds", "1", "--reps", "1", "--steps", "3",
                       "--only", "openblas"])


@pytest.mark.parametrize("argv,message", [(["--sizes", "1x"], "--sizes takes BxH pairs"),
                                          (["--reps", "0"], "must be >= 1")])
def test_products_refuses_bad_options_with_a_usage_error(capsys, argv, message):
    from benchmarks import products
    with pytest.raises(SystemExit) as stop:
        products.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("group", ["lstm", "generation", "greedy", "beam"])
def test_the_gpu_rows_keep_mdls_data_on_the_device(monkeypatch, group):
    """What `--device cuda` runs of mdl, on the emulated GPU: inputs put on the device once,
    outputs and gradients left there (as the peers' tensors are), and the check's numbers
    those of the same case on the cpu target."""
    import dataclasses

    from benchmarks import mdl_models
    options_of = mdl_models._build_options

    def emulated(case):
        name, options = options_of(case)
        return name, dataclasses.replace(options, emulate=options.target == "cuda")
    monkeypatch.setattr(mdl_models, "_build_options", emulated)
    case = next(c for c in cases(quick=True, device="cuda") if c.group == group)
    gpu = mdl_models.setup(case)
    cpu = mdl_models.setup(dataclasses.replace(case, device="cpu"))
    for timed in gpu.passes.values():
        out = timed()
        assert out is None or all(type(v).__name__ == "DeviceArray" for v in out.values())
    got, want = gpu.check(), cpu.check()
    assert got.keys() == want.keys()
    for name in want:
        assert isinstance(got[name], (np.ndarray, float, np.floating)), name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_the_gpu_profile_reads_the_gpus_work_from_the_profilers_events():
    """benchmarks.gpu_profile's report, from key averages as PyTorch's profiler gives them
    (the GPU has to run it: python -m benchmarks.gpu_profile)."""
    from types import SimpleNamespace

    from benchmarks.gpu_profile import gpu_activities, summary

    def event(key, count, us, device="DeviceType.CUDA"):
        return SimpleNamespace(key=key, count=count, self_device_time_total=us,
                               device_type=device)
    events = [event("cudaLaunchKernel", 70, 0.0, "DeviceType.CPU"),
              event("forward_0_k2", 35, 70.0), event("sm90_xmma_gemm", 35, 140.0),
              event("Memcpy HtoD (Pageable -> Device)", 4, 40.0), event("idle", 1, 0.0)]
    got = gpu_activities(events)
    assert [a.name for a in got] == ["sm90_xmma_gemm", "forward_0_k2",
                                     "Memcpy HtoD (Pageable -> Device)"]
    text = summary("lstm forward", [500.0, 400.0, 600.0], got, calls=2, top=2)
    assert text.splitlines() == [
        "lstm forward: 500.0 us a call (median of 3), GPU busy 125.0 us (25%), 35.0 kernels "
        "and 2.0 copies a call",
        f"    {70.0:9.1f} us  {17.5:6.1f}x  sm90_xmma_gemm",
        f"    {35.0:9.1f} us  {17.5:6.1f}x  forward_0_k2"]


@pytest.mark.parametrize("args", [[], ["--plain", "--calls", "1", "--only", "beam"]],
                         ids=["profile", "plain"])
def test_the_gpu_profile_without_a_gpu_says_so(args):
    """Both ways (`--plain` is what `.ci/gpu ncu` runs): the usage error, not argparse's."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_profile", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "no GPU that PyTorch can use" in done.stderr and "Traceback" not in done.stderr


def test_the_onnx_speed_rows_run_and_agree():
    """benchmarks.onnx_charlm (docs/onnx.md's speed rows), tiny: its table has a row per
    batch, a ratio per runtime and form (`--loops`: the LSTM node and the `Loop`), and the
    logits of every runtime agree with mdl's."""
    pytest.importorskip("onnxruntime")
    args = ["--reps", "1", "--hidden", "8", "--seq", "3", "--batches", "1", "2", "--loops"]
    if importlib.util.find_spec("openvino") is not None:
        args.append("--openvino")
    done = subprocess.run([sys.executable, "-m", "benchmarks.onnx_charlm", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == (11 if "--openvino" in args else 7)
        assert float(cells[-1]) < 1e-5  # the largest logits difference


def test_an_out_folder_that_cannot_be_made_is_a_usage_error(tmp_path):
    """A file in --out's place or on its path was an internal error (FileExistsError)."""
    (tmp_path / "afile").touch()
    for out in ["afile", "afile/sub"]:
        done = subprocess.run([sys.executable, "-m", "codegen.cli", "bench", "--quick",
                               "--only", "lstm-*", "--out", str(tmp_path / out)], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr
        assert f"--out {tmp_path / out}: cannot make the folder" in done.stderr
