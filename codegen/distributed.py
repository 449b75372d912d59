"""Data-parallel training on torch.distributed (gloo on CPUs, NCCL on GPUs): every rank runs
forward and backward natively on its shard of the batch, the ranks all-reduce the gradients
(one contiguous native buffer, shared with torch without a copy, in as few calls as its
size allows), and every rank applies the same native update. A cuda model's buffer is in
the GPU's memory (its `device_gradient_buffer`, through DLPack), so its gradients never
cross to the host: under NCCL each rank's GPU reduces them in place.

    import torch.distributed as dist
    from codegen.distributed import DataParallel
    dist.init_process_group("gloo")                 # torchrun sets what it reads
    model = charlm.CharLM(seed=0)
    model.set_optimizer("adam", lr=3e-3)
    dp = DataParallel(model)                         # same model everywhere, rank 0's weights
    out = dp.train_step(**my_shard_of_the_batch)

Averaging: each rank's gradient is weighted by `shard_weight=` when given, else by its
number of real tokens when the loss is a mean over them (the sum of the input
`model.loss_tokens` names: a minimized `cross_entropy`'s lengths), else by its rows along the one dim
the ranks' shards differ in (of the dims the loss is a mean over, `model.loss_mean_dims`,
where the compiler knows them), so that shards of any sizes give the update one process would
make from the whole batch, for a loss that is a mean over tokens or rows; every step also
checks that the ranks' optimizers agree. PyTorch stays optional: without it,
importing this module raises an ImportError saying how to install it.
"""
from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from .models import check_model

try:
    import torch
    import torch.distributed as dist
except ImportError:  # pragma: no cover - depends on the environment
    raise ImportError("codegen.distributed trains on torch.distributed: install PyTorch "
                      "(pip install 'mdl[distributed]', or torch==2.13.0)") from None

BUCKET = 1 << 22  # elements per all_reduce call: one call for models up to 4M weights
# Where rank r's dropout stream starts (its `rng_calls`, r * RANK_STREAM): ranks made with
# one seed drew the same masks for their shards; 2**40 training calls apart, they never meet.
RANK_STREAM = 1 << 40


