"""Checkpoints: `save` then `load` continues training bit for bit; the file is a plain
.npz; a write killed midway leaves the previous checkpoint; every damaged or mismatched
file is a ValueError naming the file and the first problem, and changes nothing."""
from __future__ import annotations

import glob
import os
import pickle
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import charlm_batch

from codegen.pipeline import load


def trained(module, optimizer: str, steps: int, **options):
    m = module.CharLM(seed=1)
    m.set_optimizer(optimizer, lr=0.05, **options)
    for step in range(steps):
        m.train_step(**charlm_batch(step))
    return m


def params_of(m) -> dict:
    return {k: v.copy() for k, v in m.params.items()}


@pytest.mark.parametrize("optimizer, options", [
    ("adam", {"clip_norm": 1.0, "weight_decay": 0.01, "decoupled": True}),
    ("sgd", {"momentum": 0.9, "nesterov": True}),
])
def test_save_then_load_continues_training_bit_for_bit(charlm64, tmp_path, optimizer, options):
    path = tmp_path / "ckpt.npz"
    a = trained(charlm64, optimizer, 3, **options)
    a.save(path)
    b = charlm64.CharLM(seed=7)  # other initial weights, no optimizer: load sets both
    b.load(path)
    assert b.optimizer == a.optimizer
    for step in range(3, 6):
        out_a, out_b = a.train_step(**charlm_batch(step)), b.train_step(**charlm_batch(step))
        assert out_a["loss"] == out_b["loss"]
    for name, value in a.params.items():
        assert np.array_equal(value, b.params[name]), name


def test_a_step_count_at_its_end_stays_there(charlm64, tmp_path):
    """QA: a checkpoint whose optimizer/steps is 2**63 - 1 loaded, and the next step
    wrapped the count around to -2**63 (undefined in C++), which the model's own save, copy
    and pickle then refused as negative. The count stays at its largest."""
    path = tmp_path / "ckpt.npz"
    trained(charlm64, "adam", 1).save(path)
    arrays = entries(path)
    arrays["optimizer/steps"] = np.array(2 ** 63 - 1, np.int64)
    np.savez(path, **arrays)
    m = charlm64.CharLM(seed=1)
    m.load(path)
    m.train_step(**charlm_batch(1))
    assert m.optimizer["steps"] == 2 ** 63 - 1
    m.save(path)
    m.load(path)
    assert pickle.loads(pickle.dumps(m)).optimizer["steps"] == 2 ** 63 - 1


def test_the_file_is_a_plain_npz(charlm64, tmp_path):
    path = tmp_path / "ckpt.npz"
    m = trained(charlm64, "adam", 2)
    m.save(str(path))  # a str path works as a Path does
    with np.load(path, allow_pickle=False) as z:
        assert str(z["format"]) == "mdl checkpoint 1" and str(z["model"]) == "CharLM"
        assert str(z["optimizer/name"]) == "adam" and int(z["optimizer/steps"]) == 2
        assert float(z["optimizer/lr"]) == 0.05
        for name, value in m.params.items():
            assert np.array_equal(z[f"param/{name}"], value)
            assert z[f"optimizer/second/{name}"].shape == value.shape
        assert int(z["rng/calls"]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]  # no temporary left


def test_a_model_without_optimizer_saves_and_loads(charlm64, tmp_path):
    a, b = charlm64.CharLM(seed=3), charlm64.CharLM(seed=4)
    a.save(tmp_path / "w.npz")
    b.set_optimizer("sgd", lr=0.1)
    b.load(tmp_path / "w.npz")
    assert b.optimizer is None
    for name, value in a.params.items():
        assert np.array_equal(value, b.params[name])


def test_a_model_that_cannot_train_takes_a_training_models_checkpoint(charlm64, tmp_path):
    """QA: CharLMStep (no `minimize`) refused CharLM's checkpoint for its first optimizer
    entry ("'optimizer/first/embedding' is not part of a checkpoint of model
    CharLMStep"); it takes the parameters and the dropout stream, and no optimizer."""
    a = trained(charlm64, "adam", 2)
    a.save(tmp_path / "lm.npz")
    step = charlm64.CharLMStep(seed=5)
    step.load(tmp_path / "lm.npz")
    assert step.optimizer is None and step.rng_calls == a.rng_calls
    for name, value in a.params.items():
        assert np.array_equal(step.params[name], value), name
    # its own parameters are still checked as strictly as ever
    with np.load(tmp_path / "lm.npz") as z:
        np.savez(tmp_path / "extra.npz", **z, **{"param/extra": np.zeros(2)})
    with pytest.raises(ValueError, match="'param/extra' is not part of a checkpoint of model "
                                         "CharLMStep"):
        step.load(tmp_path / "extra.npz")


