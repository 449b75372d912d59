"""The emitter every op's ONNX rule writes through: one `OnnxGraph` per ONNX graph (the
model's, and each `Loop` body or `If` branch), all drawing fresh names from one pool so
that a name is never used twice anywhere in the model, as ONNX requires of nested
graphs. A subgraph reads the values of the graphs around it by name (ONNX's outer-scope
references), as an mdl block reads the values of enclosing blocks.

What a rule (`extra["onnx"]` of an op's entry, codegen/ops/entry.py) may ask of `g`:
- `g.op(type, *inputs, **attrs) -> name`, `g.ops(type, inputs, n, **attrs) -> names`: a
  node (its attributes as onnx.helper.make_node takes them);
- `g.const(value, dtype)`: a constant of an mdl dtype or "i64"; `g.ints(values)`: int64[n];
- `g.dim(d)`: int64[1] holding a Dim's value at run time (symbols read from the shapes of
  the model's inputs, specialized dims folded); `g.dims(shape)`: int64[rank];
  `g.scalar(d)`: int64[]; `g.size(x, axis)`: int64[1], the size of a tensor's axis;
- `g.dtype(dtype)`: the ONNX element type of an mdl dtype (Cast's `to`);
- `g.isnan(x)`: true where x is NaN (ONNX's IsNaN and IsInf are not used: `isnan`);
- `g.block(block, args) -> names`: a block's ops emitted here, its args bound to `args`;
- `g.subgraph(name, [(hint, dtype, rank)]) -> (child, arg names)` and
  `child.graph(outputs, types) -> GraphProto`: a nested graph for Loop or If
  (`child.carry(trip, args, results)`: a Loop body's carried values, each reading its arg);
- `g.fail(message)`: the op has no faithful ONNX form (raised as the op's error).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..ir.graph import Block, Op, Value
from ..ir.shapes import Dim

try:  # the optional extra; codegen/export/__init__.py says how to get it
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover - reported by export_onnx before any use
    onnx = None

ELEMENT = {"f32": "FLOAT", "f64": "DOUBLE", "i32": "INT32", "bool": "BOOL", "i64": "INT64"}
NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "bool": np.bool_,
         "i64": np.int64}


class NoOnnx(Exception):
    """An op has no faithful ONNX form; the exporter reports it at the op's line."""


def element(dtype: str) -> int:
    return getattr(TensorProto, ELEMENT[dtype])


class Names:
    """The pool every graph of one model draws its names from: readable (the .mdl
    variable's name), each used once."""

    def __init__(self, reserved):
        self.used = set(reserved)

    def fresh(self, base: str) -> str:
        base = re.sub(r"[^\w/.]", "_", base) or "v"
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


class Root:
    """What every graph of a model shares: names, and the model-level values rules ask
    for (constants and run-time dims are made once, in the model's graph, and read by
    name from any subgraph)."""

    def __init__(self, names: Names, bindings: dict, fixed: dict[Any, int]):
        self.names = names
        self.bindings = bindings        # symbol -> (input name, axis)
        self.fixed = fixed              # symbol -> size (--specialize)
        self.types: dict[str, Any] = {}  # ONNX name -> the TensorType of the mdl value
        self.graph: OnnxGraph | None = None
        self.consts: dict[tuple, str] = {}
        self.dims: dict[Dim, str] = {}


