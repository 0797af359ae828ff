"""Model configs: every file in configs/ loads, and every way a TOML can be wrong is one line naming the field."""

import pytest

from vsr.errors import ConfigError
from vsr.model import list_configs, load_config

GOOD = """name = "mine"
[model]
num_feat = 16
num_frame = 3
num_extract_block = 1
num_reconstruct_block = 2
"""


def test_every_shipped_config_loads():
    names = list_configs()
    assert "edvr-m" in names and "edvr-tiny" in names
    for name in names:
        assert load_config(name).name == name


def test_a_minimal_file_gets_the_defaults(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(GOOD)
    cfg = load_config(p)
    assert (cfg.name, cfg.num_feat, cfg.deformable_groups, cfg.with_tsa, cfg.center, cfg.padding) == \
        ("mine", 16, 8, True, 1, "reflection_circle")


@pytest.mark.parametrize("edit,field", [
    (("num_feat = 16", "num_feat = -4"), "num_feat"),
    (("num_feat = 16", "num_feat = 0"), "num_feat"),
    (("num_frame = 3", "num_frame = 0"), "num_frame"),
    (("num_extract_block = 1", "num_extract_block = -1"), "num_extract_block"),
    (("num_reconstruct_block = 2", "num_reconstruct_block = 0"), "num_reconstruct_block"),
    (("num_feat = 16", "num_feat = 1000000"), "num_feat"),
    (("num_feat = 16", 'num_feat = "16"'), "num_feat"),
    (("num_feat = 16", "num_feat = 16.0"), "num_feat"),
    (("num_feat = 16", "num_feat = true"), "num_feat"),
    (("num_feat = 16", "num_feat = 12"), "deformable_groups"),
    (("num_frame = 3", "num_frame = 3\nwith_tsa = 1"), "with_tsa"),
    (("num_frame = 3", "num_frame = 3\ncenter_frame_idx = 3"), "center_frame_idx"),
    (("num_feat = 16\n", ""), "num_feat"),
    (("num_frame = 3", "num_frame = 3\nnum_feats = 8"), "num_feats"),
    (('name = "mine"', 'name = "mine"\nmodle = 1'), "modle"),
    (("[model]", "[modell]"), "modell"),
    (("num_frame = 3", 'num_frame = 3\narch = "BasicVSR"'), "arch"),
    (("num_reconstruct_block = 2", "num_reconstruct_block = 2\n[inference]\npadding = 'zeros'"), "padding must"),
    (("num_reconstruct_block = 2", "num_reconstruct_block = 2\n[inference]\npading = 1"), "pading"),
    (("num_reconstruct_block = 2", "num_reconstruct_block = 2\n[inference]\nmemory_fixed_mb = -5"), "memory_fixed_mb"),
    (("num_reconstruct_block = 2", "num_reconstruct_block = 2\n[inference]\nmemory_bytes_per_pixel = '1k'"),
     "memory_bytes_per_pixel"),
    (('name = "mine"', "name = 3"), "name"),
    (("[model]", "model = 3\n[x]"), "model"),
    (("num_feat = 16", "num_feat = = 16"), "TOML"),
])
def test_a_wrong_field_is_one_line_naming_it(tmp_path, edit, field):
    p = tmp_path / "c.toml"
    p.write_text(GOOD.replace(*edit))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and field in msg, msg


def test_negative_channels_through_the_cli_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    p = tmp_path / "neg.toml"
    p.write_text(GOOD.replace("num_feat = 16", "num_feat = -64"))
    r = subprocess.run([sys.executable, "-m", "vsr", "export", "--weights", "random", "--config", str(p),
                        "--height", "8", "--width", "8", "--out", str(tmp_path / "m.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"vsr: error: {p}: num_feat must be between 1 and 1024, not -64"], r.stderr
