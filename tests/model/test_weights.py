"""Checkpoint loading: formats, strictness, safety, and one-line errors through the CLI."""

import collections
import os
import pickle
import subprocess
import sys

import pytest
import torch

from vsr.errors import InputError, WeightsError
from vsr.model import build_model, load_config, load_model
from vsr.model.weights import extract_state_dict, identify_official, read_checkpoint


@pytest.fixture(scope="module")
def tiny_sd():
    torch.manual_seed(0)
    return build_model(load_config("edvr-tiny")).state_dict()


def test_basicsr_params_and_ema_and_plain_load(tmp_path, tiny_sd):
    ema = {k: v + 1 for k, v in tiny_sd.items()}
    for obj, expect in [({"params": tiny_sd}, tiny_sd), ({"params": tiny_sd, "params_ema": ema}, ema),
                        (dict(tiny_sd), tiny_sd), ({f"module.{k}": v for k, v in tiny_sd.items()}, tiny_sd)]:
        p = tmp_path / "w.pth"
        torch.save(obj, p)
        m, _ = load_model(p, "edvr-tiny")
        for k, v in m.state_dict().items():
            assert torch.equal(v, expect[k]), k


def test_mmagic_generator_prefix_and_key_names_are_mapped(tiny_sd):
    renamed = {}
    for k, v in tiny_sd.items():
        k2 = k.replace("conv_l2_1.", "feat_l2_conv1.conv.").replace("pcd_align.", "pcd_alignment.")
        k2 = k2.replace("upconv1.", "upsample1.upsample_conv.")
        if k2.startswith("pcd_alignment.offset_conv1"):
            k2 = k2.replace(".weight", ".conv.weight").replace(".bias", ".conv.bias")
        renamed["generator." + k2] = v
    sd, fmt = extract_state_dict({"state_dict": renamed, "meta": {}})
    assert fmt == "mmagic" and sd.keys() == tiny_sd.keys()


def test_strict_mismatch_names_config_and_keys(tmp_path, tiny_sd):
    p = tmp_path / "w.pth"
    bad = dict(tiny_sd)
    bad.pop("conv_first.weight")
    bad["extra.weight"] = torch.zeros(1)
    torch.save({"params": bad}, p)
    with pytest.raises(WeightsError, match=r"edvr-tiny.*missing 1 keys.*conv_first.weight.*unexpected.*extra"):
        load_model(p, "edvr-tiny")
    shapes = dict(tiny_sd)
    shapes["conv_first.weight"] = torch.zeros(3, 3, 3, 3)
    torch.save({"params": shapes}, p)
    with pytest.raises(WeightsError, match="conv_first.weight has shape"):
        load_model(p, "edvr-tiny")


def test_pickle_needing_code_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    p = tmp_path / "evil.pth"
    with open(p, "wb") as f:
        pickle.dump({"params": Evil()}, f, protocol=2)
    with pytest.raises(WeightsError, match="refused"):
        read_checkpoint(p)
    assert not marker.exists()


def test_official_files_recognised_by_sha256(tmp_path, monkeypatch):
    p = tmp_path / "renamed.pth"
    p.write_bytes(b"x")
    import vsr.model.weights as w

    monkeypatch.setattr(w, "sha256_file", lambda _: "1edf645c117ba34ea1c7fcf5506079cf9dd361c2bd26b6f3cad9197a0ba7adbf")
    assert identify_official(p).config == "edvr-m-wotsa"
    monkeypatch.setattr(w, "sha256_file", lambda _: "162b54e4" + "0" * 56)
    assert identify_official(p).config == "edvr-l-7f"
    monkeypatch.setattr(w, "sha256_file", lambda _: "0" * 64)
    assert identify_official(p) is None


def test_missing_path_is_input_error(tmp_path):
    with pytest.raises(InputError):
        load_model(tmp_path / "nope.pth", "edvr-tiny")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "vsr", *args], capture_output=True, text=True)