class OnnxGraph:
    def __init__(self, root: Root, parent: OnnxGraph | None = None, name: str = "main"):
        self.root = root
        self.parent = parent
        self.name = name
        self.nodes: list = []
        self.inputs: list = []
        self.env: dict[int, str] = {}   # value id -> ONNX name, for values of this graph
        self.made: dict[tuple, list[str]] = {}  # the nodes made here, for reuse
        self.hint = "v"                 # the base of fresh names while an op is emitted

    # ---- names of mdl values ---------------------------------------------------------
    def name_of(self, v: Value) -> str:
        g = self
        while g is not None:
            if v.id in g.env:
                return g.env[v.id]
            g = g.parent
        raise KeyError(f"no ONNX name for {v!r}")

    def bind(self, v: Value, name: str) -> None:
        self.env[v.id] = name
        self.root.types.setdefault(name, v.type)

    # ---- nodes -------------------------------------------------------------------------
    def ops(self, op_type: str, inputs: list[str], n: int = 1, **attrs) -> list[str]:
        """A node's outputs; the same node (type, inputs, attributes) made before, here or
        in a graph around this one, is reused: rules ask for a sequence's mask or a dim
        as often as they need it, and the graph holds it once."""
        key = None
        if op_type != "Identity" and not any(isinstance(v, onnx.GraphProto)
                                             for v in attrs.values()):
            key = (op_type, tuple(inputs), n, repr(sorted(attrs.items())))
            g = self
            while g is not None:
                if key in g.made:
                    return g.made[key]
                g = g.parent
        outs = [self.root.names.fresh(self.hint) for _ in range(n)]
        node_name = self.root.names.fresh(f"{self.hint}/{op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=node_name,
                                           **attrs))
        if key is not None:
            self.made[key] = outs
        return outs

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        if op_type == "Reshape":  # a 0 in the shape is a dim of 0 (a batch of none), not
            attrs.setdefault("allowzero", 1)  # "the input's dim here", ONNX's default
        return self.ops(op_type, list(inputs), 1, **attrs)[0]

    def isnan(self, x: str) -> str:
        """True where `x` is NaN, as `x != x`. Not ONNX's IsNaN or IsInf: OpenVINO 2026.4
        (CPU) computes those of a constant (a parameter's) once and gives a later call
        another value's memory in their place."""
        return self.op("Not", self.op("Equal", x, x))

    def where(self, cond: str, a: str, b: str, of_bools: bool) -> str:
        """`a` where `cond`, else `b`; of bools `Or(And(cond, a), And(Not(cond), b))`:
        onnxruntime (1.32, CPU) has no Where of bools and refuses the file."""
        if not of_bools:
            return self.op("Where", cond, a, b)
        return self.op("Or", self.op("And", cond, a),
                       self.op("And", self.op("Not", cond), b))

    def fail(self, message: str):
        raise NoOnnx(message)

    @staticmethod
    def dtype(dtype: str) -> int:
        return element(dtype)

    # ---- constants and dims (made in the model's graph) --------------------------------
    def const(self, value, dtype: str) -> str:
        with np.errstate(over="ignore"):  # -D S=1e300 in f32 is inf, as the module's is
            array = np.asarray(value, NUMPY[dtype])
        key = (dtype, array.shape, array.tobytes())
        top = self.root.graph
        if key not in top.root.consts:
            tensor = numpy_helper.from_array(array)
            base = "const" if array.ndim else f"c{_number(array)}"
            name = top.root.names.fresh(base)
            top.nodes.append(helper.make_node("Constant", [], [name], name=name,
                                              value=tensor))
            top.root.consts[key] = name
        return top.root.consts[key]

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), np.int64), "i64")

    def dim(self, d: Dim) -> str:
        d = Dim.of(d)
        if d.is_const:
            return self.ints([d.value])
        top = self.root.graph
        cache = self.root.dims
        if d in cache:
            return cache[d]
        total = None
        for monomial, coeff in d.terms:
            term = None if coeff == 1 and monomial else top.ints([coeff])
            for symbol in monomial:
                factor = top._symbol(symbol)
                term = factor if term is None else top._at(str(d), "Mul", term, factor)
            total = term if total is None else top._at(str(d), "Add", total, term)
        cache[d] = total
        return total

    def _symbol(self, symbol) -> str:
        if symbol in self.root.fixed:
            return self.ints([self.root.fixed[symbol]])
        if symbol not in self.root.bindings:
            raise NoOnnx(f"the size {symbol} is known only while the model runs "
                         "(a while loop's trip count or a checkpoint's segments)")
        key = Dim.of(symbol)
        if key not in self.root.dims:
            source, axis = self.root.bindings[symbol]
            self.root.dims[key] = self._at(str(symbol), "Shape", source, start=axis,
                                           end=axis + 1)
        return self.root.dims[key]

    def _at(self, hint: str, op_type: str, *inputs: str, **attrs) -> str:
        saved, self.hint = self.hint, hint
        try:
            return self.op(op_type, *inputs, **attrs)
        finally:
            self.hint = saved

    def dims(self, shape) -> str:
        shape = [Dim.of(d) for d in shape]
        if all(d.is_const for d in shape):
            return self.ints([d.value for d in shape])
        if len(shape) == 1:
            return self.dim(shape[0])
        return self.op("Concat", *[self.dim(d) for d in shape], axis=0)

    def scalar(self, d) -> str:
        d = Dim.of(d)
        if d.is_const:
            return self.const(d.value, "i64")
        return self.op("Squeeze", self.dim(d), self.ints([0]))

    def size(self, x: str, axis: int) -> str:
        return self.op("Shape", x, start=axis, end=axis + 1)

    # ---- blocks and subgraphs -----------------------------------------------------------
    def block(self, block: Block, args: list[str]) -> list[str]:
        """Emit a block's ops into this graph, its args bound to `args`; its results."""
        for v, name in zip(block.args, args):
            self.bind(v, name)
        for op in block.ops:
            self.emit(op)
        return [self.name_of(v) for v in block.results]

    def emit(self, op: Op) -> None:
        from ..ops.entry import entry
        rule = entry(op).extra.get("onnx")
        if rule is None:
            raise NoOnnx(f"`{op.prim}` has no ONNX form")
        self.hint = next((v.hint for v in op.outputs if v.hint), op.prim)
        outs = rule(self, op, [self.name_of(v) for v in op.inputs])
        outs = [outs] if isinstance(outs, str) else list(outs)
        for v, name in zip(op.outputs, outs, strict=True):
            self.bind(v, name)

    def subgraph(self, name: str, inputs: list[tuple[str, str, int]]) -> tuple[OnnxGraph,
                                                                               list[str]]:
        """A nested graph whose inputs are (name hint, dtype, rank) triples (sizes left
        unknown); it and their names."""
        child = OnnxGraph(self.root, self, self.root.names.fresh(name))
        names = []
        for hint, dtype, rank in inputs:
            n = self.root.names.fresh(hint)
            child.inputs.append(helper.make_tensor_value_info(n, element(dtype), [None] * rank))
            names.append(n)
        return child, names

    def carry(self, trip: str, args: list[str], results: list[str]) -> list[str]:
        """A Loop body's new values of its carried `args` (this graph's inputs): `results`,
        except that one whose arg the body never reads becomes `Where(trip < 0, arg,
        result)`, never taken (`trip` counts from 0) but reading it. OpenVINO (2026.4, CPU)
        drops a body input nobody reads, and the initial value with it: a Loop of no trips
        then gives zeros for that value, or fails its shape inference, where ONNX gives
        the initial value (a `while` whose body overwrites its state, its condition false
        at the start)."""
        read = reads(self.nodes)
        bools = {i.name for i in self.inputs if i.type.tensor_type.elem_type == element("bool")}
        out = []
        for arg, result in zip(args, results, strict=True):
            if arg not in read and arg != result:
                never = self._at(trip, "Less", trip, self.const(0, "i64"))
                hint, self.hint = self.hint, result
                result = self.where(never, arg, result, arg in bools)
                self.hint = hint
            out.append(result)
        return out

    def graph(self, outputs: list[str], types: list) -> Any:
        """This subgraph as a GraphProto with `outputs`, of the TensorTypes `types` (rank
        given, sizes left unknown): each one a value made by this graph's own nodes, once
        (an outer value or an input repeated as an output goes through an Identity, which
        every runtime accepts)."""
        made = {o for node in self.nodes for o in node.output}
        seen, infos = set(), []
        for name, t in zip(outputs, types, strict=True):
            if name not in made or name in seen:
                name = self._at(name, "Identity", name)
            seen.add(name)
            infos.append(helper.make_tensor_value_info(name, element(t.dtype),
                                                       [None] * t.rank))
        return helper.make_graph(live(self.nodes, seen), self.name, self.inputs, infos)


def live(nodes: list, outputs) -> list:
    """The `nodes` that `outputs` need, in their order: a rule makes what a step might
    need (each sequence's step, read or not), and a Loop body runs its nodes every trip."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if needed.intersection(node.output):
            kept.append(node)
            needed |= reads([node])
    return kept[::-1]


def reads(nodes) -> set[str]:
    """The names `nodes` read, in the graphs nested in them too (ONNX's outer-scope
    references)."""
    out: set[str] = set()
    for node in nodes:
        out.update(node.input)
        for a in node.attribute:
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                out |= reads(g.node) | {o.name for o in g.output}
    return out


def _number(array: np.ndarray) -> str:
    value = array.item()
    text = repr(value).replace("-", "m").replace(".", "_")
    return text if len(text) <= 12 else "const"
