"""mdl's benchmark suite (issue #8): compiled models against PyTorch and JAX on the same
math and the same weights, each framework in its own process, side by side in one run.
`python -m benchmarks --help` (or `mdlc bench --help`) lists the options; docs/benchmarks.md
describes the method. Lives in the source checkout only: it is not part of the wheel."""
