"""Data-parallel training (codegen/distributed.py) with two gloo ranks on this machine:
halves of each batch on two ranks end where one process training on the whole batches
does (f64, 1e-12), with SGD and Adam, with lengths (weighted by real tokens) and without;
ranks seeded differently start from rank 0's weights; a rank that dies stops the other
with an error instead of a hang."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import CHARLM, charlm_batch

from codegen.pipeline import load

pytest.importorskip("torch", reason="data-parallel training runs on torch.distributed")

SEQ = """
import "std/rnn.mdl"
model Seq(H = 4) {
  input xs : f32[T, B, 3]
  input ys : f32[T, B, 4]
  h = zeros[B, H]
  c = zeros[B, H]
  hs = for x in xs {
    h, c = lstm(x, h, c)
    yield h
  }
  output loss = mse(hs, ys)
  minimize loss
}
"""
CONFIGS = {"sgd": ("sgd", {"lr": 0.3, "momentum": 0.9}),
           "adam": ("adam", {"lr": 0.05, "clip_norm": 1.0})}
STEPS = 3


def seq_batch(step: int, B: int = 4) -> dict:
    rng = np.random.default_rng(100 + step)
    return {"xs": rng.standard_normal((5, B, 3)), "ys": rng.standard_normal((5, B, 4))}


def no_token_batch(step: int) -> dict:
    """The char LM's 4 rows, every length 0 at step 1: no real token on any rank."""
    batch = charlm_batch(step, T=6, B=4)
    if step == 1:
        batch["lengths"][:] = 0
    return batch


def shard(batch: dict, rank: int, world: int) -> dict:
    """This rank's rows (the batch dim is 1 for sequences, 0 for lengths)."""
    def rows(k, v):
        n = v.shape[1 if v.ndim > 1 else 0] // world
        return v[:, rank * n:(rank + 1) * n] if v.ndim > 1 else v[rank * n:(rank + 1) * n]
    return {k: rows(k, v) for k, v in batch.items()}


