"""Random calls into a generated module, to find the ones that crash the process instead of
raising: every method and property of a model class, given random arguments that are
often nearly right (arrays of the declared shapes in other dtypes, strides, byte orders,
sizes 0 and 1, lengths out of range) and sometimes nothing like it (None, str, nested
lists, NumPy scalars, object and structured arrays, huge ints). An exception is what a
bad call should get; a signal or an abort is a bug (tests/test_module_calls.py).

    python3 tests/fuzz_calls.py MODULE_PATH MODULE_NAME CALLS SEED [ONLY] [--threads K]

runs the calls in this process and prints each before making it, so the last line a
crashed child printed names the call that crashed it; a list of call numbers after the
seed makes only those calls, to find the few a crash needs. With --threads K, K threads
make calls on the same model instances at once (a deadlock shows with --timeout)."""
from __future__ import annotations

import argparse
import copy
import faulthandler
import importlib.util
import pickle
import random
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.bool_, np.uint32,
          np.float16, np.complex64]


class Earlier:
    """An input to be an earlier call's output (the k-th kept, counted from the latest):
    on a device model with outputs_on_device, a DeviceArray read in place."""

    def __init__(self, k: int):
        self.k = k


class Calls:
    def __init__(self, module, rng: random.Random, folder: Path):
        self.module, self.rng, self.folder = module, rng, folder
        self.results: list = []  # the latest calls' outputs
        self.models = [cls(seed=0) for cls in self._classes()]
        # and one of each class on the first one's parameters, where they can share them:
        # calls on either must leave the other working
        for cls in self._classes():
            try:
                self.models.append(cls(seed=1, params=self.models[0]))
            except (TypeError, ValueError):
                pass

    def sharing(self, rng: random.Random, folder: Path) -> Calls:
        """Calls of their own (from `rng`) on these same model instances: another thread's."""
        other = Calls.__new__(Calls)
        other.module, other.rng, other.folder, other.models = self.module, rng, folder, self.models
        other.results = []
        folder.mkdir()
        return other

    def _classes(self) -> list:
        return [v for k, v in vars(self.module).items()
                if isinstance(v, type) and k not in ("DeviceArray", "_Model")]

    def junk(self):
        """Something no argument takes, or nearly takes."""
        r = self.rng
        return r.choice([
            None, "x", b"x", 3, -1, 2 ** 70, 1.5, float("nan"), True, [1, 2], [[1], [2, 3]],
            {"a": 1}, np.float32(1), np.int64(7), np.array(3), np.array([], np.float32),
            np.array(["a", "b"]), np.array([object(), 1], dtype=object),
            np.zeros(3, [("a", "f4"), ("b", "i4")]), np.ma.masked_array([1.0, 2.0]),
            memoryview(b"abcd"), np.zeros((2, 0, 3), np.float32), object(),
        ])

    def array(self, shape: list[int], dtype) -> np.ndarray:
        """An array of `shape` (perhaps changed) and `dtype` (perhaps another): random values,
        perhaps strided, reversed, read-only, byte-swapped or Fortran-ordered."""
        r = self.rng
        if r.random() < 0.15:
            dtype = r.choice(DTYPES)
        if r.random() < 0.15 and shape:
            shape = list(shape)
            shape[r.randrange(len(shape))] = r.choice([0, 1, 2, 7])
        if r.random() < 0.05:
            shape = shape + [1]
        values = np.asarray(np.random.default_rng(r.randrange(2 ** 32)).normal(0, 3, shape))
        if np.dtype(dtype).kind in "iub":
            values = np.asarray(np.rint(values))  # a ufunc makes a rank-0 array a scalar
            if r.random() < 0.3:
                values[...] = r.choice([0, 1, 95, 96, -1, 10 ** 6])
        a = np.asarray(values.astype(dtype))
        trick = r.randrange(7)
        if trick == 0 and a.ndim:
            a = np.repeat(a, 2, axis=0)[::2]
        elif trick == 1 and a.ndim:
            a = a[::-1]
        elif trick == 2:
            a.flags.writeable = False
        elif trick == 3 and a.dtype.itemsize > 1:
            a = a.astype(a.dtype.newbyteorder())
        elif trick == 4:
            a = np.asfortranarray(a)
        return a

    def inputs(self, model) -> dict:
        """Inputs of `model`'s declared types for random dims, perhaps one missing, extra or
        replaced by junk."""
        r = self.rng
        dims: dict[str, int] = {}
        out = {}
        for name, text in model.inputs.items():
            dtype = {"f32": np.float32, "f64": np.float64, "i32": np.int32,
                     "bool": np.bool_}[text.split("[")[0]]
            shape = []
            if "[" in text:
                for d in text[text.index("[") + 1:-1].split(", "):
                    if d.isdigit():
                        shape.append(int(d))
                    else:
                        shape.append(dims.setdefault(d, r.choice([0, 1, 1, 2, 3, 5])))
            out[name] = self.array(shape, dtype)
            if name == "lengths" and r.random() < 0.7 and "T" in dims:
                out[name] = np.full(shape, r.choice([0, dims["T"], dims["T"] + 1]), np.int32)
        roll = r.random()
        if roll < 0.05 and out:
            out.pop(r.choice(list(out)))
        elif roll < 0.1:
            out["extra"] = self.junk()
        elif roll < 0.2 and out:
            out[r.choice(list(out))] = self.junk()
        elif roll < 0.35 and out:
            out[r.choice(list(out))] = Earlier(r.randrange(8))
        return out

    def resolve(self, values: dict) -> dict:
        """`values` with each Earlier replaced by the output it names, if there is one."""
        kept = self.results
        return {k: kept[-1 - v.k % len(kept)] if isinstance(v, Earlier) and kept else
                None if isinstance(v, Earlier) else v for k, v in values.items()}

    def keep(self, outputs: dict) -> dict:
        self.results = (self.results + list(outputs.values()))[-16:]
        return outputs

    def call(self):
        """One random call: (what it is, a function making it). Every random choice is
        made here, so that leaving calls out (to find which ones a crash needs) does not
        change the others."""
        r = self.rng
        m = r.choice(self.models)
        model = type(m).__name__
        kind = r.randrange(16)
        if kind < 5:
            x = self.inputs(m)
            training = r.choice([False, True, True, "yes", 1, None])
            return (f"{model}.forward({describe(x)}, training={training!r})",
                    lambda: self.keep(m.forward(**self.resolve(x), training=training)))
        if kind < 7:
            x = self.inputs(m)
            optimizer = (r.choice(["sgd", "adam"]), r.choice([0.1, 1e-3, 10.0])) \
                if r.random() < 0.8 else None
            return (f"{model}.set_optimizer{optimizer}, train_step({describe(x)})",
                    lambda: (optimizer and m.set_optimizer(optimizer[0], lr=optimizer[1]),
                             self.keep(m.train_step(**self.resolve(x)))))
        if kind == 7:
            cotangents = {} if r.random() < 0.8 else {"logits": self.junk()}
            if m.cotangents and r.random() < 0.9:  # a vjp build's: arrays of random shapes
                cotangents = {k: self.array([r.choice([1, 2, 3])] * r.randrange(4), np.float32)
                              for k in m.cotangents if r.random() < 0.9}
            return f"{model}.backward({describe(cotangents)})", lambda: m.backward(**cotangents)
        if kind == 8:
            x = self.inputs(m)
            fill = r.choice([None, None, 0.0, np.nan, 1e30])

            def steps():
                m.forward_backward(**x)
                if fill is not None:
                    m.gradient_buffer[...] = fill
                m.apply_gradients()
            return f"{model}.forward_backward({describe(x)}), buffer = {fill}, apply", steps
        if kind == 9:
            name = r.choice(list(m.params) + ["nope"])
            shape = list(m.params[name].shape) if name in m.params else [2]
            value = self.array(shape, np.float32) if r.random() < 0.8 else self.junk()
            values = {name: value} if r.random() < 0.9 else value
            return (f"{model}.set_params({name!r}: {describe({'v': value})})",
                    lambda: m.set_params(values))
        if kind == 10:
            options = {k: self.junk() if r.random() < 0.3 else v for k, v in
                       r.choice([{"lr": 0.1, "momentum": 0.9}, {"lr": 0.01, "clip_norm": 1.0},
                                 {"lr": 0.01, "beta1": 0.5, "eps": 1e-8}]).items()}
            name = r.choice(["sgd", "adam", "x", 3])
            return (f"{model}.set_optimizer({name!r}, {options!r})",
                    lambda: m.set_optimizer(name, **options))
        if kind == 11:
            path = self.folder / f"{r.randrange(3)}.npz"
            if r.random() < 0.5:
                return f"{model}.save({path.name})", lambda: m.save(path)
            garbage = bytes(r.randrange(256) for _ in range(r.randrange(64))) \
                if r.random() < 0.2 else None
            return (f"{model}.load({path.name}{', garbage' if garbage else ''})",
                    lambda: (garbage and path.write_bytes(garbage), m.load(path)))
        if kind == 12:
            attribute = r.choice(["rng_calls", "lr", "outputs_on_device"])
            value = self.junk() if r.random() < 0.4 else r.choice([0, 5, 0.5, True, False])
            return f"{model}.{attribute} = {value!r}", lambda: setattr(m, attribute, value)
        if kind == 13 and r.random() < 0.4:
            return self.copies(m, model)
        if kind == 13:
            other = r.choice(self.models + [self.junk()])
            seed = r.choice([0, self.junk()])
            return (f"{model}(seed={seed!r}, params={type(other).__name__})",
                    lambda: type(m)(seed=seed, params=other))
        if kind == 14:
            if r.random() < 0.3:  # views of the weights, kept as results: later inputs too
                def views():
                    self.results = (self.results + list(m.device_params.values()))[-16:]
                return f"{model}.device_params kept", views
            value = self.array([2, 3], np.float32) if r.random() < 0.5 else self.junk()
            return f"{model}.to_device({describe({'v': value})})", lambda: m.to_device(value)
        if r.random() < 0.5:
            def read_results():
                for v in self.results:  # NumPy arrays, or DeviceArrays read back
                    _ = (np.asarray(v.numpy() if hasattr(v, "numpy") else v), v.shape, v.dtype,
                         repr(v), np.from_dlpack(v) if hasattr(v, "__dlpack__") else None)
            return "the kept outputs read", read_results
        return f"{model} properties", lambda: (
            m.params, m.inputs, m.cotangents, m.specializations, m.cuda_graphs, m.optimizer,
            m.device, m.rng_calls, m.shared)


    def copies(self, m, model: str):
        """A copy (copy.deepcopy or pickle) takes the model's place in the list, so later
        calls make it theirs; or the model takes a state (another model's, or junk)."""
        r = self.rng
        at = self.models.index(m)
        way = r.choice(["deepcopy", "pickle", "state", "junk state"])
        other = r.choice(self.models)
        junk = r.choice([self.junk(), (self.junk(), False), ({"format": self.junk()}, False)])

        def make():
            if way == "deepcopy":
                self.models[at] = copy.deepcopy(m)
            elif way == "pickle":
                self.models[at] = pickle.loads(pickle.dumps(m))
            else:
                m.__setstate__(other.__reduce__()[2] if way == "state" else junk)
        return f"{model} {way} ({type(other).__name__})", make


