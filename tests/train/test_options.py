"""TrainOptions are checked when made: a bad value is one InputError line naming the option, the value and
what it may be."""

from __future__ import annotations

import pytest

from vsr.errors import InputError
from vsr.train import TrainOptions


def make(**kw) -> TrainOptions:
    base = dict(config="edvr-tiny", data=("clip.mp4",), out="run", iters=10)
    base.update(kw)
    return TrainOptions(**base)


def test_defaults_are_valid():
    o = make()
    assert (o.loss, o.weight_init, o.amp) == ("charbonnier", "identity", "auto")


@pytest.mark.parametrize("field, value, expect", [
    ("loss", "L1", "charbonnier, l1"),
    ("weight_init", "identiy", "identity, he, torch"),
    ("amp", "fp8", "auto, bf16, fp16, off"),
    ("val_weights", ("emma",), "ema, model"),
    ("device", "gpu", "torch device"),
])
def test_unknown_names_list_the_choices(field, value, expect):
    with pytest.raises(InputError) as e:
        make(**{field: value})
    msg = str(e.value)
    assert "\n" not in msg
    assert f"{field}={value!r}" in msg and expect in msg


@pytest.mark.parametrize("field, value", [
    ("iters", 0), ("iters", -5), ("iters", 2.5), ("batch_size", 0), ("lr_patch", 0), ("lr_patch", 6),
    ("lr", 0.0), ("lr", -1e-4), ("min_lr", -1.0), ("warmup", -1), ("grad_clip", -1.0), ("ema_decay", 1.5),
    ("seed", -1), ("video_fraction", 2.0), ("refresh_every", 0), ("segments_per_video", 0), ("holdout", 1.0),
    ("ckpt_every", 0), ("log_every", 0), ("threads", -1), ("betas", (0.9, 1.0)), ("val_every", True),
    # a mistyped --iters 1e23 trained with an ETA of 4.6e19 hours; a seed past 64 bits failed in torch, a traceback
    ("iters", 10**9 + 1), ("iters", 10**23), ("seed", 2**64),
])
def test_out_of_range_values_are_refused(field, value):
    with pytest.raises(InputError, match=f"^invalid training option {field}="):
        make(**{field: value})


@pytest.mark.parametrize("field", ["lr", "min_lr", "offset_lr_mult", "grad_clip"])
def test_an_infinite_rate_or_bound_is_refused(field):
    # --lr inf was taken: every weight NaN after the first step, the run ending with exit 0
    with pytest.raises(InputError, match=f"^invalid training option {field}=inf: must be a finite number"):
        make(**{field: float("inf")})


def test_options_that_contradict_each_other_are_refused():
    with pytest.raises(InputError, match="min_lr"):
        make(lr=1e-4, min_lr=1e-3)
    with pytest.raises(InputError, match="holdout"):
        make(val=("holdout",), holdout=0.0)
    with pytest.raises(InputError, match="--config"):
        make(config=None, init=None)
    assert make(config=None, init="w.pth").init == "w.pth"


def test_resume_conflicts_ignore_the_options_free_to_change():
    saved = make(lr=1e-3).to_dict()
    assert make(lr=1e-3, out="elsewhere", iters=99, threads=2).resume_conflicts(saved) == []
    assert make(lr=5e-4, seed=3).resume_conflicts(saved) == ["lr", "seed"]