class DataParallel:
    """`model` (a compiled model with its optimizer set) trained by every rank of the
    default process group on its own shard of each batch."""

    def __init__(self, model: Any):
        check_model(model, "DataParallel")
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("DataParallel needs torch.distributed.init_process_group(...) "
                               "first (under torchrun: init_process_group('gloo'))")
        self.model = model
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self._check_same_model()
        # a device model's gradients stay in its memory: the collectives take tensors there
        # (a CUDA tensor, as NCCL needs; a CPU one on the emulated device, whose memory is
        # the host's)
        self.grads = (torch.from_dlpack(model.device_gradient_buffer)
                      if getattr(model, "device", "cpu") != "cpu" else None)
        self.where = self.grads.device if self.grads is not None else torch.device("cpu")
        weights = {}
        for name, value in model.params.items():  # rank 0's weights everywhere
            tensor = torch.from_numpy(np.array(value)).to(self.where)
            dist.broadcast(tensor, src=0)
            weights[name] = tensor.cpu().numpy()
        model.set_params(weights)
        self._own_dropout_stream()

    def _own_dropout_stream(self) -> None:
        """Rank r's dropout masks from call r * RANK_STREAM on: its own, where the ranks
        share a seed (and after every rank loaded rank 0's checkpoint, its stream goes on
        where it was)."""
        self.model.rng_calls = self.model.rng_calls % RANK_STREAM + self.rank * RANK_STREAM

    def _check_same_model(self) -> None:
        """Every rank must have built the same model: its name, dtype and parameters."""
        mine = describe(self.model)
        every: list = [None] * self.world
        dist.all_gather_object(every, mine)
        for rank, theirs in enumerate(every):
            if theirs != every[0]:
                raise RuntimeError(f"rank {rank} built a different model than rank 0: "
                                   f"{_first_difference(every[0], theirs)}")

    def train_step(self, *given: Any, shard_weight: float | None = None, **inputs) -> dict:
        """Forward and backward on this rank's shard, gradients averaged over the ranks
        (weighted by `shard_weight`, else as `shard_weights` decides), the update; this shard's outputs."""
        if given:  # as the model's own train_step: inputs by name (the first was taken
            # for shard_weight, and the message then said an input was missing)
            raise TypeError(f"DataParallel.train_step takes its inputs by name "
                            f"({', '.join(f'{k}=' for k in self.model.inputs)}) and "
                            f"shard_weight= by name, got {len(given)} positional")
        calls = self.model.rng_calls
        try:
            return self._step(shard_weight, inputs)
        except BaseException:
            # a step refused counts no call, as the model's own train_step: a rank whose
            # forward_backward ran had counted it, its stream then one call ahead of the
            # others' and of a checkpoint's (a resumed run drew other masks)
            self.model.rng_calls = calls
            raise

    def _step(self, shard_weight: float | None, inputs: dict) -> dict:
        asked = shard_weight
        if shard_weight is not None:  # inf: not a weight, which every rank refuses below
            shard_weight = _weight(shard_weight)
        try:
            out, failed = self.model.forward_backward(**inputs), None
            tokens = self.model.loss_tokens  # the compiler's word, not a guess by name
            if shard_weight is None and tokens is not None:  # checked by the call: i32[B]
                shard_weight = _tokens(inputs[tokens])
        except Exception as error:  # raised on every rank below, after the gather
            out, failed = None, error
        # one small gather tells every rank every rank's weight, shapes, optimizer and
        # whether its step ran, so that all refuse what is wrong together (one rank alone
        # would leave the others waiting in a collective)
        mine = torch.tensor([np.nan if shard_weight is None else shard_weight,
                             _optimizer_hash(self.model), failed is not None,
                             *_axes(inputs, self.model)],
                            dtype=torch.float64, device=self.where)
        every = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(every, mine)
        every = [row.cpu().numpy() for row in every]
        if any(row[2] for row in every):
            self._refuse_failures(failed, "run its step")
        bad = [r for r, row in enumerate(every) if np.isinf(row[0])]
        if bad:
            rank = self.rank if self.rank in bad else bad[0]
            raise ValueError(f"shard_weight must be a finite number >= 0: rank {rank} passed "
                             + (repr(asked) if rank == self.rank else "one that is not"))
        if len({row[1] for row in every}) > 1:
            self._refuse_different_optimizers()
        weights = shard_weights(every, self.model)
        total = float(sum(weights))
        grads = self.grads  # the native buffer itself, on the device or the host
        if grads is None:
            grads = torch.from_numpy(self.model.gradient_buffer)
        if total > 0:
            grads.mul_(weights[self.rank] / total)
            for bucket in grads.split(BUCKET):  # views: reduced in place
                dist.all_reduce(bucket)
        else:  # no rank's shard counts (no real token anywhere): the whole batch's mean is
            # over nothing, a zero gradient, which one process steps too (momentum, Adam's
            # count and the regularizers move it); every rank sees the same total
            grads.zero_()
        self.model.apply_gradients()
        return out

    def _refuse_failures(self, failed: Exception | None, what: str, after: str = "") -> None:
        """Where a rank's part raised (`failed` this rank's), every rank raises: that
        rank its error again, the others saying which rank could not do `what` and why
        (and `after`); one rank raising alone would leave the others waiting in a
        collective it never joins. Nothing where every rank's part ran."""
        every: list = [None] * self.world
        dist.all_gather_object(every, None if failed is None
                               else f"{type(failed).__name__}: {failed}")
        if failed is not None:
            raise failed
        rank = next((r for r, said in enumerate(every) if said is not None), None)
        if rank is not None:
            raise RuntimeError(f"rank {rank} could not {what}: {every[rank]}{after}")

    def _refuse_different_optimizers(self) -> None:
        """Every rank must step the same optimizer (name, options, steps so far)."""
        every: list = [None] * self.world
        dist.all_gather_object(every, self.model.optimizer)
        rank = next(r for r, theirs in enumerate(every) if theirs != every[0])
        raise RuntimeError(f"rank {rank} has a different optimizer than rank 0: "
                           f"{_optimizer_difference(every[0], every[rank])}")

    def save(self, path) -> None:
        """Rank 0 writes the checkpoint; the others wait until it is complete. A save that
        fails raises on every rank (a barrier left the others waiting for ever, or until
        the group's timeout, where rank 0 caught its error and trained on)."""
        failed = None
        if self.rank == 0:
            try:
                self.model.save(path)
            except Exception as error:
                failed = error
        self._refuse_failures(failed, "save the checkpoint")

    def load(self, path) -> None:
        """Every rank loads the same checkpoint (so every rank holds the same state, but
        for its own dropout stream). A load that fails on a rank raises on every rank."""
        failed = None
        try:
            self.model.load(path)
            self._own_dropout_stream()
        except Exception as error:
            failed = error
        self._refuse_failures(failed, "load the checkpoint", "; the ranks that loaded it "
                              "now hold other weights: load one on every rank before "
                              "training on")


