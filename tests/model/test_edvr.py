"""EDVR: state_dict layout of the official checkpoints, and the batched model equals BasicSR's loop."""

import re

import pytest
import torch

from tests.data import EDVR_KEYS as KEYS
from tests.model.basicsr_ref import EDVRRef, naive_modulated_deform_conv, randomise
from vsr.model import build_model, load_config
from vsr.model.dcn import deform_conv2d_reference

OFFICIAL_KEYS = {"edvr-m": "EDVR_M_x4_SR_REDS", "edvr-m-wotsa": "EDVR_M_woTSA_x4_SR_REDS",
                 "edvr-l": "EDVR_L_x4_SR_REDS", "edvr-l-7f": "EDVR_L_x4_SR_Vimeo90K"}


def read_keys(path):
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            k, shape = line.split("\t")
            out[k] = tuple(int(v) for v in re.findall(r"\d+", shape))
    return out


@pytest.mark.parametrize("name", sorted(OFFICIAL_KEYS))
def test_state_dict_matches_official_checkpoint_exactly(name):
    f = KEYS / f"{OFFICIAL_KEYS[name]}.txt"
    if not f.is_file():
        pytest.skip(f"{f} not available")
    sd = build_model(load_config(name)).state_dict()
    assert [(k, tuple(v.shape)) for k, v in sd.items()] == list(read_keys(f).items())


def test_dcn_reference_matches_definition_with_large_offsets():
    g = torch.Generator().manual_seed(1)
    n, c, h, w, co, groups = 2, 16, 9, 11, 8, 8
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    offset = torch.randn(n, 2 * groups * 9, h, w, generator=g, dtype=torch.float64) * 4  # leaves the image
    mask = torch.rand(n, groups * 9, h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(co, c, 3, 3, generator=g, dtype=torch.float64)
    bias = torch.randn(co, generator=g, dtype=torch.float64)
    ref = naive_modulated_deform_conv(x, offset, mask, weight, bias)
    got = deform_conv2d_reference(x, offset, mask, weight, bias)
    assert (offset.abs() > 3).float().mean() > 0.3  # a good share of samples leaves its pixel
    torch.testing.assert_close(got, ref, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("name,hw", [("edvr-tiny", (12, 16)), ("edvr-m", (8, 12)), ("edvr-m-wotsa", (8, 8))])
def test_batched_model_equals_basicsr_frame_loop(name, hw):
    cfg = load_config(name)
    ref = randomise(EDVRRef(num_feat=cfg.num_feat, num_frame=cfg.num_frame, num_extract_block=cfg.num_extract_block,
                            num_reconstruct_block=cfg.num_reconstruct_block, with_tsa=cfg.with_tsa), seed=3).eval()
    ours = build_model(cfg).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.rand(2, cfg.num_frame, 3, *hw, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = ours(x), ref(x)
    assert a.shape == (2, 3, 4 * hw[0], 4 * hw[1])
    assert (a - b).abs().max().item() < 1e-4


def test_the_export_op_trains_as_the_reference_does():
    """``vsr::deform_conv2d`` (the op export and a compiled model meet) has the reference's gradients, exactly."""
    from vsr.model.dcn import deform_conv2d_op, deform_conv2d_reference

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(2, 8, 6, 7, generator=g), torch.randn(2, 36, 6, 7, generator=g) * 2,
            torch.rand(2, 18, 6, 7, generator=g), torch.randn(4, 8, 3, 3, generator=g), torch.randn(4, generator=g)]
    a, b = ([t.clone().requires_grad_() for t in args] for _ in range(2))
    deform_conv2d_op(*a, 1, 1, 1, 2).square().sum().backward()
    deform_conv2d_reference(*b, 1, 1, 1).square().sum().backward()
    for x, y in zip(a, b):
        assert x.grad is not None and torch.equal(x.grad, y.grad)


def test_a_compiled_dcn_runs_the_kernel_and_an_exported_one_the_export_op(monkeypatch):
    """torch.compile of a DCN (a training forward) traces a run's DCN -- torchvision's kernel on a GPU, the
    reference here -- and torch.export (vsr's ONNX export) the export op. What decides is the flag torch.export
    sets, not ``torch.compiler.is_exporting()``: before torch 2.13 TorchDynamo answered that True under
    torch.compile too (pytorch#176347; the GPU machine's torch 2.11 sent a compiled training forward through the
    export op). That TorchDynamo cannot be stood in here (torch.compile itself asks is_exporting() and stands
    aside when it says True), so the last lines check that its answer is not what the dispatch reads."""
    from vsr.model.dcn import DCNv2Pack, exporting

    dcn = DCNv2Pack(8, 8, deformable_groups=2)
    x, feat = torch.randn(1, 8, 6, 7), torch.randn(1, 8, 6, 7)
    graphs = []

    def record(gm, inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    y = torch.compile(dcn, backend=record)(x, feat)
    traced = {str(node.target) for g in graphs for node in g.graph.nodes}
    assert graphs and not any("vsr" in t for t in traced) and any("grid_sample" in t for t in traced), traced
    assert torch.allclose(y, dcn(x, feat), atol=1e-6)
    exported = {str(node.target) for node in torch.export.export(dcn, (x, feat)).graph.nodes}
    assert any("vsr.deform_conv2d" in t for t in exported), exported
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)  # the old TorchDynamo's answer
    assert not exporting()
    monkeypatch.setattr(torch.compiler, "_is_exporting_flag", True)  # what torch.export sets
    assert exporting()
