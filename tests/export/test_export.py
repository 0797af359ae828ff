"""ONNX export of every official configuration equals BasicSR's architecture (through ONNX Runtime)."""

import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tests.model.basicsr_ref import EDVRRef, randomise
from vsr.model import load_config

H, W = 8, 12


def basicsr_checkpoint(cfg, path, seed):
    ref = randomise(EDVRRef(num_feat=cfg.num_feat, num_frame=cfg.num_frame, num_extract_block=cfg.num_extract_block,
                            num_reconstruct_block=cfg.num_reconstruct_block, with_tsa=cfg.with_tsa), seed).eval()
    torch.save({"params": ref.state_dict()}, path)  # BasicSR's file layout
    return ref


@pytest.mark.parametrize("name", ["edvr-m", "edvr-m-wotsa", "edvr-l", "edvr-l-7f"])
def test_vsr_export_cli_matches_basicsr_reference(tmp_path, name):
    cfg = load_config(name)
    ckpt = tmp_path / f"{name}.pth"
    ref = basicsr_checkpoint(cfg, ckpt, seed=7)
    out = tmp_path / f"{name}.onnx"
    split = ["--split", str(tmp_path / "plan")] if name == "edvr-m" else []  # the plan with the per-frame segment
    r = subprocess.run([sys.executable, "-m", "vsr", "export", "--weights", str(ckpt), "--config", name,
                        "--height", str(H), "--width", str(W), "--out", str(out), *split],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    proto = onnx.load(out)
    ops = Counter(n.op_type for n in proto.graph.node)
    assert proto.opset_import[0].version >= 19
    assert ops["DeformConv"] == 4 and ops["DepthToSpace"] == 2
    assert all(a.s == b"CRD" for n in proto.graph.node if n.op_type == "DepthToSpace"
               for a in n.attribute if a.name == "mode")
    x = np.random.default_rng(0).random((2, cfg.num_frame, 3, H, W), dtype=np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"lr": x})[0]
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    assert got.shape == (2, 3, 4 * H, 4 * W)
    assert np.abs(got - want).max() <= 1e-4
    if split:
        from vsr.plan.executor import plan_executor
        from vsr.plan.plan import SubgraphPlan
        from vsr.plan.segments import OrtSegmentBackend

        plan = SubgraphPlan.load(tmp_path / "plan")
        assert plan.steps[0].name == "segment_features" and plan.steps[0].per_frame and plan.frame_input
        assert np.abs(plan_executor(plan, OrtSegmentBackend(threads=1)).run({"lr": x})["hr"] - want).max() <= 1e-4


def test_export_rejects_sizes_not_multiple_of_4(tmp_path):
    r = subprocess.run([sys.executable, "-m", "vsr", "export", "--weights", "random", "--config", "edvr-tiny",
                        "--height", "15", "--width", "16", "--out", str(tmp_path / "x.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "multiples of 4" in r.stderr
    assert not list(tmp_path.iterdir())


def test_a_split_folder_whose_parent_is_missing_is_one_line(tmp_path):
    """`--split /nonexist/a/b` made every missing folder above it, where an output file's missing folder is
    refused."""
    r = subprocess.run([sys.executable, "-m", "vsr", "export", "--weights", "random", "--config", "edvr-tiny",
                        "--height", "8", "--width", "8", "--out", str(tmp_path / "x.onnx"), "--split",
                        str(tmp_path / "no" / "a" / "b")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == (f"vsr: error: --split {tmp_path / 'no' / 'a' / 'b'}: no folder "
                                                      f"{tmp_path / 'no' / 'a'} to make it in"), r.stderr
    assert list(tmp_path.iterdir()) == []