WORKER = textwrap.dedent("""
    import datetime, json, os, sys
    import numpy as np
    import torch
    import torch.distributed as dist
    sys.path.insert(0, sys.argv[1])
    from test_distributed import (CONFIGS, STEPS, charlm_batch, device_seq, gru_batch,
                                  gru_module, modules, no_token_batch, seq_batch, shard)
    from codegen.distributed import DataParallel
    rank, world, out, mode = int(os.environ["RANK"]), 2, sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    if mode == "device":  # a cuda model: its gradients reduced in the device's memory
        for name, (opt, options) in CONFIGS.items():
            m = device_seq().Seq(seed=10 + rank)
            m.set_optimizer(opt, **options)
            dp = DataParallel(m)
            own = torch.from_dlpack(m.device_gradient_buffer)  # the model's memory, uncopied
            assert dp.grads is not None and dp.grads.data_ptr() == own.data_ptr()
            for step in range(STEPS):
                dp.train_step(**shard(seq_batch(step, B=4), rank, world))
            np.savez(f"{out}/device_{name}_{rank}.npz", **m.params)
        dist.destroy_process_group()
        sys.exit(0)
    charlm, seq = modules()
    if mode == "checks":  # each case raises on both ranks at once, so they stay in step
        said, rows = {}, slice(0, 1) if rank == 0 else slice(1, 4)
        def tried(case, make, opts=({"name": "sgd", "lr": 0.3, "momentum": 0.9},) * 2,
                  weight=(None, None), cut=lambda k, v: v[:, rows]):
            m = make(seed=0)
            if opts[rank] is not None:
                m.set_optimizer(**opts[rank])
            dp = DataParallel(m)
            try:
                for step in range(STEPS):
                    dp.train_step(**{k: cut(k, v) for k, v in seq_batch(step).items()},
                                  shard_weight=weight[rank])
                np.savez(f"{out}/{case}_{rank}.npz", **m.params)
            except (RuntimeError, ValueError) as e:
                said[case] = f"{type(e).__name__}: {e}"
        tried("uneven", seq.Seq)
        tried("two_dims", seq.Seq, cut=lambda k, v: v[rank:, rows])
        for bad in (float("nan"), float("inf"), -1.0, "x", "2", True):  # float() reads "2"
            tried(f"weight_{bad}", seq.Seq, weight=(bad, bad))
        tried("weight_one_rank", seq.Seq, weight=(1.0, -1.0))  # rank 0 once waited on
        adam = {"name": "adam", "lr": 0.05}
        tried("adam_sgd", seq.Seq, opts=(adam, {"name": "sgd", "lr": 0.05}))
        tried("adam_none", seq.Seq, opts=(adam, None))
        tried("adam_lr", seq.Seq, opts=(adam, {**adam, "lr": 0.01}))
        # rank 1's xs have 2 features, not 3: its call raises, rank 0 must not wait
        tried("bad_input", seq.Seq,
              cut=lambda k, v: v[:, rows, :2] if rank == 1 and k == "xs" else v[:, rows])
        # a refused step counts no call on a rank whose forward_backward ran (rank 0's
        # counted it: its dropout stream one call ahead of a checkpoint's and of rank 1's)
        m = seq.Seq(seed=0)
        m.set_optimizer("sgd", lr=0.3)
        dp = DataParallel(m)
        before = m.rng_calls
        try:
            dp.train_step(**{k: v[..., :2] if rank == 1 and k == "xs" else v
                             for k, v in seq_batch(0).items()})
        except (RuntimeError, ValueError):
            said["refused_calls"] = m.rng_calls - before
        # a save rank 0 cannot make, a load rank 1 cannot: every rank raises (rank 1 waited
        # in a barrier until the group's timeout, where rank 0 caught its error and trained on)
        dp.save(f"{out}/good.npz")
        for case, call in (("bad_save", lambda: dp.save(f"{out}/no/such/folder/c.npz")),
                           ("bad_load", lambda: dp.load(f"{out}/good.npz" if rank == 0
                                                        else f"{out}/missing.npz"))):
            try:
                call()
            except Exception as e:
                said[case] = f"{type(e).__name__}: {e}"
        dp.train_step(**shard(seq_batch(1), rank, world))
        said["after"] = "trained on"
        # a mean over rows with lengths, each rank's 2 rows trimmed to its own longest: the
        # shards differ in T alone (2 and 6) and weigh alike (once 2:6, by their steps)
        m = gru_module().GRUClassifier(seed=0)
        m.set_optimizer("sgd", lr=0.5, momentum=0.9)
        dp = DataParallel(m)
        rows = slice(2 * rank, 2 * rank + 2)
        for step in range(STEPS):
            b = gru_batch(step)
            mine = {k: v[rows] for k, v in b.items() if k != "xs"}
            longest = int(mine["lengths"].max())
            dp.train_step(xs=b["xs"][:longest, rows], **mine)
        np.savez(f"{out}/trimmed_{rank}.npz", **m.params)
        dp = DataParallel(seq.Seq(seed=0))
        for case, call in (("class", lambda: DataParallel(seq.Seq)),
                           ("positional", lambda: dp.train_step(*seq_batch(0).values()))):
            try:
                call()
            except TypeError as e:
                said[case] = str(e)
        # rank 1's lengths cannot be read: once summed before the guard (a raw NumPy
        # error on rank 1, rank 0 waiting in the gather until the timeout)
        m = charlm.CharLM(seed=0)
        m.set_optimizer("sgd", lr=0.1)
        dp = DataParallel(m)
        try:
            batch = shard(charlm_batch(0, B=4), rank, world)
            dp.train_step(**{**batch, "lengths": [[1, 2], [3]] if rank else batch["lengths"]})
        except (RuntimeError, ValueError) as e:
            said["bad_lengths"] = f"{type(e).__name__}: {e}"
        m = seq.Seq(seed=0)
        m.set_optimizer("adam", lr=0.05)
        if rank == 0:  # restored with a step taken: its Adam state is not rank 1's
            m.train_step(**seq_batch(9))
        dp = DataParallel(m)
        try:
            dp.train_step(**seq_batch(0))
        except RuntimeError as e:
            said["adam_steps"] = f"{type(e).__name__}: {e}"
        # a step no rank has a real token for: the zero gradient one process steps (it
        # was refused, "the ranks' weights sum to zero", where one process trained on)
        m = charlm.CharLM(seed=0)
        m.set_optimizer("sgd", lr=0.1, momentum=0.9)
        dp = DataParallel(m)
        for step in range(STEPS):
            dp.train_step(**shard(no_token_batch(step), rank, world))
        np.savez(f"{out}/no_tokens_{rank}.npz", **m.params)
        with open(f"{out}/said_{rank}.json", "w") as f:
            json.dump(said, f)
        dist.destroy_process_group()
        sys.exit(0)
    if mode == "die":
        m = charlm.CharLM(seed=0)
        m.set_optimizer("sgd", lr=0.1)
        dp = DataParallel(m)
        for step in range(1000):
            if rank == 1 and step == 2:
                os._exit(7)
            dp.train_step(**shard(charlm_batch(step, B=4), rank, world))
        sys.exit("rank 0 trained on alone")
    for name, (opt, options) in CONFIGS.items():
        for data, make, batch in (("lengths", charlm.CharLM, charlm_batch),
                                  ("plain", seq.Seq, seq_batch)):
            m = make(seed=10 + rank)  # other seeds: the broadcast makes them rank 0's
            m.set_optimizer(opt, **options)
            dp = DataParallel(m)
            first = {k: v.copy() for k, v in m.params.items()}
            for step in range(STEPS):
                b = batch(step, B=4) if data == "plain" else batch(step, T=6, B=4)
                dp.train_step(**shard(b, rank, world))
            m.save(f"{out}/{name}_{data}_{rank}.own.npz")  # its own moments, not rank 0's
            calls = m.rng_calls
            dp.save(f"{out}/{name}_{data}.ckpt.npz")  # rank 0's, loaded by both
            dp.load(f"{out}/{name}_{data}.ckpt.npz")
            np.savez(f"{out}/{name}_{data}_{rank}.npz", rng_calls=[calls, m.rng_calls],
                     **{"first/" + k: v for k, v in first.items()},
                     **{"last/" + k: v for k, v in m.params.items()})
    dist.destroy_process_group()  # gloo's threads would abort the exit otherwise
""")


