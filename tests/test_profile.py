"""Profiled builds (`mdlc build --profile`, codegen/backend/profile.py): the code times
each of its sites into counts a model's `profile()` returns, changing no number; the
report (codegen/profile.py) and `mdlc profile` (docs/profiling.md)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen import load
from codegen.compile.options import BuildOptions
from codegen.pipeline import sources
from codegen.profile import Measured, Row, report, rows, table
from codegen.targets.registry import target

SOURCE = """import "std/rnn.mdl"
model Profiled(E = 4, H = 8) {
  input xs : f32[T, B, E]
  input lengths : i32[B]
  h = zeros[B, H]; c = zeros[B, H]; g = zeros[B, H]
  hs = for x in xs (lengths = lengths) {
    h, c = lstm(x, h, c)
    yield h
  }
  gs = for x in reversed(xs) (lengths = lengths) {
    g = gru(x, g)
    yield g
  }
  k = 0
  while norm(h) > 0.01 and k < 3 { h = 0.5 * h; k = k + 1 }
  if mean(h) > 100.0 { y = tanh(h) } else { y = 2.0 * h }
  output trips = k
  output loss = mean(hs) + mean(gs) + mean(y)
  minimize loss
}
"""
ROOT = Path(__file__).resolve().parents[1]
T, B, CALLS = 5, 3, 4  # every row's length is T: each loop runs T steps a call
INPUTS = {"xs": np.random.default_rng(0).standard_normal((T, B, 4)).astype(np.float32),
          "lengths": np.full(B, T, np.int32)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The file, its profiled module and its plain one, and inputs."""
    (path := tmp_path_factory.mktemp("profile") / "profiled.mdl").write_text(SOURCE)
    # (two modules of one name in one process: the second import found the first's classes)
    return path, load(path, profile=True), load(path, name="profiled_plain"), INPUTS


def run(model, inputs, calls=CALLS):
    model.reset_profile()
    for _ in range(calls):
        model.forward(**inputs, training=True)
        model.backward()
    return model.profile()


def computes_alike(a, b, inputs, rtol: float = 0.0) -> None:
    """Models `a` and `b` give the same outputs and gradients (bit for bit, by default)."""
    for training in (False, True):
        out_a, out_b = (m.forward(**inputs, training=training) for m in (a, b))
        assert out_a.keys() == out_b.keys()
        for k in out_a:
            np.testing.assert_allclose(out_a[k], out_b[k], rtol=rtol, atol=rtol)
    grads_a, grads_b = a.backward(), b.backward()
    for k in grads_a:
        np.testing.assert_allclose(grads_a[k], grads_b[k], rtol=rtol, atol=rtol)


def counted_sites(model, inputs, slack: float = 0.0) -> tuple[list[dict], dict]:
    """The sites that ran in CALLS training steps, and every site by id, each checked
    against its parent: its runs (a loop's steps, a while's trips) and its time within the
    parent's (`slack`: what rounding may add)."""
    trips = int(model.forward(**inputs)["trips"])
    sites = run(model, inputs)
    by_id = {s["site"]: s for s in sites}
    ran = [s for s in sites if s["runs"]]
    assert {s["function"] for s in ran} == {"training forward", "backward"}
    for s in ran:
        assert s["seconds"] >= 0
        if s["parent"] < 0:
            assert s["what"] == "the whole function" and s["runs"] == CALLS
            continue
        parent = by_id[s["parent"]]
        assert s["function"] == parent["function"]
        # timed inside it, by the same clock
        assert s["seconds"] <= parent["seconds"] * (1 + slack) + slack, (s, parent)
        if parent["what"] == "for":  # over the steps; in the backward also the while's trips
            assert s["runs"] in ((CALLS * T,) if s["function"] == "training forward" else
                                 (CALLS * T, CALLS * trips)), s
        elif parent["what"] == "while":
            assert s["runs"] in (CALLS * trips, CALLS * (trips + 1)), s  # + the last test
        elif parent["what"] in ("if", "the whole function"):
            assert s["runs"] <= CALLS
    return ran, by_id


def test_a_profiled_build_computes_what_a_plain_one_does(built):
    _, profiled, plain, inputs = built
    computes_alike(profiled.Profiled(seed=3), plain.Profiled(seed=3), inputs)


