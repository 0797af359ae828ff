"""Quantization-aware training simulates the deployed int8 conv: a QATConv2d gives the int8 segment's output
(same weights, same run-time scale rule, the same QuantConfig's weight bits and bias arithmetic) to within a few
output codes and with the same error against fp32, and QAT training keeps BasicSR
checkpoints and writes the quantization parameters beside them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from tests.plan.toy_graphs import GraphBuilder
from tests.quant.int8_graphs import run_int8, write_int8_segment
from tests.train.test_trainer import clip, options  # noqa: F401  (fixture and helper)
from vsr.model.weights import read_checkpoint
from vsr.quant.config import QuantConfig
from vsr.quant.fake import QATConv2d, fake_u8, fake_weight, prepare_qat
from vsr.train import Trainer


def test_fake_u8_saturates_and_keeps_gradients():
    x = torch.linspace(-1, 2, 50, requires_grad=True)
    y = fake_u8(x)
    assert torch.allclose(y, x, atol=3 * 1.25 / 255)  # the range covers x: only rounding
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))  # straight-through


def _conv_pair(seed: int, channels: int, size: int, config: QuantConfig):
    """A toy one-conv graph and the same conv as a QATConv2d in ``config``'s arithmetic."""
    g = GraphBuilder(channels, size, size, seed=seed)
    model = g.model([g.conv("x", channels)])
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    conv = nn.Conv2d(channels, channels, 3, padding=1)
    conv.weight.data, conv.bias.data = torch.from_numpy(w.copy()), torch.from_numpy(b.copy())
    prepare_qat(holder := nn.Sequential(conv), config)
    assert isinstance(holder[0], QATConv2d)
    return model, holder


@pytest.mark.parametrize("fixed_zero", [True, False], ids=["bias-after", "bias-in-conv"])
@pytest.mark.parametrize("isa", ["avx2", "avx512-vnni"])
def test_qat_conv_matches_the_int8_segment(tmp_path, isa, fixed_zero):
    """Each conv's output as the plan of the same QuantConfig computes it: within 3 output codes everywhere, and
    the same error against fp32 (RMS within 10 %; what QAT trains against). The default plan rounds twice (the
    sum before its bias, then with it): simulated with one rounding, its error came out 18-29 % too small."""
    config = QuantConfig(isa=isa, fixed_zero=fixed_zero)
    for seed in (3, 5):
        model, qat = _conv_pair(seed, 16, 24, config)
        x = np.random.default_rng(seed).random((2, 16, 24, 24), dtype=np.float32)
        (folder := tmp_path / f"{seed}").mkdir()
        path = write_int8_segment(model, x, folder, qmax=config.weight_qmax, fixed_zero=fixed_zero)
        deployed, _ = run_int8(path, x, "runtime", windows=2)  # 2nd window: scales from the 1st, as QAT's rule
        with torch.no_grad():
            simulated = qat(torch.from_numpy(x)).numpy()
            fp32 = F.conv2d(torch.from_numpy(x), qat[0].weight, qat[0].bias, padding=1).numpy()
        step = (deployed.max() - min(deployed.min(), 0)) / 255
        assert np.abs(simulated - deployed).max() <= 3 * step
        ratio = np.sqrt(np.mean((simulated - fp32) ** 2) / np.mean((deployed - fp32) ** 2))
        assert 0.9 <= ratio <= 1.1, (seed, ratio)


def test_qat_conv_runs_in_fp32_under_autocast():
    """Training on a GPU runs under bf16 autocast; the simulated int8 conv must not: its codes would be rounded
    in bf16 (8 bits of precision), not as the plan rounds them."""
    _, qat = _conv_pair(1, 16, 12, QuantConfig(isa="avx512-vnni"))
    x = torch.from_numpy(np.random.default_rng(1).random((1, 16, 12, 12), dtype=np.float32))
    with torch.no_grad():
        fp32 = qat(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = qat(x)
    assert auto.dtype == torch.float32 and torch.equal(auto, fp32)


def test_qat_weights_take_the_plans_bits():
    """7-bit weights for an AVX2 plan, 8-bit where the CPU has VNNI: QAT rounds them as the plan will."""
    w = torch.linspace(-1, 1, 9 * 4 * 2).reshape(2, 4, 3, 3)
    for isa, qmax in (("avx2", 63), ("avx512-vnni", 127)):
        _, qat = _conv_pair(0, 4, 6, QuantConfig(isa=isa))
        qat[0].weight.data = w.clone()
        assert qat[0].qmax == qmax
        codes = torch.unique(torch.round(fake_weight(qat[0].weight, qat[0].qmax)[0] * qmax))
        assert len(codes) == len(torch.unique(torch.round(w * qmax)))


def test_qat_training_writes_basicsr_checkpoint_and_quant_parameters(clip, tmp_path):  # noqa: F811
    tr = Trainer(options(clip, tmp_path / "run", iters=2, qat=True))
    tr.run(progress=False)
    ck = read_checkpoint(tmp_path / "run" / "latest.pth")
    plain = set(Trainer(options(clip, tmp_path / "plain", iters=1)).model.state_dict())
    assert set(ck["params"]) == plain  # same keys: loads wherever EDVR weights load
    q = json.loads((tmp_path / "run" / "qat.json").read_text())
    assert q["format"] == "vsr-qat/1" and "conv_first" in q["weight_scales"]
    assert q["bias"] == "u8 after the conv"  # the default plan's arithmetic
    assert f"|q| <= {QuantConfig().weight_qmax}" in q["weights"]  # this CPU's plans' weights