def modules():
    """The f64 char LM (as the other tests build it) and the Seq model, from the cache."""
    seq = Path(os.environ["MDL_CACHE_DIR"]) / "seq_model.mdl"
    if not seq.exists():
        seq.write_text(SEQ)
    return (load(CHARLM, dtype="f64", defines={"H": 16}, name="charlm_h16_f64_generic"),
            load(seq, dtype="f64", name="seq_f64"))


def gru_module():
    """examples/gru.mdl, f64, H = 4: a classifier with lengths whose loss is a mean over rows."""
    return load(Path(__file__).resolve().parents[1] / "examples" / "gru.mdl", dtype="f64",
                defines={"H": 4}, name="gru_h4_f64")


def gru_batch(step: int) -> dict:
    """4 rows of lengths 2, 1, 6, 3 (a shard of the first two is 2 steps long)."""
    rng = np.random.default_rng(200 + step)
    return {"xs": rng.standard_normal((6, 4, 8)), "lengths": np.array([2, 1, 6, 3], np.int32),
            "labels": rng.integers(0, 4, 4).astype(np.int32)}


def device_seq():
    """The Seq model on the cuda target, f64: on the emulated device, or on the GPU with
    MDL_TEST_DEVICE=gpu (both ranks share it)."""
    on_gpu = os.environ.get("MDL_TEST_DEVICE") == "gpu"
    modules()
    return load(Path(os.environ["MDL_CACHE_DIR"]) / "seq_model.mdl", target="cuda",
                emulate=not on_gpu, dtype="f64",
                name="seq_f64_" + ("gpu" if on_gpu else "emulated"))


