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


# ---- vsr export's own rules: checked up front, published last ------------------------------------------------------

TINY = ["export", "--weights", "random", "--config", "edvr-tiny", "--height", "16", "--width", "16"]


def listing(folder) -> dict:
    """Every entry under ``folder`` (links not followed): its kind, and a file's bytes."""
    import os

    out = {}
    for p in sorted(folder.rglob("*")):
        out[str(p.relative_to(folder))] = ("link", os.readlink(p)) if p.is_symlink() else \
            ("dir",) if p.is_dir() else ("file", p.read_bytes())
    return out


def _dangling(d):
    (d / "dang.onnx").symlink_to(d / "nowhere.onnx")
    return ["--out", d / "dang.onnx"]


def _link_to_a_file(d):
    (d / "victim.onnx").write_bytes(b"mine")
    (d / "m.onnx").symlink_to(d / "victim.onnx")
    return ["--out", d / "m.onnx", "--overwrite"]


def _unwritable(folder: str):
    from pathlib import Path

    from vsr.files import not_writable

    return pytest.mark.skipif(not Path(folder).is_dir() or not_writable(Path(folder)) is None,
                              reason=f"{folder} is writable here")


def case(name, build, words, marks=()):
    return pytest.param(build, words, id=name, marks=marks)


REFUSED = [
    case("qdq with split", lambda d: ["--out", d / "c.onnx", "--precision", "int8", "--qdq", "--split", d / "qplan"],
         "--qdq and --split are two different int8 models"),
    case("split is out", lambda d: ["--out", d / "x.onnx", "--split", d / "x.onnx"], "is the output"),
    case("out inside split", lambda d: ["--out", d / "p" / "m.onnx", "--split", d / "p"], "inside the output folder"),
    case("split unwritable", lambda d: ["--out", d / "m.onnx", "--split", "/sys/plan"],
         "--split folder is not writable: /sys", marks=_unwritable("/sys")),
    case("out unwritable", lambda d: ["--out", "/sys/a.onnx"], "--out folder is not writable: /sys",
         marks=_unwritable("/sys")),
    case("dangling link", _dangling, "it is a symbolic link"),
    case("link with overwrite", _link_to_a_file, "it is a symbolic link"),
    case("int8 with nothing int8", lambda d: ["--out", d / "m.onnx", "--precision", "int8", "--int8-calibration",
                                              d / "nonexist"], "--precision int8 needs --split DIR"),
    case("calibration without int8", lambda d: ["--out", d / "m.onnx", "--split", d / "p", "--int8-calibration", d],
         "--int8-calibration needs --precision int8"),
    case("missing calibration", lambda d: ["--out", d / "m.onnx", "--split", d / "p", "--precision", "int8",
                                           "--int8-calibration", d / "nonexist"], "nonexist: no such folder"),
    case("per-window without split", lambda d: ["--out", d / "m.onnx", "--per-window-features"],
         "--per-window-features needs --split DIR"),
    case("int8 scales", lambda d: ["--out", d / "m.onnx", "--precision", "int8", "--split", d / "p", "--int8-scales",
                                   "exact"], "--int8-scales is chosen where a plan runs"),
    case("empty out", lambda d: ["--out", ""], "--out is empty"),
    case("out as typed", lambda d: ["--out", "./case//m.txt"], "got ./case//m.txt"),
]


@pytest.mark.parametrize("build, words", REFUSED)
def test_a_refusal_is_one_line_before_anything_loads_and_nothing_is_written(tmp_path, build, words):
    """Issue (export audit) 1-5, 7: a combination that makes no sense, an option that would do nothing, an output
    that cannot or must not be written: one line, exit 2, before the model loads (no random-weights warning), and
    the folder as it was: the model used to be written before the Q/DQ rewrite, the plan or the folder's check
    failed (left behind), and a symbolic link at --out was replaced or written through."""
    d = tmp_path / "case"
    d.mkdir()
    args = [str(a) for a in build(d)]
    before = listing(tmp_path)
    r = subprocess.run([sys.executable, "-m", "vsr", *TINY, *args], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("vsr: error: "), r.stderr
    assert words in r.stderr, r.stderr
    assert listing(tmp_path) == before


def test_a_height_not_a_multiple_of_4_is_refused_before_the_model_loads(tmp_path):
    r = subprocess.run([sys.executable, "-m", "vsr", *TINY[:5], "--height", "15", "--width", "16", "--out",
                        str(tmp_path / "x.onnx")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "multiples of 4" in r.stderr, r.stderr


def test_a_stop_after_the_model_is_exported_publishes_nothing(tmp_path):
    """The model was written to --out first, then the plan made: a stop (or a failure) while the plan was made
    left a model without its plan.  Now both are made under temporary names and published together."""
    import os
    import signal
    import time

    p = subprocess.Popen([sys.executable, "-m", "vsr", *TINY, "--out", "c.onnx", "--precision", "int8", "--split",
                          "plan"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the model is whole (under --out, or its temporary name once renamed from the exporter's .part)
        while p.poll() is None and not any(n == "c.onnx" or (n.startswith(".c.onnx.vsr-partial-") and
                                                               not n.endswith(".part")) for n in os.listdir(tmp_path)):
            time.sleep(0.02)
        assert p.poll() is None, "the export ended before it could be stopped"
        p.send_signal(signal.SIGTERM)  # (Ctrl-C's path; a test session may run with SIGINT ignored)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_what_export_prints_is_escaped_and_a_qdq_model_has_the_users_permissions(tmp_path):
    """A file name's escape sequence and newline reached the terminal in ``wrote ...``; the Q/DQ rewrite wrote
    --out mode 0600 (mkstemp's)."""
    import os

    name = "e\x1b[31m\nx.onnx"
    mask = os.umask(0o022)
    os.umask(mask)
    r = subprocess.run([sys.executable, "-m", "vsr", *TINY, "--out", name, "--precision", "int8", "--qdq"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("wrote e\\x1b[31m\\nx.onnx (edvr-tiny") and r.stdout.count("\n") == 1, r.stdout
    assert "\x1b" not in r.stdout
    assert sorted(os.listdir(tmp_path)) == [name]
    assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(tmp_path / name).graph.node)


def test_overwrite_replaces_the_plan_folder_whole(tmp_path):
    """With --overwrite an old plan's files that the new one lacks stayed in the folder (and the next
    --overwrite refused the folder, their names not in the new manifest): the new plan is renamed into place."""
    import json

    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "segment99.onnx").write_bytes(b"old")
    (plan / "manifest.json").write_text(json.dumps({"files": {"segment99.onnx": "x"}}))
    r = subprocess.run([sys.executable, "-m", "vsr", *TINY, "--out", str(tmp_path / "m.onnx"), "--split", str(plan),
                        "--overwrite"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not (plan / "segment99.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "plan"]
    assert json.loads((plan / "manifest.json").read_text())["source"] == str(tmp_path / "m.onnx")
