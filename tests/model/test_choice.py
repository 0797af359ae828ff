"""The weights ``--weights auto`` picks (:mod:`vsr.model.choice`): ``real`` for every real (compressed) clip,
``default`` for lossless clips of Vid4 frames, the rule's thresholds from the shipped config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vsr.errors import ConfigError
from vsr.model.choice import WeightsRule, choose_for, choose_weights
from vsr.video import open_source
from vsr.video.compression import CompressionFacts

from tests.data import VID4, VIDEOS, needs

needs_data = needs(VIDEOS)


def choice_of(path: Path):
    source = open_source(path)
    try:
        return choose_for(source)
    finally:
        source.close()


@needs_data
@pytest.mark.parametrize("name", sorted(p.name for p in VIDEOS.iterdir()) if VIDEOS.is_dir() else [])
def test_every_real_clip_gets_the_real_weights(name):
    c = choice_of(VIDEOS / name)
    assert c.weights == "real", c.line()
    assert c.facts.codec in ("h264", "vp9") and c.facts.bits_per_pixel < 0.3
    assert c.line().startswith("real (") and "--weights default to override" in c.line()


@needs(VID4 / "city" / "gt")
def test_lossless_vid4_frames_get_the_default_weights(tmp_path):
    ffv1 = tmp_path / "city.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-framerate", "25", "-i", str(VID4 / "city" / "gt" / "%08d.png"),
                    "-frames:v", "9", "-c:v", "ffv1", str(ffv1)], check=True)
    for clip in (ffv1, VID4 / "calendar" / "lr"):
        c = choice_of(clip)
        assert c.weights == "default" and "clean source" in c.why, c.line()
    assert choice_of(ffv1).facts.codec == "ffv1"


@needs_data
def test_the_same_frames_through_x264_get_the_real_weights(tmp_path):
    x264 = tmp_path / "calendar.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-framerate", "25", "-i", str(VID4 / "calendar" / "lr" / "%08d.png"),
                    "-c:v", "libx264", "-crf", "28", "-preset", "medium", "-pix_fmt", "yuv420p", str(x264)],
                   check=True)
    c = choice_of(x264)
    assert c.weights == "real" and c.facts.codec == "h264", c.line()


RULE = WeightsRule(blockiness=1.1, clean_bits_per_pixel=1.5, lossless=frozenset({"ffv1", "rawvideo", "png"}))


@pytest.mark.parametrize("facts, weights", [
    (CompressionFacts("prores", 6.1, "stream", 0.89, 3), "default"),   # intermediate codec, high rate
    (CompressionFacts("h264", 1.49, "stream", 1.0, 3), "real"),        # just under the clean rate
    (CompressionFacts("h264", None, None, 1.0, 1), "real"),            # lossy, rate unknown (a pipe)
    (CompressionFacts("rawvideo", None, None, 1.05, 1), "default"),    # raw frames, no grid
    (CompressionFacts("rawvideo", None, None, 1.1, 1), "real"),        # raw frames decoded from a block codec
    (CompressionFacts("png", None, None, None, 0), "default"),         # flat frames: nothing to measure
])
def test_the_rule(facts, weights):
    assert choose_weights(facts, RULE).weights == weights


def test_the_shipped_rule_loads_and_a_bad_one_is_one_config_error(tmp_path):
    rule = WeightsRule.load()
    assert rule.blockiness > 1 and rule.clean_bits_per_pixel > 0 and {"ffv1", "png", "rawvideo"} <= rule.lossless
    bad = tmp_path / "weights.toml"
    bad.write_text("blockiness = 0.9\nclean_bits_per_pixel = 1\nlossless = []\n")
    with pytest.raises(ConfigError, match="blockiness > 1"):
        WeightsRule.load(bad)
    bad.write_text("blockiness = 1.1\n")
    with pytest.raises(ConfigError, match="malformed"):
        WeightsRule.load(bad)