def run_ranks(tmp_path, mode: str, timeout: float = 120) -> list[subprocess.CompletedProcess]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, str(Path(__file__).parent), str(tmp_path), mode],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def ranks_trained(tmp_path_factory):
    modules()  # built once here, so the ranks only load
    out = tmp_path_factory.mktemp("ranks")
    for p in run_ranks(out, "train"):
        assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("data", ["lengths", "plain"])
def test_two_ranks_on_halves_equal_one_process_on_the_whole(ranks_trained, name, data,
                                                           tmp_path):
    """The weights, and each rank's optimizer state (SGD's momentum, Adam's moments and
    step count, which each rank keeps for itself from the reduced gradients)."""
    charlm, seq = modules()
    opt, options = CONFIGS[name]
    one = (charlm.CharLM if data == "lengths" else seq.Seq)(seed=10)
    one.set_optimizer(opt, **options)
    for step in range(STEPS):
        one.train_step(**(seq_batch(step, B=4) if data == "plain"
                          else charlm_batch(step, T=6, B=4)))
    for rank in range(2):
        with np.load(ranks_trained / f"{name}_{data}_{rank}.npz") as got:
            for k, want in one.params.items():
                assert np.abs(got["last/" + k] - want).max() <= 1e-12 * max(
                    1.0, np.abs(want).max()), (rank, k)
    one.save(tmp_path / "one.npz")
    with np.load(tmp_path / "one.npz") as whole:
        state = {k: whole[k] for k in whole.files if k.startswith("optimizer/")}
    assert any(k.startswith("optimizer/first/") for k in state), sorted(state)
    if name == "adam":
        assert any(k.startswith("optimizer/second/") for k in state), sorted(state)
    for rank in range(2):
        with np.load(ranks_trained / f"{name}_{data}_{rank}.own.npz") as got:
            assert sorted(k for k in got.files if k.startswith("optimizer/")) == sorted(state)
            for k, want in state.items():
                if want.dtype.kind != "f":  # the name, the step count
                    assert np.array_equal(got[k], want), (rank, k, got[k], want)
                elif want.size:
                    assert np.abs(got[k] - want).max() <= 1e-12 * max(
                        1.0, np.abs(want).max()), (rank, k)


def test_a_device_model_s_gradients_are_reduced_in_its_memory(tmp_path):
    """Two ranks of a cuda model (on the emulated device here, on a GPU with
    MDL_TEST_DEVICE=gpu): DataParallel reduces the model's device_gradient_buffer in place,
    through DLPack, and the ranks end where one process on the whole batches does."""
    device_seq()  # built once here, so the ranks only load
    for p in run_ranks(tmp_path, "device"):
        assert p.returncode == 0, p.stderr[-3000:]
    _, seq = modules()
    for name, (opt, options) in CONFIGS.items():
        one = seq.Seq(seed=10)
        one.set_optimizer(opt, **options)
        for step in range(STEPS):
            one.train_step(**seq_batch(step, B=4))
        for rank in range(2):
            with np.load(tmp_path / f"device_{name}_{rank}.npz") as got:
                for k, want in one.params.items():
                    assert np.abs(got[k] - want).max() <= 1e-12 * max(1.0, np.abs(want).max()), \
                        (name, rank, k)


def test_ranks_seeded_differently_start_from_rank_0s_weights(ranks_trained):
    charlm, _ = modules()
    want = charlm.CharLM(seed=10).params
    for rank in range(2):
        with np.load(ranks_trained / f"adam_lengths_{rank}.npz") as got:
            for k, v in want.items():
                assert np.array_equal(got["first/" + k], v)


