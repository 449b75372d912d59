"""Sample text from the main job's checkpoint in onnxruntime: export the one-character model
`CharLMStep` of examples/charlm.mdl with the trained weights of runs/charlm/checkpoint.npz
(a CharLM checkpoint: the two models name their parameters alike), then draw characters
exactly as examples/train_charlm.py does. With the same --hidden, --prime, --sample,
--temperature and --seed it prints the sample train_charlm.py wrote to samples.txt.

    python3 examples/train_charlm.py          # trains, writes runs/charlm/checkpoint.npz
    python3 examples/sample_onnx.py           # the same sample, from onnxruntime

Needs onnx and onnxruntime (pip install onnx onnxruntime). Writes OUT/charlm_step.onnx.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime

from codegen import export_onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_charlm import sample  # noqa: E402  (the main job's own sampling)

HERE = Path(__file__).resolve().parent  # its .mdl file lies beside it


class OnnxStep:
    """An onnxruntime session answering `forward(**inputs)` as a native model does."""

    def __init__(self, path: Path):
        self.session = onnxruntime.InferenceSession(str(path),
                                                    providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]

    def forward(self, **inputs) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.session.run(None, inputs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/charlm"),
                    help="the main job's --out: reads checkpoint.npz there")
    ap.add_argument("--hidden", type=int, default=128, help="the LSTM width it trained")
    ap.add_argument("--prime", default="def ")
    ap.add_argument("--sample", type=int, default=400, help="characters to generate")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    onnx_file = export_onnx(HERE / "charlm.mdl", args.out / "charlm_step.onnx",
                            model="CharLMStep", defines={"H": args.hidden},
                            params=args.out / "checkpoint.npz")
    print(f"exported {onnx_file}", file=sys.stderr)
    text = sample(OnnxStep(onnx_file), args.hidden, args.prime, args.sample,
                  args.temperature, args.seed)
    print(text)


if __name__ == "__main__":
    main()
