"""A test's .mdl source written to a file of its own: what a module-scoped fixture hands
to `load`, `mdlc` or the exporter."""
from __future__ import annotations

from pathlib import Path


# A model that refuses every call at T < 2 (`zeros[T - 2]`): mdlc's refusals of such sizes
NEEDS_TWO_STEPS = """
model Sb(H = 3) {
  input xs : f32[T, B, H]
  z = zeros[T - 2, B]
  output loss = sum(xs[2:] * xs[2:]) + sum(z)
  minimize loss
}
"""


def source_file(tmp_path_factory, name: str, text: str) -> Path:
    """`text` as the file `name` (its stem names the module `load` builds from it) in a
    new folder of the session's temporary directory."""
    path = tmp_path_factory.mktemp(Path(name).stem) / name
    path.write_text(text)
    return path


def built_for(path: Path, target: str, **options):
    """The module of `path` for `target`: "cpu", or "emulated" (the cuda target on the
    emulated device)."""
    from codegen.pipeline import load
    how = dict(target="cuda", emulate=True) if target == "emulated" else {}
    return load(path, **how, **options)
