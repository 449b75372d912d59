"""The functions a fuzzer program defines (tests/fuzz_generate.py) and the expressions
that call them: one on [N, width] whose body is a random expression; one whose `int`
argument sizes its parameters and result, with a compile-time `if` on it and a scalar
argument given as a constant or a rank-0 tensor, its tensor taking any leading dims
(`f32[..., N, I]`); one holding a loop of its own over a
whole sequence, returning two values the caller unpacks. And, drawn on a stream of their
own (`Names.leading`), functions of leading dims: one on `f32[...]`, given a tensor of
any rank or a number; one of two `f32[..., K]` arguments sharing their leading dims,
called on vectors too; attention on `f32[..., S, D]`, its keys swapped by
`swapaxes(k, -1, -2)`. Each is defined on its first use; `expr`, which the calls'
arguments come from, is tests/fuzz_expressions.py's."""
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

    def elementwise_function(self) -> str:
        """The program's function on `f32[...]`: a tensor of any shape, or a number."""
        fn = f"{self.program.name}_e"
        if fn not in self.program.defs:
            body = self.pick(["x * sigmoid(s * x)", "tanh(s * x) + a * x",
                              "sin(x) * a + s * x * x"])
            self.program.defs[fn] = "\n".join([
                f"def {fn}(x : f32[...], s : f32 = 1.5) -> f32[...] {{",
                f"  param a : f32{self.pick(['', ' = constant(0.25)', ' = normal(0, 0.5)'])}",
                f"  return {body}", "}"])
        return fn

    def gate_function(self) -> str:
        """The program's function of two `f32[..., K]` arguments sharing their leading
        dims (none, for vectors), normalized along the last axis."""
        fn = f"{self.program.name}_n"
        if fn not in self.program.defs:
            red = self.pick(["mean", "max", "logsumexp"])
            self.program.defs[fn] = "\n".join([
                f"def {fn}(a : f32[..., K], b : f32[..., K]) -> f32[..., K] {{",
                "  param g : f32[K] = constant(1.0)",
                f"  m = {red}(b, axis = -1, keepdims = true)",
                f"  return {self.pick(['a * sigmoid(b - m) * g', 'tanh(a - m) + b * g'])}",
                "}"])
        return fn

    def attention_function(self) -> str:
        """The program's attention on `f32[..., S, D]`: queries, keys and values sharing
        their leading dims, the keys' last two axes swapped by negative axes."""
        fn = f"{self.program.name}_a"
        if fn not in self.program.defs:
            keys = self.pick(["swapaxes(k, -1, -2)", "swapaxes(k, -2, -1)"])
            self.program.defs[fn] = "\n".join([
                f"def {fn}(q : f32[..., S, D], k : f32[..., S, D], v : f32[..., S, D]) "
                "-> f32[..., S, D] {",
                f"  w = softmax((q @ {keys}) * (1.0 / sqrt(f32(D))), axis = -1)",
                "  return w @ v", "}"])
        return fn

    def form_leading(self, shape, d):
        """A call of a function of leading dims (drawn on `self.leading`); now and then
        beside a call of the same function on one more leading dim (reduced away) or
        one fewer (broadcast), so that one function serves two ranks."""
        if self.in_def or self.calls_blocked:
            return None
        kinds = ["elementwise"]
        if shape and isinstance(shape[-1], int):
            kinds.append("gate")
        if len(shape) >= 2:
            kinds.append("attention")
        kind = kinds[self.leading.randrange(len(kinds))]
        call = getattr(self, f"leading_{kind}")
        text = call(shape, d)
        if self.leading.random() < 0.5:
            if len(shape) >= (3 if kind == "attention" else 2):
                text = f"({text} + {call(shape[1:], d)})"      # one fewer, broadcast
            else:
                lead = "T" if shape[:1] == ("B",) else "B"
                wider = call((lead,) + shape, d)
                text = f"({text} + mean({wider}, axis = 0))"  # one more, reduced
            self.cover("call:two-ranks")
        return text

    def leading_elementwise(self, shape, d):
        fn = self.elementwise_function()
        if not shape and self.leading.random() < 0.6:
            arg = self.literal()
            self.cover("call:any-rank-number")
        else:
            arg = self.expr(shape, d)
            self.cover("call:any-rank")
        if self.leading.random() < 0.3:
            arg += f", s = {self.literal()}"
        return self.call_site(fn, (fn,), f"{fn}({arg})")

    def leading_gate(self, shape, d):
        fn = self.gate_function()
        self.cover("call:shared-leading-dims")
        if len(shape) == 1:
            self.cover("call:no-leading-dims")
        text = f"{fn}({self.expr(shape, d)}, {self.expr(shape, d)})"
        return self.call_site(fn, (fn, shape[-1]), text)

    def leading_attention(self, shape, d):
        fn = self.attention_function()
        self.cover("swapaxes:negative")
        if len(shape) > 2:
            self.cover("call:attention-leading-dims")
        args = ", ".join(self.expr(shape, d) for _ in range(3))
        return f"{fn}({args})"

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