def test_each_site_counts_its_runs_inside_its_parent(built):
    path, profiled, _, inputs = built
    ran, by_id = counted_sites(profiled.Profiled(seed=0), inputs)
    forward = [s for s in ran if s["function"] == "training forward"]
    # the lstm's and gru's loops share no memory: they run at once, each a site inside it
    together = [s for s in forward if s["what"] == "2 loops at once"]
    assert len(together) == 1
    arms = [s for s in forward if s["parent"] == together[0]["site"]]
    assert [s["what"] for s in arms] == ["for", "for"] and all(s["runs"] == CALLS for s in arms)
    assert arms[0]["where"] == f"{path}:6:8" and arms[1]["where"] == f"{path}:10:8"
    cells = {s["where"].split(":")[0] for s in forward if s["parent"] in
             (arms[0]["site"], arms[1]["site"])}
    assert cells == {"std/rnn.mdl"}  # the cells' own ops, where rnn.mdl writes them
    # products moved out of the loops (x @ W over all steps before them, the weights'
    # gradients summed after them) keep the cells' lines, not the loops'
    for function in ("training forward", "backward"):
        moved = [s["where"] for s in ran if s["function"] == function
                 and s["what"].startswith("matmul") and by_id[s["parent"]]["parent"] < 0]
        assert moved and all(w.startswith("std/rnn.mdl:") for w in moved), (function, moved)
    assert sum(s["runs"] for s in forward if s["what"] == "while") == CALLS
    assert sum(s["runs"] for s in forward if s["what"] == "if") == CALLS


def test_sites_of_the_same_place_in_two_variants_are_one_row():
    def site(i, parent, what, runs, seconds, where="m.mdl:1:1"):
        return dict(function="forward", site=i, parent=parent, where=where, what=what,
                    runs=runs, seconds=seconds)
    profile = [site(0, -1, "the whole function", 2, 1.0, ""),   # the generic code
               site(1, 0, "for", 2, 0.75, "m.mdl:3:3"),
               site(2, 1, "matmul", 70, 0.5),
               site(3, -1, "the whole function", 1, 0.5, ""),   # a specialization
               site(4, 3, "for", 1, 0.25, "m.mdl:3:3"),
               site(5, 4, "matmul", 35, 0.125),
               site(6, 3, "gather", 0, 0.0)]                    # never ran: left out
    [root] = rows(profile)
    assert (root.runs, root.seconds) == (3, 1.5)
    [loop] = root.children
    assert (loop.what, loop.runs, loop.seconds, loop.depth) == ("for", 3, 1.0, 1)
    assert [(r.what, r.runs, r.depth) for r in loop.children] == [("matmul", 105, 2)]
    text = table(profile, calls=3).splitlines()
    assert text[0].split() == ["what", "where", "runs/call", "ms/call", "(3", "calls)", "%"]
    assert text[2].split() == ["forward", "(whole)", "-", "1", "500.0000", "100.0"]
    assert text[3].split() == ["for", "m.mdl:3:3", "1", "333.3333", "66.7"]
    assert text[4].startswith("    matmul") and text[4].split()[2:] == ["35", "208.3333",
                                                                         "41.7"]
    assert Row("f", "", "x", 0).children == []
    # once negative runs and times (-1), totals without a word (0), a raw TypeError ("3")
    for calls, error in ((-1, ValueError), (0, ValueError), ("3", TypeError)):
        with pytest.raises(error, match="table\\(calls=...\\) takes"):
            table(profile, calls=calls)


def test_reset_and_builds_without_profiling(built):
    _, profiled, plain, inputs = built
    model = profiled.Profiled(seed=0)
    assert all(s["runs"] == 0 and s["seconds"] == 0 for s in model.profile())
    model.forward(**inputs)
    assert any(s["runs"] for s in model.profile())
    model.reset_profile()
    assert all(s["runs"] == 0 for s in model.profile())
    for method in ("profile", "reset_profile"):
        with pytest.raises(RuntimeError, match=rf"{method}\(\): model Profiled was built "
                           "without profiling: build it with `mdlc build --profile`"):
            getattr(plain.Profiled(seed=0), method)()


def test_the_cuda_target_times_its_sites_on_its_stream(built):
    """A profiled cuda build (on the emulated device) times each site by two events on the
    model's stream (the GPU's time: mdl/cuda/profile.h), counted as the cpu's are,
    computing what the cpu's plain build does (to f32's rounding: the device's sums add in
    another order); it runs no CUDA graph. (Its code is the plain cuda build's with the
    events between: the fuzzer's --profile compares such builds with the reference.)"""
    assert target("cuda", profile=True).profiled
    assert target("cuda", emulate=True, profile=True).profiled
    path, _, plain, inputs = built
    a = load(path, target="cuda", emulate=True, profile=True,
             name="profiled_on_device").Profiled(seed=3)
    computes_alike(a, plain.Profiled(seed=3), inputs, rtol=1e-5)
    # (float milliseconds, each pair rounded: a slack)
    ran, _ = counted_sites(a, inputs, slack=1e-6)
    assert all(s["seconds"] > 0 for s in ran if s["parent"] < 0)
    forward = [s for s in ran if s["function"] == "training forward"]
    assert [s["where"] for s in forward if s["what"] == "for"] == [
        f"{path}:6:8", f"{path}:10:8"]  # one after the other: no loops at once
    assert a.cuda_graphs == {"captured": 0, "replayed": 0}


