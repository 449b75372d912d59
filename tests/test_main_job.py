"""The main job (examples/train_charlm.py) end to end at a small size: it trains, saves a
checkpoint, samples text through CharLMStep (and, exported to ONNX by
examples/sample_onnx.py, the same text in onnxruntime), and a run stopped and resumed ends
exactly where an unbroken run does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--hidden", "16", "--seq", "12", "--batch", "4", "--chars", "40000",
         "--sample", "40", "--decay-steps", "30"]


def run(out: Path, *flags: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_charlm.py"), *SMALL,
                           "--out", str(out), *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


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
    with np.load(tmp_path / "whole" / "checkpoint.npz") as a, \
            np.load(tmp_path / "resumed" / "checkpoint.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            assert np.array_equal(a[key], b[key]), key
    assert (tmp_path / "resumed" / "samples.txt").read_text() == sample


def test_distributed_outside_torchrun_says_how_to_start_it(tmp_path):
    """Once a torch traceback (no RANK) after the build and the corpus."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_charlm.py"),
                           "--distributed", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "torchrun --nproc_per_node=2 examples/train_charlm.py --distributed" in done.stderr
