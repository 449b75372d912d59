"""`python -m benchmarks [options]`: the same as `mdlc bench [options]`."""
import sys

from codegen.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
