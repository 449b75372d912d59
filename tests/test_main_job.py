"""The main job (examples/train_charlm.py) end to end at a small size: it trains, saves a
checkpoint, samples text through CharLMStep (and, exported to ONNX by
examples/sample_onnx.py, the same text in onnxruntime), and a run stopped and resumed ends
exactly where an unbroken run does."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "train_charlm.py"
SMALL = ["--hidden", "16", "--seq", "12", "--batch", "4", "--chars", "40000",
         "--sample", "40", "--decay-steps", "30"]


def run(out: Path, *flags: str) -> str:
    done = subprocess.run([sys.executable, str(JOB), *SMALL,
                           "--out", str(out), *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_same_checkpoint(run_a: Path, run_b: Path) -> None:
    with np.load(run_a / "checkpoint.npz") as a, np.load(run_b / "checkpoint.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            assert np.array_equal(a[key], b[key]), key


def test_the_main_job_trains_saves_and_samples(tmp_path):
    out = run(tmp_path / "whole", "--steps", "30")
    assert "held-out text" in out and "saved" in out
    assert "--- a sample (temperature 0.8) ---\ndef " in out
    sample = (tmp_path / "whole" / "samples.txt").read_text()
    assert sample.startswith("def ") and len(sample) == len("def ") + 40 + 1
    losses = (tmp_path / "whole" / "losses.csv").read_text().splitlines()
    assert losses[0] == "step,loss,held_out_loss" and losses[-1].startswith("30,")

    # the checkpoint exported to ONNX samples the same text in onnxruntime (docs/onnx.md)
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "sample_onnx.py"),
                           "--out", str(tmp_path / "whole"), "--hidden", "16",
                           "--sample", "40"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == sample
    assert (tmp_path / "whole" / "charlm_step.onnx").is_file()

    run(tmp_path / "resumed", "--steps", "15")
    out = run(tmp_path / "resumed", "--steps", "30", "--resume")
    assert "resumed from" in out and "at step 15" in out
    assert_same_checkpoint(tmp_path / "whole", tmp_path / "resumed")
    assert (tmp_path / "resumed" / "samples.txt").read_text() == sample


def test_resume_with_more_steps_keeps_the_learning_rate_s_schedule(tmp_path):
    """QA: a 5-step run resumed with --steps 8 recomputed its cosine over 8 steps, so the
    rate at step 6 was 0.55 of --lr where step 5 had ended the decay at a tenth (5.5
    times higher; docs/training.md's `--resume --steps 2000`). It goes on at the end of the
    schedule the run began with, unless --decay-steps sets another."""
    out = tmp_path / "run"
    job = [sys.executable, str(JOB), *SMALL[:-2], "--out", str(out)]  # no --decay-steps
    for flags in (["--steps", "5"], ["--steps", "8", "--resume"]):
        done = subprocess.run(job + flags, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert ("the learning rate decays over the first 5 steps, as the run began "
            "(--decay-steps sets another end)") in done.stdout
    whole = tmp_path / "whole"  # steps 6 to 8 at the end of a 5-step decay, unbroken
    run(whole, "--steps", "8", "--decay-steps", "5")
    assert_same_checkpoint(out, whole)
    (out / "schedule.json").write_text("{\"decay_steps\": \"5\"}")  # damaged: one line
    done = subprocess.run(job + ["--steps", "9", "--resume"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"--resume: {out / 'schedule.json'}: decay_steps '5' is no number of steps; give "
        "--decay-steps, or remove the file to decay over --steps"], done.stderr
    done = subprocess.run(job + ["--steps", "9", "--resume", "--decay-steps", "10"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with np.load(out / "checkpoint.npz") as ck:
        want = 3e-3 * (0.55 + 0.45 * np.cos(np.pi * 9 / 10))
        assert np.isclose(ck["optimizer/lr"], want, rtol=1e-6)


def test_resume_at_or_past_steps_says_there_is_nothing_to_train(tmp_path):
    """QA: --resume from a checkpoint already at --steps (or past it) trained nothing, yet
    printed the loss and "saved", and sampled again, with no word of why. It says so in
    one line and ends with status 0, every file as it was (as Lightning's fit at its
    max_steps)."""
    out = tmp_path / "run"
    run(out, "--steps", "5")
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    for steps in ("5", "3"):
        said = run(out, "--resume", "--steps", steps)
        assert said.splitlines()[-1] == (
            f"--resume: {out / 'checkpoint.npz'} is at step 5 and --steps is {steps}: "
            "nothing to train (give --steps past 5 to go on)"), said
        assert "saved" not in said and "sample" not in said
        assert {p.name: p.read_bytes() for p in out.iterdir()} == files


def test_distributed_outside_torchrun_says_how_to_start_it(tmp_path):
    """Once a torch traceback (no RANK) after the build and the corpus."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, str(JOB), "--distributed", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "torchrun --nproc_per_node=2 examples/train_charlm.py --distributed" in done.stderr


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_saves_and_resume_goes_on(tmp_path, signum, status):
    """QA: the job saved only after its last step, so Ctrl-C (or a crash) lost the whole run
    and left runs/ empty. Now a checkpoint is saved every --save-every steps, and Ctrl-C
    stops after the step under way, saves it whole (the checkpoint of a run told to stop
    there), exits with 130 and prints the command that goes on. SIGTERM (`timeout`, `kill`,
    a scheduler's stop) ended the run where it stood, losing the steps since the last save:
    it does what Ctrl-C does, with status 143."""
    out = tmp_path / "stopped"
    job = subprocess.Popen([sys.executable, str(JOB), *SMALL, "--out", str(out),
                            "--steps", "1000000", "--save-every", "10"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a build, then 10 steps: the handler is in place
        while not (out / "checkpoint.npz").exists() and job.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        with np.load(out / "checkpoint.npz") as periodic:  # saved while it trains
            assert periodic["optimizer/steps"] % 10 == 0
        job.send_signal(signum)
        said, errors = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == status and "Traceback" not in errors, errors
    stopped = re.search(r"stopped at step (\d+): saved (.+)\n", said)
    assert stopped and stopped[2] == str(out / "checkpoint.npz"), said
    again = [str(JOB), *SMALL, "--out", str(out), "--steps", "1000000", "--save-every", "10",
             "--resume"]
    assert f"to go on: python3 {shlex.join(again)}\n" in said
    step = int(stopped[1])
    rows = (out / "losses.csv").read_text().splitlines()[1:]
    assert all(int(row.split(",")[0]) <= step for row in rows)

    run(tmp_path / "told", "--steps", str(step))
    assert_same_checkpoint(out, tmp_path / "told")
    assert f"resumed from {out / 'checkpoint.npz'} at step {step}" in \
        run(out, "--resume", "--steps", str(step + 5))


def test_what_the_main_job_refuses_it_says_in_one_line(tmp_path):
    """QA: --resume with no checkpoint ended in a FileNotFoundError traceback (a junk one in
    a ValueError traceback); each is now one line naming the file (a bad flag: argparse's
    usage and error)."""
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "checkpoint.npz").write_text("not a checkpoint")
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("hello world\n")
    for flags, status, message in [
            (["--resume", "--out", str(tmp_path / "none")], 1,
             f"--resume: no checkpoint at {tmp_path / 'none' / 'checkpoint.npz'} to go on "
             "from (leave --resume out to start a run there)"),
            (["--resume", "--out", str(tmp_path / "junk")], 1,
             f"--resume: {tmp_path / 'junk' / 'checkpoint.npz'}: not a checkpoint"),
            (["--save-every", "0", "--out", str(tmp_path / "none")], 2,
             "--save-every takes a number of steps, at least 1, not 0"),
            (["--decay-steps", "0", "--out", str(tmp_path / "none")], 2,
             "--decay-steps takes a number of steps, at least 1, not 0"),
            # QA: a corpus shorter than a window was NumPy's "high <= 0" in a traceback
            (["--corpus", str(tiny), "--out", str(tmp_path / "tiny")], 1,
             f"the text ({tiny}) holds 12 characters, too few for --seq 12: the training "
             "text needs 14 at least and the held-out 5% 13 (give more with --corpus or "
             "--chars, or a smaller --seq)")]:
        done = subprocess.run([sys.executable, str(JOB), *SMALL, *flags],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == status and "Traceback" not in done.stderr, done.stderr
        lines = done.stderr.splitlines()
        assert message in lines[-1] and (status == 2 or len(lines) == 1), done.stderr
    assert not (tmp_path / "none").exists()


def test_a_held_out_text_of_fewer_windows_than_a_batch_is_measured(tmp_path):
    """QA: a corpus under about 41,000 characters (the tutorial's own, 38,701) printed
    `nan on held-out text`: the held-out 5% held fewer windows than --batch, and none was
    measured. They are measured together, as a smaller batch."""
    text = tmp_path / "small.txt"
    text.write_text("".join(f"line {i}: the quick brown fox\n" for i in range(25)))
    out = run(tmp_path / "run", "--corpus", str(text), "--steps", "2")
    said = re.search(r"step 2: loss ([\d.]+) on training batches, (\S+) on held-out", out)
    assert said is not None and np.isfinite(float(said.group(2))), out
