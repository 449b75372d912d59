"""A whole generated module: the model's functions (inference forward, training forward,
backward, for the generic dims and every specialization) and its tables, rendered
through templates/module.cpp.j2. The training forward is the joint graph's body, the
backward its backward block (the boundary autodiff records); what the backward reads of
the forward is saved between the two calls. A vjp graph's backward block takes the
cotangents of the float outputs (its args): they are the backward call's inputs."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import DTYPES
from ..ir.graph import (PENALTIES, Block, Graph, Value, reads, use_counts,
                        walk_ops)
from ..ir.origins import input_origins
from ..ir.shapes import Dim, TensorType, contiguous_strides, numel
from ..ops.entry import branch_bounds, call_bounds, entry, guarded_ifs, loop_steps
from ..transforms.autodiff import cotangent_names
from .cexpr import DimNames, c_float
from .interface import describe, stub
from .lower import Layout
from .plan import left_dead, plan
from .profile import Site
from .render import Access, FunctionSpec, Renderer
from .target import Target
from .templating import environment

# A model's arenas: one for inference, one for a training step, whose forward and backward
# share one memory plan (the backward's values take the slots of the forward's that are
# dead by then, the saved ones stay put), and one for a backward that cannot share it (its
# memory sized by a count the forward learns as it runs: a while's trips); the runtime
# makes as many as the spec says (ModelSpec::arenas) and generated code names them by
# index.
ARENAS = ("inference", "training", "backward")
# A dim of a declared shape made of others (T*B, T+1), in the tables as this marker and
# its text, by which the runtime knows it (model.h's TensorSpec): an input's is checked
# against its value from the dims bound before it (ModelSpec::input_shape), an output's
# is not.
DERIVED_DIM = -(10**6)


@dataclass
class Variant:
    fixed: list[tuple[int, int]]   # (index of a user dim, its value)
    infer: str                     # C++ function names; "nullptr" where there is none
    train: str = "nullptr"
    backward: str = "nullptr"


def user_dims(graph: Graph) -> list[str]:
    names: list[str] = []
    for v in graph.inputs.values():
        for d in v.type.shape:
            for s in sorted(d.symbols):
                if s not in names:
                    names.append(s)
    return names


def branch_words(graph: Graph, dims: list[str]) -> dict:
    """What each branch of `graph`'s ifs in no loop refuses where it starts (ops/entry.py,
    branch_bounds), {size: its words}, by the if's place and the branch's index: the
    words of the graph as checked, which the reference runs, for the branches the passes
    made of it (which may no longer make a value of a size, or make it elsewhere first).
    Where ifs share a place (a function's, called twice), the sizes that all of them
    make."""
    found: dict = {}
    for block in graph.blocks():
        for op in guarded_ifs(block):
            for k, branch in enumerate(op.blocks if op.loc is not None else ()):
                words = {d: text for text, d in branch_bounds(branch, dims)}
                before = found.setdefault((op.loc, k), words)
                found[(op.loc, k)] = {d: t for d, t in before.items() if d in words}
    return found


def _defined(ops: list) -> dict[int, Value]:
    out: dict[int, Value] = {}
    for op in walk_ops(Block(ops=ops)):
        for v in op.outputs:
            out[v.id] = v
    return out


class ModuleGenerator:
    def __init__(self, graph: Graph, joint: Graph | None, dtype: str,
                 specializations: list[dict[str, int]], target: Target,
                 checked: Graph | None = None):
        self.graph, self.joint, self.dtype, self.target = graph, joint, dtype, target
        self.checked = checked  # the graph as checked, before any pass (its sizes first)
        self.dims = user_dims(graph)
        self.names = DimNames(self.dims)  # one for every function: m.dyn indices agree
        self.branch_words = branch_words(checked, self.dims) if checked is not None else {}
        self.specializations = specializations
        self.saved_count = 0
        self.tapes: list[int] = []
        self.tape_aliases: dict[int, int] = {}  # (Renderer.tape_aliases)
        self.sites: list[Site] = []  # a profiled build's, every function's (profile.py)
        self.value_names: dict[int, str] = {}  # (Renderer.value_names)
        self.origins = input_origins(*(g for g in (graph, joint) if g is not None),
                                     steps=loop_steps)
        self.pack_count = 0     # pack buffers: the most any one function packs into
        self.scratch_count = 0  # scratch buffers: the most any one function needs
        self.kernels: list[str] = []  # each function's kernels (a GPU target's), in order
        # A parameter is reached through its index (it may live in another model's store,
        # shared); its offset places its optimizer state and, unshared, its values.
        self.param_index = {name: i for i, name in enumerate(graph.params)}
        self.param_offsets: dict[str, int] = {}
        total = 0
        for name, p in graph.params.items():
            self.param_offsets[name] = total
            total += numel(p.value.type.shape).value
        self.param_count = total

    def _param_access(self, graph: Graph) -> dict[int, Access]:
        return {p.value.id: Access(self.target.parameter(self.param_index[name]),
                                   _own(p.value.type), persistent=True)
                for name, p in graph.params.items()}

    def _input_access(self, graph: Graph, kept: bool = False) -> dict[int, Access]:
        """The call's inputs; `kept`: the runtime keeps them alive for the backward (a
        training forward's), so the backward reads them where they are, uncopied."""
        return {v.id: Access(self.target.input(k, self.target.ctype(v.type.dtype)),
                             _own(v.type), persistent=kept)
                for k, v in enumerate(graph.inputs.values())}

    def _cotangent_access(self, joint: Graph) -> dict[int, Access]:
        return {v.id: Access(self.target.input(k, self.target.ctype(v.type.dtype)), _own(v.type),
                             persistent=False)
                for k, v in enumerate(joint.backward.args)}

    def _prologue(self, fixed: dict[str, int]) -> list[str]:
        lines = []
        for i, name in enumerate(self.dims):
            if name in fixed:
                lines.append(f"constexpr int64_t d{i} = {int(fixed[name])};")
            else:
                lines.append(f"const int64_t d{i} = c.dims[{i}];")
            lines.append(f"(void)d{i};")
        return lines

    def functions(self, fixed: dict[str, int], suffix: str) -> tuple[list[str], dict]:
        dims = self.names
        g = self.graph
        texts, names = [], {}
        infer = FunctionSpec(f"infer{suffix}", g.body,
                             {**self._param_access(g), **self._input_access(g)},
                             [(v, self.target.output(k)) for k, v in enumerate(g.outputs.values())],
                             ARENAS.index("inference"), training=False, prologue=self._prologue(fixed),
                             stepped=stepped_only(g.body, list(g.outputs.values())))
        texts.append(self._render(dims, infer))
        names["infer"] = infer.name
        if self.joint is None:
            return texts, names
        j = self.joint
        fwd_ops, bwd_ops = j.body.ops, j.backward.ops  # the boundary autodiff recorded
        defined = _defined(fwd_ops)
        external_j = {**self._param_access(j), **self._input_access(j, kept=True)}
        grads = list(j.param_grads.values()) + list(j.input_grads.values())
        stepped = stepped_only(Block(ops=fwd_ops + bwd_ops), list(j.outputs.values()) + grads)
        wanted = set(use_counts(Block(ops=bwd_ops))) | {v.id for v in grads}  # a gradient may be a forward value
        saved = [defined.get(vid) or _input_value(j, vid) for vid in sorted(wanted)
                 if vid in defined or vid in {v.id for v in j.inputs.values()}]
        self.saved_count = max(self.saved_count, len(saved))
        results = [(v, self.target.output(k)) for k, v in enumerate(j.outputs.values())]
        results += [(v, self.target.saved(k)) for k, v in enumerate(saved)]
        train = FunctionSpec(f"train{suffix}", Block(ops=fwd_ops), external_j, results,
                             ARENAS.index("training"), training=True, prologue=self._prologue(fixed),
                             stepped=stepped, handed=len(j.outputs), role="training forward")
        train_r = self._renderer(dims, train)
        train_r.lower()
        external_b = {**self._param_access(j), **self._cotangent_access(j)}
        for k, v in enumerate(saved):
            lay = train.saved_layouts[train.result_of[v.id].id]
            external_b[v.id] = Access(f"static_cast<{self.target.ctype(v.type.dtype)}*>"
                                      f"({self.target.saved(k)})",
                                      lay)
        backward = FunctionSpec(f"backward{suffix}", Block(ops=bwd_ops), external_b,
                                [(v, self.target.output(k)) for k, v in enumerate(grads)],
                                ARENAS.index("training"), training=True, prologue=self._prologue(fixed),
                                stepped=stepped, role="backward")
        backward_r = self._renderer(dims, backward)
        backward_r.lower()
        # One plan for the pair, the backward's instructions after the forward's: what the
        # forward leaves (saved values, its outputs, which train_step reads after the
        # backward) lives to the end, and the backward reuses the rest (the stored LSTM's
        # [T, B, 4H] input product for its [T, B, 4H] gate gradients). Both functions
        # compute the same slots from the same dims, so the backward's arena is the
        # forward's, its size unchanged: unless a backward value's size is a count the
        # forward learns only as it runs, when each plans its own.
        learned = set().union(*(entry(op).sets_dims(op) for op in walk_ops(Block(ops=fwd_ops))))
        sized = [backward_r.low.values.get(vid) for vid in backward_r.owned]
        if any(d.symbols & learned for v in sized if v is not None for d in v.type.shape):
            train_r.settle(train_r.alone())
            backward.arena = ARENAS.index("backward")
            backward_r.settle(backward_r.alone())
        else:
            shared = plan(train_r.instrs + backward_r.instrs,
                          {**backward_r.low.layouts, **train_r.low.layouts},
                          train_r.results + backward_r.results, dims,
                          train_r.owned | backward_r.owned)
            train_r.settle(shared)
            backward_r.settle(shared)
            # what the forward leaves dead, and a backward handing its results to Python
            # does not touch, goes back to the system before those results are made
            kept = {train_r.root(v).id for v in train_r.results}
            train_r.given_back = left_dead(shared, train_r.owned, kept, backward_r.handed_over)
        texts += [self._text(train_r), self._text(backward_r)]
        names.update(train=train.name, backward=backward.name)
        return texts, names

    def _renderer(self, dims: DimNames, spec: FunctionSpec) -> Renderer:
        """Pack and scratch buffers are reused by every function: one model's calls run
        one at a time, and a function fills them before it reads."""
        return Renderer(self.target, dims, spec, self.tapes, [], self.sites,
                        self.tape_aliases, self.origins, self.value_names,
                        self.branch_words)

    def _render(self, dims: DimNames, spec: FunctionSpec) -> str:
        """One function's text, its memory planned alone."""
        renderer = self._renderer(dims, spec)
        renderer.lower()
        renderer.settle(renderer.alone())
        return self._text(renderer)

    def _text(self, renderer: Renderer) -> str:
        text = renderer.text()
        self.kernels.append("\n\n".join(renderer.kernels))  # beside its function's text
        self.pack_count = max(self.pack_count, len(renderer.packs))
        self.scratch_count = max(self.scratch_count, len(renderer.scratch))
        return text

    def context(self) -> dict:
        """What templates/model.cpp.j2 renders this model from."""
        texts, variants = [], []
        for i, fixed in enumerate([{}] + self.specializations):
            t, names = self.functions(fixed, f"_{i}")
            texts += t
            variants.append(Variant([(self.dims.index(k), int(v)) for k, v in fixed.items()],
                                    **names))
        g, j = self.graph, self.joint
        grads, cotangents = [], []
        if j is not None:
            grads = [(k, v) for k, v in j.param_grads.items()] + [
                (f"input:{k}", v) for k, v in j.input_grads.items()]
            if j.backward.args:
                cotangents = cotangent_names(j)
        return dict(
            model_name=g.name, ctype=self.target.ctype(self.dtype),
            functions=texts, kernels=self.kernels, variants=variants, dim_names=self.dims,
            function_names=[name for v in variants for name in (v.infer, v.train, v.backward)
                            if name != "nullptr"],
            inputs=[self._tensor_spec(k, v.type) for k, v in g.inputs.items()],
            outputs=[self._tensor_spec(k, v.type) for k, v in g.outputs.items()],
            grads=[self._tensor_spec(k, v.type) for k, v in grads],
            cotangents=[list(g.outputs).index(k) for k in cotangents],
            output_shapes=[self._shape_exprs(v.type) for v in g.outputs.values()],
            grad_shapes=[self._shape_exprs(v.type) for _, v in grads],
            input_shapes=[self._shape_exprs(v.type) for v in g.inputs.values()],
            params=[self._param_spec(name, p, [k for k, _ in grads])
                    for name, p in g.params.items()],
            param_count=self.param_count, saved=self.saved_count, tapes=len(self.tapes),
            packs=self.pack_count, scratch=self.scratch_count, arenas=len(ARENAS),
            dtype=_dtype_spec(self.dtype),
            dynamic=len(self.names.dynamic), device=self.target.device,
            profile_sites=self.sites,
            sizes=[(text, self.names.expr(d)) for text, d in self._sizes()],
            loss_tokens=g.loss_tokens,
            loss_mean_dims=None if g.loss_mean_dims is None else ",".join(g.loss_mean_dims))

    def _sizes(self) -> list[tuple[str, Dim]]:
        """What the call's dims must keep >= 0 (ops/entry.py, call_bounds): the graph's as
        checked first, in the reference's order, so that a call both refuse gets its words
        (`range(1, T)` at T = 0: "the size T - 1", not the batched product's "B*T - B"),
        then those only the prepared and differentiated graphs have."""
        ready = call_bounds([self.graph] + ([self.joint] if self.joint else []), self.dims)
        if self.checked is None:
            return ready
        first = call_bounds([self.checked], self.dims)
        return first + [b for b in ready if b[0] not in dict(first)]

    def _tensor_spec(self, name: str, t: TensorType) -> dict:
        dims = []
        for d in t.shape:
            if d.is_const:
                dims.append(d.value)
            elif len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1 \
                    and d.terms[0][0][0] in self.dims:
                dims.append(-(self.dims.index(d.terms[0][0][0]) + 1))
            else:
                dims.append(DERIVED_DIM)
        # the runtime tells a derived dim by its text, never by the marker
        texts = [str(d) if k == DERIVED_DIM else None for d, k in zip(t.shape, dims)] \
            if DERIVED_DIM in dims else None
        return {"name": name, "dtype": _dtype_spec(t.dtype), "dims": dims, "texts": texts}

    def _shape_exprs(self, t: TensorType) -> list[str]:
        return [self.names.expr(d) for d in t.shape]

    def _param_spec(self, name: str, p, grad_names: list[str]) -> dict:
        """Its initializer, place, regularizer (the strengths of its l1 and l2 penalties,
        0 for none) and the index of its gradient (-1: not trained)."""
        args = list(p.init.args) + [0.0, 0.0]
        reg = p.regularizer
        return {"name": name, "shape": [d.value for d in p.value.type.shape],
                "kind": p.init.kind, "a": c_float(args[0]), "b": c_float(args[1]),
                "offset": self.param_offsets[name],
                "grad": grad_names.index(name) if name in grad_names else -1,
                **{kind: c_float(reg.strength if reg and reg.kind == kind else 0.0)
                   for kind in PENALTIES}}


def _dtype_spec(dtype: str) -> str:
    """The runtime's `mdl::DTypeSpec` of a dtype, as a C++ initializer."""
    np_dtype = np.dtype(DTYPES[dtype].numpy)
    return f'{{"{dtype}", "{np_dtype.name}", \'{np_dtype.kind}\', {np_dtype.itemsize}}}'


def stepped_only(block: Block, results: list[Value]) -> frozenset:
    """Ids of the values that every reader in `block` (nested blocks too) reads a step at
    a time, as a `for`'s sequence, and that are none of `results`: a ragged view of
    such a value is never read past its data (backend/lower.py, Layout.valid)."""
    stepped, whole = set(), {v.id for v in results}
    for op in walk_ops(block):
        n_seq = op.attrs.get("n_seq", 0) if entry(op).repeats else 0  # a for's sequences
        for i, v in enumerate(reads(op)):
            (stepped if i < n_seq else whole).add(v.id)
    return frozenset(stepped - whole)


def _input_value(graph: Graph, vid: int) -> Value:
    return next(v for v in graph.inputs.values() if v.id == vid)


def _own(t: TensorType) -> Layout:
    return Layout(None, None, contiguous_strides(t.shape))


def generate(models: list[tuple[Graph, Graph | None, list[dict[str, int]]]],
             module_name: str, dtype: str, target: Target, vjp: bool = False,
             checked: list[Graph] | None = None) -> dict[str, str]:
    """The generated sources of one module holding `models` (graph, joint graph or None,
    specializations; one class each) for `target` (`vjp`: backwards take cotangents), and
    its type stub: {file name: text}. `checked`: each model's graph as checked, whose
    refusals of a call's dims a module words first, as the reference does."""
    contexts, interfaces = [], []
    units = itertools.count()  # each function a part of its own (templates/module.cpp.j2)
    for k, (graph, joint, specializations) in enumerate(models):
        generator = ModuleGenerator(graph, joint, dtype, specializations, target,
                                    checked[k] if checked else None)
        contexts.append(generator.context())
        contexts[-1]["functions"] = [(next(units), text) for text in contexts[-1]["functions"]]
        contexts[-1]["kernels"] = [(unit, kernels) for (unit, _), kernels
                                   in zip(contexts[-1]["functions"], contexts[-1]["kernels"])]
        interfaces.append(describe(graph, joint, vjp, specializations, generator.dims,
                                   generator.param_count, target.name, dtype))
        contexts[-1]["doc"] = interfaces[-1].doc()
    text = environment().get_template("module.cpp.j2").render(
        module_name=module_name, ctype=target.ctype(dtype), models=contexts,
        target_headers=target.headers)
    files = {target.source: text, f"{module_name}.pyi": stub(module_name, interfaces)}
    if target.kernel_source:
        files[target.kernel_source] = environment().get_template("kernels.cu.j2").render(
            module_name=module_name, models=contexts)
    return files