def describe(x: dict) -> str:
    return ", ".join(f"{k}=earlier output {v.k}" if isinstance(v, Earlier) else
                     f"{k}={getattr(v, 'dtype', type(v).__name__)}"
                     f"{list(getattr(v, 'shape', []))}" for k, v in x.items())


def say(text: str) -> None:
    print(text, flush=True)


def make_calls(fuzz: Calls, calls: int, only: set[int] | None, tag: str = "") -> int:
    """Draws `calls` calls and makes them (those in `only`, if given); how many raised."""
    raised = 0
    for k in range(calls):
        text, make = fuzz.call()
        if only is not None and k not in only:
            continue
        say(f"{tag}{k}: {text}")
        try:
            make()
        except Exception as e:  # noqa: BLE001 -- raising is what a bad call should do
            raised += 1
            say(f"    {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return raised


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("name")
    parser.add_argument("calls", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("only", nargs="?", help="comma-separated call numbers: make only "
                        "those (the others are drawn, not made)")
    parser.add_argument("--threads", type=int, default=1, help="threads making calls on the "
                        "same models at once, each its own (seeded) calls")
    parser.add_argument("--timeout", type=float, default=0, help="seconds after which every "
                        "thread's stack is printed and the process exits 1: a deadlock")
    args = parser.parse_args(argv)
    only = {int(k) for k in args.only.split(",")} if args.only else None
    if args.timeout:
        faulthandler.dump_traceback_later(args.timeout, exit=True)
    spec = importlib.util.spec_from_file_location(args.name, args.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as folder:
        first = Calls(module, random.Random(args.seed), Path(folder))
        fuzzers = [first] + [first.sharing(random.Random(f"{args.seed}/{k}"), Path(folder) / str(k))
                             for k in range(1, args.threads)]
        raised = [0] * args.threads

        def run(k: int) -> None:
            raised[k] = make_calls(fuzzers[k], args.calls, only,
                                   f"[{k}] " if args.threads > 1 else "")
        threads = [threading.Thread(target=run, args=(k,)) for k in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        say(f"done: {args.calls * args.threads} calls, {sum(raised)} raised")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