def entries(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def damaged(tmp_path, good, how: str):
    """A copy of the checkpoint `good`, damaged as `how` says."""
    path = tmp_path / f"{how.replace(' ', '_')}.npz"
    data = good.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "text":
        path.write_text("not a checkpoint\n")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "corrupt member":  # a flipped byte inside a stored array: a bad CRC
        with zipfile.ZipFile(good) as z:
            info = z.getinfo("param/lstm/W.npy")
        at = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
        path.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
    elif how == "one array":
        np.save(path.with_suffix(""), np.zeros(3))
        path.with_suffix(".npy").rename(path)
    else:
        arrays = entries(good)
        if how == "missing parameter":
            del arrays["param/decoder/b"]
        elif how == "unknown entry":
            arrays["param/encoder/W"] = np.zeros(2)
        elif how == "wrong shape":
            arrays["param/lstm/U"] = arrays["param/lstm/U"][:, :8]
        elif how == "wrong dtype":
            arrays["param/embedding"] = arrays["param/embedding"].astype(np.float32)
        elif how == "bad optimizer":
            arrays["optimizer/name"] = np.array("adagrad")
        elif how == "bad option":
            arrays["optimizer/lr"] = np.array(-1.0)
        elif how == "infinite option":
            arrays["optimizer/lr"] = np.array(np.inf)
        elif how == "negative moments":
            arrays["optimizer/second/decoder/b"] = -arrays["optimizer/second/decoder/b"] - 1
        elif how == "missing moments":
            del arrays["optimizer/second/lstm/b"]
        elif how == "other format":
            arrays["format"] = np.array("something else 2")
        np.savez(path, **arrays)
    return path


PROBLEMS = {
    "empty": "not a checkpoint (the file is empty)",
    "text": "not a checkpoint (not an .npz archive)",
    "one array": "not a checkpoint (not an .npz archive)",
    "truncated": "not a readable checkpoint (BadZipFile",
    "corrupt member": "not a readable checkpoint (BadZipFile: Bad CRC-32",
    "missing parameter": "no 'param/decoder/b' in the checkpoint",
    "unknown entry": "'param/encoder/W' is not part of a checkpoint of model CharLM "
                     "(it has no such parameter)",
    "wrong shape": "'param/lstm/U' should be float64[16, 64], the file has float64[16, 8]",
    "wrong dtype": "'param/embedding' should be float64[96, 32], the file has float32[96, 32]",
    "bad optimizer": "unknown optimizer 'adagrad'",
    "bad option": "the optimizer's options are invalid: lr must be > 0",
    "infinite option": "the optimizer's options are invalid: lr must be finite, got inf",
    "missing moments": "no 'optimizer/second/lstm/b' in the checkpoint",
    "negative moments": "'optimizer/second/decoder/b' holds -1.0",
    "other format": "format 'something else 2' is not 'mdl checkpoint 1'",
}


@pytest.mark.parametrize("how", list(PROBLEMS))
def test_a_bad_file_is_a_value_error_and_changes_nothing(charlm64, tmp_path, how):
    good = tmp_path / "good.npz"
    trained(charlm64, "adam", 1).save(good)
    path = damaged(tmp_path, good, how)
    m = trained(charlm64, "sgd", 2, momentum=0.5)
    before, optimizer = params_of(m), m.optimizer
    with pytest.raises(ValueError) as error:
        m.load(path)
    assert str(error.value).startswith(f"{path}: ")
    assert PROBLEMS[how] in str(error.value)
    assert m.optimizer == optimizer
    for name, value in before.items():
        assert np.array_equal(m.params[name], value), name
    m.train_step(**charlm_batch(9))  # still a working model


def test_a_missing_file_is_file_not_found(charlm64, tmp_path):
    with pytest.raises(FileNotFoundError):
        charlm64.CharLM().load(tmp_path / "nothing.npz")


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from codegen.pipeline import load
    module = load(sys.argv[1], dtype="f64", defines={"H": 16}, name="charlm_h16_f64_generic")
    m = module.CharLM(seed=0)
    m.set_optimizer("adam", lr=0.01)
    version = 0
    while True:
        version += 1
        for w in m.params.values():
            w[...] = version
        m.save(sys.argv[2])
        if version == 1:
            print("saved", flush=True)
""")


def test_a_write_killed_midway_leaves_the_previous_checkpoint(charlm64_generic, tmp_path):
    """A process saving over and over is killed (SIGKILL) at odd moments: the file it
    leaves always loads, whole, as one of the versions it wrote. At least one kill must
    land inside a save (its temporary file is left behind), or the test proves nothing.
    The next save removes what the killed ones left (each file as large as a checkpoint:
    they once piled up)."""
    from conftest import CHARLM
    path = tmp_path / "ckpt.npz"
    midway, seen = 0, set()
    for attempt in range(12):
        if attempt >= 4 and midway:
            break
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(CHARLM), str(path)],
                                stdout=subprocess.PIPE, text=True, env={**os.environ})
        try:
            assert proc.stdout.readline() == "saved\n"
            time.sleep(0.05 + 0.037 * attempt)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        left = {p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"}
        midway += bool(left - seen)
        seen |= left
        m = charlm64_generic.CharLM(seed=5)
        m.load(path)
        values = {float(w.flat[0]) for w in m.params.values()}
        assert len(values) == 1 and min(values) >= 1  # one whole version
        assert m.optimizer["name"] == "adam"
    assert midway, "no kill landed inside a save"
    m.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]


def test_a_save_removes_only_temporary_files_of_processes_gone(charlm64, tmp_path):
    """`.NAME.PID.<random>.tmp`: removed where no process PID runs; kept where one does
    (it may be saving now), and kept where the name holds no PID (not mdl's to judge)."""
    path = tmp_path / "ck.npz"
    gone, running, unnamed = (tmp_path / f".ck.npz.{n}.abcdefgh.tmp"
                              for n in ("999999999", "1", "x3"))
    other = tmp_path / ".other.npz.999999999.abcdefgh.tmp"
    for p in (gone, running, unnamed, other):
        p.write_bytes(b"half a checkpoint")
    charlm64.CharLM(seed=0).save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["ck.npz", running.name, unnamed.name, other.name])


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt  # as Python's SIGINT handler raises in the code it stops


def stopped_by_a_handler(*args, **kwargs):
    raise SystemExit(130)  # as a SIGINT handler of the user's may


def folder_fsync_interrupted(fd, fsync=os.fsync):
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        raise KeyboardInterrupt
    fsync(fd)


@pytest.mark.parametrize("module, name, stand_in, call, raised", [
    (glob, "glob", interrupted, "save", KeyboardInterrupt),  # its sweep of abandoned files
    (glob, "glob", stopped_by_a_handler, "save", SystemExit),
    (os, "fsync", folder_fsync_interrupted, "save", KeyboardInterrupt),
    (np, "load", interrupted, "load", KeyboardInterrupt)])
def test_ctrl_c_inside_a_save_or_load_reaches_the_caller(charlm64, tmp_path, monkeypatch,
                                                         module, name, stand_in, call, raised):
    """QA: save() passed over every error of its best-effort steps (the sweep of abandoned
    temporary files, the folder's fsync), a Ctrl-C that landed there too: a loop saving
    every 10 steps (examples/train_charlm.py without its handler) ran on after 5 of 15
    Ctrl-Cs. In load() it was `ValueError: ...: not a readable checkpoint
    (KeyboardInterrupt: )`."""
    path = tmp_path / "ck.npz"
    m = charlm64.CharLM(seed=0)
    m.save(path)
    monkeypatch.setattr(module, name, stand_in)
    with pytest.raises(raised):
        getattr(m, call)(path)


@pytest.mark.parametrize("where, error", [
    ("missing/ck.npz", FileNotFoundError), ("folder", IsADirectoryError),
    ("", FileNotFoundError)])
def test_a_save_that_cannot_be_written_names_the_callers_path(charlm64, tmp_path,
                                                              monkeypatch, where, error):
    """It once named its hidden temporary file (`.ck.npz.p3mpwbzx.tmp`), and save("")
    tried to rename it over the current folder, then named that folder; now it is
    open("")'s error, naming the empty path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    with pytest.raises(error) as raised:
        charlm64.CharLM().save(where)
    assert ".tmp" not in str(raised.value) and str(raised.value.filename) in (
        str(tmp_path / "missing"), str(tmp_path / "folder"), "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # nothing left behind


def test_a_save_through_a_symbolic_link_writes_its_target(charlm64, tmp_path):
    """The rename replaced the link with a file and left the target as it was."""
    target, link = tmp_path / "real.npz", tmp_path / "link.npz"
    target.write_bytes(b"old")
    link.symlink_to(target)
    m = charlm64.CharLM(seed=3)
    m.save(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    again = charlm64.CharLM(seed=0)
    assert not np.array_equal(again.params["lstm/W"], m.params["lstm/W"])
    again.load(target)
    assert np.array_equal(again.params["lstm/W"], m.params["lstm/W"])


def test_a_save_to_what_is_no_regular_file_is_refused(charlm64, tmp_path):
    """Saved as root, /dev/full became a regular file (the rename replaced the device)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"pipe is not a regular file, and a checkpoint "
                                         r"replaces the file at its path whole"):
        charlm64.CharLM().save(fifo)
    assert fifo.exists() and not fifo.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_save_takes_a_bytes_path_and_a_failure_names_the_path(charlm64, tmp_path):
    path = tmp_path / "ck.npz"
    charlm64.CharLM().save(os.fsencode(path))  # once: "Can't mix bytes and non-bytes"
    charlm64.CharLM().load(path)
    with pytest.raises(OSError) as raised:  # the folder is there, a file cannot be made in it
        charlm64.CharLM().save("/proc/ck.npz")
    assert raised.value.filename == "/proc/ck.npz" and ".tmp" not in str(raised.value)