def test_each_rank_draws_its_own_dropout_masks(ranks_trained):
    """Ranks made with one seed (as the docs' example makes them) drew the same dropout
    masks for their shards: rank r's stream now starts at call r * 2**40, and goes on
    there after every rank loaded rank 0's checkpoint."""
    from codegen.distributed import RANK_STREAM
    for rank in range(2):
        with np.load(ranks_trained / f"sgd_plain_{rank}.npz") as got:
            assert list(got["rng_calls"]) == [rank * RANK_STREAM + STEPS] * 2  # and loaded


def test_a_dead_rank_stops_the_other_with_an_error(tmp_path):
    modules()
    start = time.monotonic()
    survivor, dead = run_ranks(tmp_path, "die", timeout=90)
    assert dead.returncode == 7
    assert survivor.returncode != 0
    assert "RuntimeError" in survivor.stderr and "trained on alone" not in survivor.stderr
    assert time.monotonic() - start < 60


def test_without_torch_the_import_says_how_to_install_it(monkeypatch):
    import importlib
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    monkeypatch.delitem(sys.modules, "codegen.distributed", raising=False)
    with pytest.raises(ImportError, match=r"install PyTorch \(pip install 'mdl\[distributed\]'"):
        importlib.import_module("codegen.distributed")


def test_the_main_job_trains_under_torchrun(tmp_path):
    from conftest import CHARLM  # noqa: F401  (the job builds examples/charlm.mdl itself)
    job = Path(__file__).resolve().parents[1] / "examples" / "train_charlm.py"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", str(job),
         "--distributed", "--hidden", "16", "--seq", "12", "--batch", "4", "--steps", "6",
         "--chars", "20000", "--sample", "20", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step 6: loss" in done.stdout and (tmp_path / "checkpoint.npz").exists()
    # QA: the loss it reported was rank 0's half of the batch; it is the whole batch's, as
    # one process on the whole batch reports it
    alone = subprocess.run(
        [sys.executable, str(job), "--hidden", "16", "--seq", "12", "--batch", "4",
         "--steps", "6", "--chars", "20000", "--sample", "20", "--out", str(tmp_path / "one")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    assert alone.returncode == 0, alone.stderr[-2000:]
    rows = [np.loadtxt(folder / "losses.csv", delimiter=",", skiprows=1, ndmin=2)
            for folder in (tmp_path, tmp_path / "one")]
    np.testing.assert_allclose(rows[0][:, 1], rows[1][:, 1], rtol=0, atol=2e-6)


def test_uneven_rows_weigh_by_rows_and_bad_weights_or_optimizers_are_refused(tmp_path):
    """Two ranks: shards of unequal rows without shard_weight= weigh by their rows (as one
    process on the whole batch), also where each is trimmed to its own longest row and the
    loss is a mean over rows (examples/gru.mdl); shards differing in two dims of the loss's
    mean (an mse of [T, B, H]), a shard_weight= that is not a
    finite number >= 0, different optimizers (name, options, steps) and one rank's bad
    input are refused on every rank, naming the rank and the difference; a step no rank
    has a real token for is the zero gradient one process steps."""
    charlm, seq = modules()
    # what the shards weigh by: the compiler's word, not an input's name
    assert (charlm.CharLM(seed=0).loss_tokens, seq.Seq(seed=0).loss_tokens) == ("lengths", None)
    assert (charlm.CharLM(seed=0).loss_mean_dims, seq.Seq(seed=0).loss_mean_dims,
            gru_module().GRUClassifier(seed=0).loss_mean_dims) == (None, ("T", "B"), ("B",))
    for p in run_ranks(tmp_path, "checks"):
        assert p.returncode == 0, p.stderr[-3000:]
    _, seq = modules()
    one = seq.Seq(seed=0)
    one.set_optimizer("sgd", lr=0.3, momentum=0.9)
    for step in range(STEPS):
        one.train_step(**seq_batch(step))
    gru = gru_module().GRUClassifier(seed=0)  # one process, the whole batch padded to T = 6
    gru.set_optimizer("sgd", lr=0.5, momentum=0.9)
    for step in range(STEPS):
        gru.train_step(**gru_batch(step))
    lm = charlm.CharLM(seed=0)  # one process, the step of no real token included
    lm.set_optimizer("sgd", lr=0.1, momentum=0.9)
    for step in range(STEPS):
        lm.train_step(**no_token_batch(step))
    for rank in range(2):
        with np.load(tmp_path / f"no_tokens_{rank}.npz") as got:
            for k, want in lm.params.items():
                assert np.abs(got[k] - want).max() <= 1e-12 * max(1.0, np.abs(want).max()), k
        with np.load(tmp_path / f"uneven_{rank}.npz") as got:
            for k, want in one.params.items():
                assert np.abs(got[k] - want).max() <= 1e-12 * max(1.0, np.abs(want).max())
        with np.load(tmp_path / f"trimmed_{rank}.npz") as got:
            for k, want in gru.params.items():
                assert np.abs(got[k] - want).max() <= 1e-12 * max(1.0, np.abs(want).max()), k
        said = json.loads((tmp_path / f"said_{rank}.json").read_text())
        assert "uneven" not in said
        assert said["two_dims"] == ("ValueError: the ranks' shards differ in B, T: pass "
                                    "shard_weight= (each shard's share of the loss's mean)")
        for bad in ("nan", "inf", "-1.0", "'x'", "'2'", "True"):
            case = f"weight_{bad.strip(chr(39))}"
            assert said[case] == ("ValueError: shard_weight must be a finite number "
                                  f">= 0: rank {rank} passed {bad}"), case
        assert said["weight_one_rank"] == ("ValueError: shard_weight must be a finite number "
                                           ">= 0: rank 1 passed " +
                                           ("one that is not" if rank == 0 else "-1.0"))
        assert said["adam_sgd"] == ("RuntimeError: rank 1 has a different optimizer than "
                                    "rank 0: sgd instead of adam")
        assert said["adam_none"] == ("RuntimeError: rank 1 has a different optimizer than "
                                     "rank 0: none instead of adam")
        assert said["adam_lr"] == ("RuntimeError: rank 1 has a different optimizer than "
                                   "rank 0: lr 0.01, rank 0 has lr 0.05")
        assert said["adam_steps"] == ("RuntimeError: rank 1 has a different optimizer than "
                                      "rank 0: steps 0, rank 0 has steps 1")
        assert said["refused_calls"] == 0 and said["after"] == "trained on"
        save, load = said["bad_save"], said["bad_load"]
        assert save.startswith("FileNotFoundError: " if rank == 0 else
                               "RuntimeError: rank 0 could not save the checkpoint: "
                               "FileNotFoundError: "), save
        assert load.startswith("FileNotFoundError: " if rank == 1 else
                               "RuntimeError: rank 1 could not load the checkpoint: "
                               "FileNotFoundError: "), load
        assert rank == 1 or load.endswith("the ranks that loaded it now hold other weights: "
                                          "load one on every rank before training on"), load
        bad_input = said["bad_input"]
        assert bad_input.startswith("ValueError: " if rank == 1 else
                                    "RuntimeError: rank 1 could not run its step: ValueError: ")
        assert "xs" in bad_input and "3" in bad_input, bad_input
        assert said["class"] == ("DataParallel takes a compiled mdl model, an instance: got "
                                 "the class Seq itself (make one: Seq(seed=0))")
        assert said["positional"] == ("DataParallel.train_step takes its inputs by name (xs=, "
                                      "ys=) and shard_weight= by name, got 2 positional")
        assert said["bad_lengths"].startswith(
            "ValueError: input 'lengths': NumPy cannot read it" if rank == 1 else
            "RuntimeError: rank 1 could not run its step: ValueError: input 'lengths'")
