"""`python -m benchmarks.products`: the float32 products an LSTM's generated code makes,
timed in every BLAS this machine can load, to choose one per machine from numbers
(docs/build.md, "The BLAS").

The shape classes, for T steps of batch B and hidden size H (input size H), are those of
the LSTM's forward and backward (benchmarks/models.mdl): the per-step product with the
recurrent weight and its transpose in the backward, the input product hoisted out of the
loop, the input gradient, and the weight gradient summed over all steps. The candidates:
MKL (plain, and with its right operand packed once, as mdl multiplies a loop's weight),
OpenBLAS (scipy-openblas32), and where installed oneDNN's `dnnl_sgemm` (the `onednn`
wheel) and BLIS (inside the `blis` wheel). Each library runs in a process of its own, the
libraries taking turns round by round, so that no two thread pools compete for the cores;
a cell is the median over rounds of each process's median.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from benchmarks.machine import describe

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Product:
    name: str
    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False

    @property
    def shape(self) -> str:
        a = f"[{self.k}, {self.m}]^T" if self.trans_a else f"[{self.m}, {self.k}]"
        b = f"[{self.n}, {self.k}]^T" if self.trans_b else f"[{self.k}, {self.n}]"
        return f"{a} @ {b}"


def lstm_products(t: int, b: int, h: int) -> list[Product]:
    """The products of one LSTM training step (T=t, B=b, H=I=h), forward then backward."""
    g = 4 * h
    return [Product("step", b, g, h), Product("step backward", b, h, g, trans_b=True),
            Product("hoisted input", t * b, g, h),
            Product("input gradient", t * b, h, g, trans_b=True),
            Product("weight gradient", h, g, t * b, trans_a=True)]


SIZES = ((1, 128), (20, 200), (32, 256), (32, 512), (64, 1024))


def libraries(onednn: str | None) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (shared library, extra environment) for each BLAS found."""
    from codegen.compile.blas import installed_file
    found: dict[str, tuple[str, dict[str, str]]] = {}
    mkl = installed_file("mkl", "libmkl_rt.so.")
    if mkl is not None:
        found["mkl"] = (str(mkl), {})
    try:
        import scipy_openblas32 as ob
        found["openblas"] = (str(Path(ob.get_lib_dir()) / f"lib{ob.get_library()}.so"), {})
    except ImportError:
        pass
    dnnl = Path(onednn) if onednn else installed_file("onednn", "libdnnl.so.")
    if dnnl is not None:
        # oneDNN's wheel needs the oneAPI runtime libraries installed beside it.
        found["onednn"] = (str(dnnl), {"LD_LIBRARY_PATH": str(Path(dnnl).parent)})
    blis = installed_file("blis", "cy.")
    if blis is not None:
        # BLIS comes inside a Python extension, which needs libpython's symbols.
        libpython = Path(sysconfig.get_config_var("LIBDIR")) / sysconfig.get_config_var(
            "LDLIBRARY")
        found["blis"] = (str(blis), {"LD_PRELOAD": str(libpython)})
    return found


def build(out: Path) -> Path:
    exe = out / "products"
    subprocess.run([os.environ.get("CXX", "g++"), "-O2", "-std=c++17", "-fopenmp",
                    str(HERE / "products.cpp"), "-o", str(exe), "-ldl"], check=True)
    return exe


def operands(p: Product) -> tuple[np.ndarray, np.ndarray]:
    """op(A) and op(B) as products.cpp fills them (stored row-major, then transposed)."""
    i = np.arange(p.m * p.k, dtype=np.int64)
    a = (((i * 7) % 13 - 6) / 8).astype(np.float32).reshape((p.k, p.m) if p.trans_a else
                                                          (p.m, p.k))
    j = np.arange(p.k * p.n, dtype=np.int64)
    b = (((j * 5) % 11 - 5) / 8).astype(np.float32).reshape((p.n, p.k) if p.trans_b else
                                                          (p.k, p.n))
    return (a.T if p.trans_a else a), (b.T if p.trans_b else b)