def describe(model: Any) -> dict:
    """What must agree between ranks: the model's class and its parameters' dtypes and
    shapes, in order."""
    return {"model": type(model).__name__,
            "params": [(name, str(v.dtype), tuple(v.shape)) for name, v in model.params.items()]}


def _first_difference(a: dict, b: dict) -> str:
    if a["model"] != b["model"]:
        return f"model {b['model']} instead of {a['model']}"
    for x, y in zip(a["params"], b["params"]):
        if x != y:
            return f"parameter {y[0]} is {y[1]}{list(y[2])}, rank 0 has {x[0]} {x[1]}{list(x[2])}"
    return f"{len(b['params'])} parameters instead of {len(a['params'])}"


def _weight(value) -> float:
    """shard_weight= as a float, or inf where it is no finite number >= 0 (NaN or a
    negative weight would corrupt every rank's update)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):  # float("2") and float(True) read
        return math.inf
    try:
        weight = float(value)
    except (TypeError, ValueError):
        return math.inf
    return weight if math.isfinite(weight) and weight >= 0 else math.inf


def _tokens(lengths: Any) -> float:
    """The sum of a `lengths` input the model took: an array or list, or a tensor (on a
    GPU too) or another DLPack object."""
    if isinstance(lengths, torch.Tensor):
        return float(lengths.sum())
    if hasattr(lengths, "__dlpack__") and not isinstance(lengths, np.ndarray):
        return float(torch.from_dlpack(lengths).sum())
    return float(np.sum(np.asarray(lengths, np.int64)))


def _axes(inputs: dict, model: Any) -> list[int]:
    """The sizes of every declared input's axes, in the model's order (-1 for an input
    missing or of another rank: as many numbers on every rank, as the gather needs)."""
    sizes = []
    for name, dims in zip(model.inputs, _input_dims(model)):
        try:
            shape = np.shape(inputs[name])
        except (KeyError, ValueError):
            shape = ()
        sizes += shape if len(shape) == len(dims) else [-1] * len(dims)
    return sizes


def _input_dims(model: Any) -> list[list[str]]:
    """Each input's declared dims (`T`, `B`, `3`), in the model's order."""
    return [[dim.strip() for dim in t[t.index("[") + 1:-1].split(",")] if "[" in t else []
            for t in model.inputs.values()]


def _declared_axes(model: Any) -> list[str]:
    """Each input axis's declared dim, in `_axes`' order."""
    return [dim for dims in _input_dims(model) for dim in dims]


def shard_weights(every: list, model: Any) -> list[float]:
    """Each rank's weight from the gathered rows [weight or NaN, optimizer, failed, axes...]: a
    rank's own (shard_weight=, or its real tokens), else, when the ranks' shards differ in
    the size of one symbolic dim only, that size (the shard's rows along it), else 1. Where
    the compiler knows the dims the loss is a mean over (`model.loss_mean_dims`), only
    those count: a mean over rows (`B`) is not changed by shards of different steps."""
    axes = np.array([row[3:] for row in every])
    differ = {dim for dim, sizes in zip(_declared_axes(model), axes.T)
              if len(set(sizes)) > 1}
    over = getattr(model, "loss_mean_dims", None)  # the compiler's word: a mean over these
    if over is not None and set(over) <= set(_declared_axes(model)):
        differ &= set(over)  # a mean of rows: shards trimmed to their own T weigh alike
    if any(np.isnan(row[0]) for row in every) and differ:
        if len(differ) > 1 or not next(iter(differ)).isidentifier():
            raise ValueError(f"the ranks' shards differ in {', '.join(sorted(differ))}: "
                             "pass shard_weight= (each shard's share of the loss's mean)")
        where = _declared_axes(model).index(next(iter(differ)))
        return [row[0] if not np.isnan(row[0]) else float(row[3 + where]) for row in every]
    return [1.0 if np.isnan(row[0]) else float(row[0]) for row in every]


def _optimizer_hash(model: Any) -> float:
    """A checksum of the optimizer's settings and steps (exact in a float64)."""
    return float(zlib.crc32(repr(model.optimizer).encode()))


def _optimizer_difference(a: dict | None, b: dict | None) -> str:
    if a is None or b is None or a["name"] != b["name"]:
        return f"{'none' if b is None else b['name']} instead of " + \
            f"{'none' if a is None else a['name']}"
    key = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
    return f"{key} {b.get(key)!r}, rank 0 has {key} {a.get(key)!r}"