@pytest.mark.parametrize("case", ["missing", "truncated", "wrong_keys", "wrong_shapes", "code", "garbage"])
def test_broken_weights_give_one_line_and_exit_2(tmp_path, tiny_sd, case):
    p = tmp_path / "w.pth"
    if case == "truncated":
        torch.save({"params": tiny_sd}, p)
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif case == "wrong_keys":
        torch.save({"params": {"a": torch.zeros(1)}}, p)
    elif case == "wrong_shapes":
        torch.save({"params": {k: torch.zeros(1) for k in tiny_sd}}, p)
    elif case == "code":
        with open(p, "wb") as f:
            pickle.dump(collections.OrderedDict(params=os.getcwd), f, protocol=2)
    elif case == "garbage":
        p.write_bytes(b"\x00not a checkpoint" * 10)
    r = _cli("export", "--weights", str(p), "--config", "edvr-tiny", "--height", "8", "--width", "8",
             "--out", str(tmp_path / "m.onnx"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2
    assert len(lines) == 1 and lines[0].startswith("vsr: error:"), r.stderr
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("content", [b"hello world\n", b"", b"PK\x03\x04" + b"\x00" * 40, b"\x80\x02]q\x00(K\x01"])
def test_any_garbage_is_not_a_pytorch_checkpoint(tmp_path, content):
    """Text, an empty file, a zip header, a pickle cut short: torch's unpickler raises KeyError, EOFError,
    RuntimeError, ... on these; all of them are one WeightsError naming the file."""
    p = tmp_path / "w.pth"
    p.write_bytes(content)
    with pytest.raises(WeightsError, match=r"^not a PyTorch checkpoint: .*w\.pth \(") as e:
        read_checkpoint(p)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["edvr-s", "edvr-m-wotsa", "edvr-tiny"])
def test_config_is_inferred_from_the_checkpoint_shapes(tmp_path, name):
    p = tmp_path / "w.pth"
    torch.save({"params": build_model(load_config(name)).state_dict()}, p)
    model, cfg = load_model(p)
    assert cfg.name == name
    assert model.state_dict().keys() == torch.load(p, weights_only=True)["params"].keys()


def test_checkpoint_fitting_no_config_names_the_closest_and_the_first_mismatch(tmp_path):
    from vsr.model.config import ModelConfig

    cfg = ModelConfig("odd", "", num_feat=24, num_frame=3, num_extract_block=1, num_reconstruct_block=2)
    p = tmp_path / "w.pth"
    torch.save(build_model(cfg).state_dict(), p)
    with pytest.raises(WeightsError, match=r"fits none of the configs .*closest is 'edvr-tiny': conv_first.weight "
                                           r"has shape \(24, 3, 3, 3\), config expects \(16, 3, 3, 3\)"):
        load_model(p)


def test_checkpoint_fitting_no_config_without_config_through_the_cli(tmp_path):
    from vsr.model.config import ModelConfig

    p = tmp_path / "w.pth"
    torch.save(build_model(ModelConfig("odd", "", num_feat=24, num_frame=3, num_extract_block=1,
                                       num_reconstruct_block=2)).state_dict(), p)
    r = _cli("export", "--weights", str(p), "--height", "8", "--width", "8", "--out", str(tmp_path / "m.onnx"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"vsr: error: {p} fits none of the configs") and "closest is 'edvr-tiny'" in r.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_bundled_real_weights_are_the_mix_fine_tune_and_differ_from_the_default():
    """``--weights real``: EDVR-S like the default, fine-tuned (its record names the recipe and a warm start from
    the default) and not the same numbers."""
    import json

    from vsr.model.weights import WEIGHTS_DIR, bundled_path, load_model

    if not (WEIGHTS_DIR / "real.pth").is_file() or not (WEIGHTS_DIR / "default.pth").is_file():
        pytest.skip("this build bundles no real/default weights")
    real, cfg = load_model("real")
    default, cfg_d = load_model("default")
    assert cfg.name == cfg_d.name == "edvr-s"
    record = json.loads(bundled_path("real").with_suffix(".json").read_text())
    assert record["options"]["degrade"] == "mix" and record["options"]["init"] == "default"
    assert record["degradation"] == "configs/degrade/mix.toml"
    diff = max((a - b).abs().max().item() for a, b in zip(real.state_dict().values(), default.state_dict().values()))
    assert diff > 1e-3


def test_vsr_models_lists_the_bundled_weights_by_name(capsys):
    import json

    from vsr.cli import main
    from vsr.model.weights import BUNDLED_NAMES, WEIGHTS_DIR

    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["bundled"]
    assert listed == {n: str(WEIGHTS_DIR / f"{n}.pth") for n in BUNDLED_NAMES if (WEIGHTS_DIR / f"{n}.pth").is_file()}
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert all(f"--weights {n}" in text for n in listed)


@pytest.mark.parametrize("name", ["default", "real"])
def test_a_config_without_its_weights_says_the_bundled_ones_are_another_model(name):
    """`vsr upscale IN OUT --config edvr-m` (no --weights: the bundled EDVR-S weights) names the mismatch and
    what to give, not 54 missing keys."""
    with pytest.raises(WeightsError) as e:
        load_model(name, "edvr-m")
    msg = str(e.value)
    assert f"the bundled {name!r} weights are for edvr-s, not edvr-m" in msg and "--weights FILE" in msg
    assert "missing" not in msg and "\n" not in msg


def test_a_checkpoint_with_flipped_bytes_fails_its_zip_checksum(tmp_path, tiny_sd):
    """``torch.load`` never checks the CRC-32 the zip archive holds for every member: a flipped byte inside a
    tensor loaded as another weight, silently (issue 37).  The archive's own checksum says so at load."""
    import zipfile

    p = tmp_path / "w.pth"
    torch.save({"params": tiny_sd}, p)
    with zipfile.ZipFile(p) as z:
        big = max(z.infolist(), key=lambda i: i.file_size)  # a tensor's bytes, stored as they are
        at = big.header_offset + len(big.FileHeader()) + big.file_size // 2
    data = bytearray(p.read_bytes())
    data[at] ^= 0x40
    p.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=r"w\.pth is damaged: '.*' fails its CRC-32 check") as e:
        read_checkpoint(p)
    assert "\n" not in str(e.value)
