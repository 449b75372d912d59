"""Buckets (MXNet's BucketingModule, seed 004): the specializations of one build share one
parameter store and one optimizer state; a call runs the code of its shapes, and training
on several buckets in turn is training one model."""
from __future__ import annotations

import numpy as np
from conftest import CHARLM_DIMS, charlm_batch

TOLERANCE = 1e-12  # f64: specialized code may order its sums differently


def test_the_specializations_are_listed(charlm64, charlm64_generic):
    assert charlm64.CharLM().specializations == [CHARLM_DIMS]
    assert charlm64.CharLMStep().specializations == []  # it has no T: the set skips it
    assert charlm64_generic.CharLM().specializations == []


def test_a_specialized_call_and_a_generic_call_agree(charlm64, charlm64_generic):
    bucketed, generic = charlm64.CharLM(seed=3), charlm64_generic.CharLM(seed=3)
    batch = charlm_batch(0, **CHARLM_DIMS)
    for training in (False, True):
        a = bucketed.forward(**batch, training=training)
        b = generic.forward(**batch, training=training)
        for name in a:
            assert np.abs(a[name] - b[name]).max() <= TOLERANCE * np.abs(b[name]).max()
    ga, gb = bucketed.backward(), generic.backward()
    assert ga.keys() == gb.keys()
    for name in ga:
        assert np.abs(ga[name] - gb[name]).max() <= TOLERANCE * max(np.abs(gb[name]).max(), 1)


def test_buckets_trained_in_turn_are_one_model(charlm64, charlm64_generic):
    """Batches of three shapes (the specialized T=6,B=3 and two generic ones) in turn: the
    bucketed model's updates equal a generic-only model's, with one Adam state."""
    bucketed, generic = charlm64.CharLM(seed=4), charlm64_generic.CharLM(seed=4)
    for m in (bucketed, generic):
        m.set_optimizer("adam", lr=0.02, clip_norm=2.0)
    shapes = [CHARLM_DIMS, {"T": 4, "B": 3}, {"T": 6, "B": 2}]
    for step in range(9):
        batch = charlm_batch(step, **shapes[step % 3])
        la = bucketed.train_step(**batch)["loss"]
        lb = generic.train_step(**batch)["loss"]
        assert abs(la - lb) <= TOLERANCE * abs(lb)
    assert bucketed.optimizer["steps"] == generic.optimizer["steps"] == 9
    for name, value in generic.params.items():
        assert np.abs(bucketed.params[name] - value).max() <= 1e-10, name
