"""Quantization-aware training simulates the deployed int8 conv: a QATConv2d gives the int8 segment's output
(same weights, same run-time scale rule) to within a few output codes, and QAT training keeps BasicSR
checkpoints and writes the quantization parameters beside them."""

from __future__ import annotations

import json

import numpy as np
import torch
from onnx import numpy_helper
from torch import nn

from tests.plan.toy_graphs import GraphBuilder
from tests.quant.int8_graphs import run_int8, write_int8_segment
from tests.train.test_trainer import clip, options  # noqa: F401  (fixture and helper)
from vsr.model.weights import read_checkpoint
from vsr.quant.fake import QATConv2d, fake_u8, prepare_qat
from vsr.train import Trainer


def test_fake_u8_saturates_and_keeps_gradients():
    x = torch.linspace(-1, 2, 50, requires_grad=True)
    y = fake_u8(x)
    assert torch.allclose(y, x, atol=3 * 1.25 / 255)  # the range covers x: only rounding
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))  # straight-through


def test_qat_conv_matches_the_int8_segment(tmp_path):
    g = GraphBuilder(6, 10, 12, seed=3)
    model = g.model([g.conv("x", 8)])
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    conv = nn.Conv2d(6, 8, 3, padding=1)
    conv.weight.data, conv.bias.data = torch.from_numpy(w.copy()), torch.from_numpy(b.copy())
    prepare_qat(conv_holder := nn.Sequential(conv))
    assert isinstance(conv_holder[0], QATConv2d)
    x = np.random.default_rng(0).random((2, 6, 10, 12), dtype=np.float32)
    path = write_int8_segment(model, x, tmp_path)
    deployed, _ = run_int8(path, x, "runtime", windows=2)  # 2nd window: scales from the 1st, as QAT's rule
    with torch.no_grad():
        simulated = conv_holder(torch.from_numpy(x)).numpy()
    step = (deployed.max() - min(deployed.min(), 0)) / 255
    assert np.abs(simulated - deployed).max() <= 3 * step


def test_qat_training_writes_basicsr_checkpoint_and_quant_parameters(clip, tmp_path):  # noqa: F811
    tr = Trainer(options(clip, tmp_path / "run", iters=2, qat=True))
    tr.run(progress=False)
    ck = read_checkpoint(tmp_path / "run" / "latest.pth")
    plain = set(Trainer(options(clip, tmp_path / "plain", iters=1)).model.state_dict())
    assert set(ck["params"]) == plain  # same keys: loads wherever EDVR weights load
    q = json.loads((tmp_path / "run" / "qat.json").read_text())
    assert q["format"] == "vsr-qat/1" and "conv_first" in q["weight_scales"]
