"""The functions a fuzzer program defines (tests/fuzz_generate.py) and the expressions
that call them: one on [N, width] whose body is a random expression; one whose `int`
argument sizes its parameters and result, with a compile-time `if` on it and a scalar
argument given as a constant or a rank-0 tensor, its tensor taking any leading dims
(`f32[..., N, I]`); one holding a loop of its own over a
whole sequence, returning two values the caller unpacks. Each is defined on its first
use; `expr`, which the calls' arguments come from, is tests/fuzz_expressions.py's."""
from __future__ import annotations

from fuzz_scope import Frame, Names, Var


class Functions(Names):
    """Defines the program's functions, and draws calls of them of a given shape."""

    def function(self, width: int) -> str:
        """The program's function on [N, width] (defined on first use)."""
        fn = f"{self.program.name}_f{width}"
        if fn not in self.program.defs:
            saved, self.frames = self.frames, [Frame("def")]
            self.define(Var("x", ("N", width), fixed=True))
            result = self.expr(("N", width), 2)
            body = "\n".join("  " + line for s in self.frames[0].block for line in s.lines(0))
            self.frames = saved
            self.program.defs[fn] = (f"def {fn}(x : f32[N, {width}]) -> f32[N, {width}] {{\n"
                                     + (body + "\n" if body else "") + f"  return {result}\n}}")
        return fn

    def scaled_function(self) -> str:
        """The program's function of int and scalar arguments, on [..., N, I] to [..., N,
        n]: its parameters are sized by an argument, a compile-time `if` on `n` picks its
        activation, and `s` is a constant or a rank-0 tensor, as the caller passes it."""
        fn = f"{self.program.name}_g"
        if fn not in self.program.defs:
            lines = [f"def {fn}(x : f32[..., N, I], n : int, s : f32 = 0.5) "
                     "-> f32[..., N, n] {",
                     f"  param W : f32[I, n]{self.init((2, 2))}"]
            value = "s * (x @ W)"
            if self.rng.random() < 0.5:
                lines.append("  param c : f32[n] = constant(0.1)")
                value += " + c"
            lines.append(f"  h = {value}")
            if self.rng.random() < 0.6:
                k = self.rng.randint(2, 5)
                acts = self.rng.sample(["tanh", "sin", "sigmoid"], 2)
                lines.append(f"  if n > {k} {{ h = {acts[0]}(h) }} else {{ h = {acts[1]}(h) }}")
            if self.rng.random() < 0.5:
                lines.append("  h = h * (1.0 / I)")
            lines += ["  return h", "}"]
            self.program.defs[fn] = "\n".join(lines)
        return fn

    def encoder_function(self) -> str:
        """The program's function over a whole sequence: a loop of its own (its
        parameters shared by every step) returning two values, unpacked by the caller."""
        fn = f"{self.program.name}_r"
        if fn not in self.program.defs:
            seq = self.pick(["xs", "reversed(xs)"])
            lines = [f"def {fn}(xs : f32[T, N, I], n : int) -> (f32[N, n], f32[N, n]) {{",
                     f"  param W : f32[I, n]{self.init((2, 2))}",
                     f"  param U : f32[n, n]{self.init((2, 2))}",
                     "  h = zeros[N, n]", "  m = zeros[N, n]",
                     f"  for x in {seq} {{",
                     "    h = tanh((x @ W) + (h @ U))",
                     f"    m = {self.pick(['maximum(m, h)', '(m + h)', '(0.5 * m + 0.5 * h)'])}",
                     "  }", "  return h, m", "}"]
            self.program.defs[fn] = "\n".join(lines)
        return fn

    def form_call(self, shape, d):
        if self.in_def or self.calls_blocked or len(shape) != 2 or not isinstance(shape[1], int):
            return None
        fn = self.function(shape[1])
        return self.call_site(fn, (fn,), f"{fn}({self.expr(shape, d)})")

    def form_scaled(self, shape, d):
        if self.in_def or self.calls_blocked or len(shape) < 2 or not isinstance(shape[-1], int):
            return None
        fn = self.scaled_function()
        k = self.pick(self.widths)
        args = [self.expr(shape[:-1] + (k,), d), self.dim(shape[-1])]
        r = self.rng.random()
        if r < 0.3:
            args.append(self.literal())
            self.cover("call:scalar-constant")
        elif r < 0.5:
            args.append(f"s = {self.expr((), d)}")
            self.cover("call:scalar-tensor")
        self.cover("call:int")
        if len(shape) > 2:
            self.cover("call:leading-dims")
        return self.call_site(fn, (fn, k, shape[-1]), f"{fn}({', '.join(args)})")

    def form_encode(self, shape, d):
        if (self.in_def or self.calls_blocked or len(shape) != 2 or shape[0] != "B"
                or not isinstance(shape[1], int)):
            return None
        fn = self.encoder_function()
        k = self.pick(self.widths)
        with self.no_calls():   # a call here would come first in the text, last in counting
            xs = self.expr(("T", "B", k), d)
        call = self.call_site(fn, (fn, k, shape[1]), f"{fn}({xs}, {self.dim(shape[1])})")
        names = [self.fresh("q") for _ in range(2)]
        self.emit(f"{', '.join(names)} = {call}")
        for q in names:
            self.define(Var(q, shape))
        self.cover("call:tuple")
        return self.pick(names)