def time_one(exe: Path, lib: str, where: tuple[str, dict[str, str]], p: Product,
             threads: int, reps: int) -> dict[str, float]:
    """candidate -> median microseconds, after checking each candidate's product."""
    path, extra = where
    env = {**os.environ, **extra, "OMP_NUM_THREADS": str(threads)}
    args = [str(exe), str(threads), str(reps), str(p.m), str(p.n), str(p.k),
            str(int(p.trans_a)), str(int(p.trans_b)), f"{lib}={path}"]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{lib} on {p.shape}: {done.stderr.strip()}")
    a, b = operands(p)
    # sum(A @ B) = colsums(A) . rowsums(B): no product here, whose BLAS threads would spin
    # on in this process while the next library's process is timed (NumPy's OpenBLAS:
    # the hoisted product at half speed, as if on one thread)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = float(a64.sum(axis=0) @ b64.sum(axis=1))
    scale = float(np.abs(a64).sum(axis=0) @ np.abs(b64).sum(axis=1)) or 1.0
    times = {}
    for line in done.stdout.splitlines():
        name, us, checksum = line.split()
        if abs(float(checksum) - want) > 1e-4 * scale:
            raise RuntimeError(f"{name} on {p.shape}: sum of the product {checksum}, "
                               f"expected {want}")
        times[name] = float(us)
    return times


def measure(products: list[Product], libs: dict, threads: int, rounds: int,
            reps: int) -> dict[tuple[str, str], float]:
    """(product shape, candidate) -> median microseconds."""
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        for _ in range(rounds):
            for p in products:
                for lib, where in libs.items():
                    for name, us in time_one(exe, lib, where, p, threads, reps).items():
                        samples.setdefault((p.shape, name), []).append(us)
    return {key: statistics.median(v) for key, v in samples.items()}


def table(sizes, t: int, times: dict, candidates: list[str]) -> str:
    head = "| B, H | product | shape | " + " | ".join(candidates) + " | best |"
    rows = [head, "|" + " --- |" * (len(candidates) + 4)]
    for b, h in sizes:
        for p in lstm_products(t, b, h):
            us = {c: times[p.shape, c] for c in candidates if (p.shape, c) in times}
            best = min(us, key=us.get)
            flops = 2 * p.m * p.n * p.k

            def cell(c):
                if c not in us:
                    return ""
                text = f"{us[c]:.1f} ({flops / us[c] / 1e3:.0f})"
                return f"**{text}**" if c == best else text
            rows.append(f"| {b}, {h} | {p.name} | {p.shape} | "
                        + " | ".join(cell(c) for c in candidates) + f" | {best} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.products", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="processes per cell (median)")
    parser.add_argument("--reps", type=int, default=15, help="samples in each process")
    parser.add_argument("--steps", type=int, default=35, help="T")
    parser.add_argument("--sizes", default=",".join(f"{b}x{h}" for b, h in SIZES),
                        help="BxH pairs, comma-separated (default: the suite's LSTM rows)")
    parser.add_argument("--onednn", help="path of libdnnl.so (default: the onednn wheel's)")
    parser.add_argument("--only", help="libraries to time, comma-separated")
    args = parser.parse_args(argv)
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        parser.error("needs a C++ compiler (g++ or $CXX)")
    if not re.fullmatch(r"[1-9]\d*x[1-9]\d*(,[1-9]\d*x[1-9]\d*)*", args.sizes):
        parser.error(f"--sizes takes BxH pairs such as 1x128,32x256, got {args.sizes!r}")
    if min(args.threads, args.rounds, args.reps, args.steps) < 1:
        parser.error("--threads, --rounds, --reps and --steps must be >= 1")
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    libs = libraries(args.onednn)
    if args.only:
        libs = {k: v for k, v in libs.items() if k in args.only.split(",")}
    if not libs:
        parser.error("no BLAS found (mkl, scipy-openblas32, onednn, blis)")
    products = [p for b, h in sizes for p in lstm_products(args.steps, b, h)]
    times = measure(products, libs, args.threads, args.rounds, args.reps)
    candidates = [c for c in ("mkl", "mkl-packed", "openblas", "onednn", "blis")
                  if any(key[1] == c for key in times)]
    versions = ", ".join(f"{d} {metadata.version(d)}" for d in
                         ("mkl", "scipy-openblas32", "onednn", "blis")
                         if _installed(d))
    print(f"{describe()}; {args.threads} threads; T={args.steps}; {versions}")
    print("microseconds a product, median of the processes' medians (GFLOP/s)\n")
    print(table(sizes, args.steps, times, candidates))
    return 0


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
        return True
    except metadata.PackageNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main())