def test_a_path_whose_name_is_not_utf8_loads_as_it_saves(charlm64, tmp_path):
    """QA: a str naming a file whose name is not UTF-8 (os.listdir's surrogate, PEP 383)
    saved, and np.load read it, but load() raised UnicodeEncodeError before reading; an
    error named a bytes path b'...'."""
    m = charlm64.CharLM(seed=1)
    m.save(os.fsencode(tmp_path) + b"/\xff.npz")
    (name,) = os.listdir(tmp_path)
    path = os.path.join(tmp_path, name)  # '\udcff.npz'
    for given in (path, Path(path), os.fsencode(path)):
        other = charlm64.CharLM(seed=2)
        other.load(given)
        assert all(np.array_equal(other.params[k], v) for k, v in m.params.items())
    Path(path).write_bytes(b"not an archive")
    for given in (path, os.fsencode(path)):
        with pytest.raises(ValueError) as raised:
            charlm64.CharLM().load(given)
        assert str(raised.value) == (f"{tmp_path}/\\xff.npz: not a checkpoint (not an .npz "
                                     "archive)")


def test_a_parameter_name_too_long_for_an_npz_is_refused_before_anything_is_written(
        tmp_path):
    """QA: save() of a parameter named with more bytes than a zip member's name holds
    (65535, with "optimizer/second/" before it and ".npy" after) failed deep in zipfile, a
    struct.error naming nothing. A ValueError names the parameter (its start) before any
    file is made; a name at the limit saves and loads, with Adam's moments too."""
    at_limit, too_long = "w" * 65514, "v" * 65515
    path = tmp_path / "long.mdl"
    path.write_text("".join(
        f"model {model}() {{ input x : f32[B, 2]; param {name} : f32[2] = normal(0, 1); "
        f"output y = sum(x * {name}); minimize y }}\n"
        for model, name in [("Fits", at_limit), ("Past", too_long)]))
    module = load(path, name="long_names")
    fits, past = module.Fits(seed=0), module.Past(seed=0)
    for model in (fits, past):
        model.set_optimizer("adam", lr=0.1)
        model.train_step(x=np.ones((1, 2), np.float32))
    fits.save(tmp_path / "fits.npz")
    again = module.Fits(seed=1)
    again.load(tmp_path / "fits.npz")
    assert again.optimizer == fits.optimizer
    np.testing.assert_array_equal(again.params[at_limit], fits.params[at_limit])
    with pytest.raises(ValueError, match=re.escape(
            f"save(path): parameter '{'v' * 40}...' has a name of 65515 bytes, and a "
            "checkpoint takes names of at most 65514: it is an .npz archive, a zip file")):
        past.save(tmp_path / "past.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fits.npz", "long.mdl"]