def test_a_profiled_cuda_build_captures_no_graph(tmp_path):
    """A function whose host code only queues work runs as a CUDA graph in the plain build;
    a profiled build's events time each launch, so it runs as it is."""
    (path := tmp_path / "straight.mdl").write_text(
        "model Straight() { input x : f32[B, 4]; output y = tanh(x) * 2.0 }\n")
    for profile, graphs in ((False, 1), (True, 0)):
        _, text = sources(path, "straight", BuildOptions(target="cuda", emulate=True,
                                                         profile=profile))
        assert text["module.cpp"].count("mdl::cuda::GraphCall run(") == graphs
        assert text["module.cpp"].count("g.profiler.mark(g.stream)") == 2 * profile


def mdlc(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_mdlc_profile_prints_where_the_time_goes(built, tmp_path):
    path = built[0]
    done = mdlc("profile", str(path), "--dims", "T=6,B=2", "--calls", "3")
    assert done.returncode == 0, done.stderr
    head, plain, _, *lines = done.stdout.splitlines()
    assert head.startswith("Profiled at T=6, B=2: 3 calls of forward(training=True) and "
                           "backward(), ") and "ms of it in the model's code" in head
    assert re.match(r"The plain build \(no clocks\), the same calls in turns: [0-9.]+ ms a "
                    r"call, [0-9.]+x the profiled build's", plain), plain
    assert lines[2].split()[:4] == ["training", "forward", "(whole)", "-"]
    assert any(line.split()[:3] == ["for", f"{path}:6:8", "1"] for line in lines)
    assert any(line.startswith("backward (whole)") for line in lines)
    forward = mdlc("profile", str(path), "--dims", "T=6,B=2", "--forward", "--calls", "1")
    assert forward.returncode == 0 and "1 call of forward()," in forward.stdout
    assert "backward" not in forward.stdout
    fixed = mdlc("profile", str(path), "--dims", "T=6,B=2", "--specialize", "--calls", "1")
    assert fixed.returncode == 0 and fixed.stdout.startswith(
        "Profiled at T=6, B=2 (code for these sizes): 1 call of "), fixed.stderr
    np.savez(tmp_path / "batch.npz", xs=np.zeros((7, 2, 4), np.float32),
             lengths=np.array([7, 3], np.int32))
    given = mdlc("profile", str(path), "--inputs", str(tmp_path / "batch.npz"), "--calls", "2")
    assert given.returncode == 0 and given.stdout.startswith("Profiled: 2 calls of ")


@pytest.mark.parametrize("plain, said", [
    (None, None),
    (0.0105, "1.05x the profiled build's"),   # the clocks' cost, or the machine's moods
    (0.02, "2.00x the profiled build's: further apart than the clocks cost, so the shares "
           "below may not be the plain build's (docs/profiling.md)"),
    (0.005, "0.50x the profiled build's: further apart"),
])
def test_the_report_compares_the_plain_builds_time(plain, said):
    site = {"site": 0, "parent": -1, "function": "forward", "where": "", "what": "forward",
            "runs": 2, "seconds": 0.009}
    text = report("M", {"B": 2}, Measured(2, False, 0.01, [site], plain))
    second = text.splitlines()[1]
    if said is None:
        assert second == "" and "plain build" not in text
    else:
        assert second.startswith("The plain build (no clocks), the same calls in turns: ")
        assert said in second
        assert f"{plain * 500:.4f} ms a call" in second


@pytest.mark.parametrize("args, message", [
    (["--dims", "T=6"], "--dims takes the size of each dim of model `Profiled`'s inputs "
                        "(T, B): B missing"),
    (["--dims", "T=6,B=2,S=3"], "(T, B): S is none of them"),
    # it said "B missing" only, of a typo for B
    (["--dims", "T=6,Z=2"], "(T, B): Z is none of them; B missing"),
    (["--dims", "T=6,B=2", "--calls", "0"], "--calls 0: at least 1"),
    (["--dims", "T=100000,B=100000000", "--calls", "1"], "--dims T=100000,B=100000000: the "
     "model's inputs and values at these sizes need more memory than this machine gives"),
    # QA: it blamed the sizes of --dims ("give smaller sizes") for the parameters' memory
    (["-D", "H=1000000", "--dims", "T=2,B=1", "--calls", "1"], "mdlc: error: -D H=1000000: the "
     "model's parameters, "),
    (["--inputs", "x.npz", "--specialize"], "--specialize takes the sizes of --dims, not of "
                                            "--inputs"),
    (["--inputs", "absent.npz"], "--inputs absent.npz: "),
    (["--dims", "T=6,B=2", "--inputs", "x.npz"], "argument --inputs: not allowed with "
                                                 "argument --dims"),
])
def test_mdlc_profile_says_what_is_wrong(built, args, message):
    done = mdlc("profile", str(built[0]), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_a_model_of_no_dims_too_large_names_no_dims(tmp_path):
    """QA: the error began "--dims :" where the model has no symbolic dim."""
    path = tmp_path / "big.mdl"
    path.write_text("model Big() {\n  input x : f32[1000000, 1000000]\n"
                    "  output y = sum(x)\n}\n")
    done = mdlc("profile", str(path))
    assert done.returncode == 2 and done.stderr.startswith(
        "mdlc: error: the model's inputs and values at these sizes need more memory"), \
        done.stderr


def test_mdlc_profile_names_inputs_that_do_not_fit(built, tmp_path):
    np.savez(tmp_path / "wrong.npz", x=np.zeros((7, 2, 4), np.float32))
    done = mdlc("profile", str(built[0]), "--inputs", str(tmp_path / "wrong.npz"))
    assert done.returncode == 2 and f"--inputs {tmp_path / 'wrong.npz'}: " in done.stderr
    assert "unknown input 'x' (inputs are xs, lengths)" in done.stderr, done.stderr
    # a value the model refuses as it runs (an IndexError: a token past the embedding's
    # rows) is the file's fault, not a bug of ours
    ids = np.full((6, 2), 500, np.int32)
    np.savez(tmp_path / "ids.npz", tokens=ids, targets=ids, lengths=np.full(2, 6, np.int32))
    done = mdlc("profile", "examples/charlm.mdl", "--model", "CharLM", "-D", "H=8",
                "--inputs", str(tmp_path / "ids.npz"), cwd=ROOT)
    assert done.returncode == 2 and (f"mdlc: error: --inputs {tmp_path / 'ids.npz'}: `tokens` "
                                     "holds 500") in done.stderr, done.stderr


def _bad_npz(kind: str, path: Path) -> Path:
    """A file given where an .npz is wanted that is none: an .npy, a cut archive, a damaged
    member, text."""
    np.savez(whole := path.with_suffix(".whole.npz"), xs=np.ones((5, 3, 4), np.float32))
    data = whole.read_bytes()
    if kind == "npy":
        np.save(path.with_suffix(".npy"), np.ones(3))
        path.write_bytes(path.with_suffix(".npy").read_bytes())
    elif kind == "cut":
        path.write_bytes(data[:len(data) // 2])
    elif kind == "damaged":
        path.write_bytes(data[:100] + bytes(b ^ 0xFF for b in data[100:110]) + data[110:])
    else:
        path.write_text("not an archive\n")
    return path


@pytest.mark.parametrize("kind, detail", [
    ("npy", "it holds one array, an .npy"), ("cut", "BadZipFile"),
    ("damaged", "BadZipFile: Bad CRC-32"),
    ("text", "neither an .npz archive nor an .npy: a text, or a file of another kind")])
def test_a_file_that_is_no_npz_is_named_not_a_crash(built, tmp_path, kind, detail):
    bad = _bad_npz(kind, tmp_path / "bad.npz")
    done = mdlc("profile", str(built[0]), "--inputs", str(bad))
    assert done.returncode == 2 and (f"mdlc: error: --inputs {bad}: not an .npz of the "
                                     f"model's inputs (") in done.stderr, done.stderr
    assert detail in done.stderr, done.stderr
    done = mdlc("export", str(built[0]), "--onnx", str(tmp_path / "m.onnx"), "--params", str(bad))
    assert done.returncode == 2 and (f"mdlc: error: {bad}: not a checkpoint written by `save` "
                                     "(an .npz) (") in done.stderr, done.stderr
    assert detail in done.stderr, done.stderr


def test_mdlc_profile_with_an_index_computed_past_the_table_is_a_usage_error(tmp_path):
    """ids drawn within emb's rows index it as ids + 1: an internal error (exit 3) before."""
    path = tmp_path / "shifted.mdl"
    path.write_text("model M(V = 5) {\n  input ids : i32[B]\n  param emb : f32[V, 2]\n"
                    "  output y = emb[ids + 1]\n}\n")
    done = mdlc("profile", str(path), "--dims", "B=50", "--calls", "1")
    assert done.returncode == 2 and ("mdlc: error: the random inputs fail the model's check: "
                                     f"the index at {path.name}:4:17 computed from the input "
                                     "`ids` holds 5") in done.stderr, done.stderr
