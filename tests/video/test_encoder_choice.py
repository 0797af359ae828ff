"""``choose_encoder``: the encoder of one output decided once, purely (no container opened, no file touched), and
the choice the sink then opens: the same codec, pixel format, options and colour for every container and source."""

from __future__ import annotations

import builtins
import dataclasses
import os
import warnings

import av
import cv2
import pytest

from tests.conftest import pattern

from vsr.errors import InputError
from vsr.video import EncoderSettings, VideoSink, open_source
from vsr.video.codecs import COMMON_CONTAINERS, IMAGE_CONTAINERS_OF, codecs_held
from vsr.video.encoder_choice import EncoderChoice, OutputContainer, choose_encoder

SOURCES = {  # name -> make_clip's fields
    "sdr.mp4": {},
    "deep.mkv": {"codec": "ffv1", "pix_fmt": "yuv422p10le"},
    "rgb": None,  # a folder of PNG frames: RGB
    "alpha.mkv": {"codec": "ffv1", "pix_fmt": "yuva420p"},
    "hlg.mkv": {"matrix": 9, "range": 1, "primaries": 9, "transfer": 18},
}
OUTPUTS = ("out.mp4", "out.mkv", "out.mov", "out.avi", "out.webm")
SETTINGS = (EncoderSettings(), EncoderSettings(codec="ffv1"), EncoderSettings(crf=20),
            EncoderSettings(codec="libx264", preset="fast"))


@pytest.fixture
def infos(make_clip, tmp_path):
    got = {}
    for name, fields in SOURCES.items():
        if fields is None:
            (tmp_path / name).mkdir()
            for i in range(2):
                cv2.imwrite(str(tmp_path / name / f"{i:08d}.png"), pattern(i, 16, 12)[..., ::-1])
        source = open_source(tmp_path / name if fields is None else
                             make_clip(name, width=16, height=12, frames=2, **fields))
        source.close()
        got[name] = source.info
    return got


def test_the_choice_is_pure_and_frozen(infos, tmp_path, monkeypatch):
    containers = [OutputContainer.named(name) for name in OUTPUTS]
    containers.append(OutputContainer("yuv4mpegpipe", codecs_held("yuv4mpegpipe"), stream="y4m"))
    for fmt in {*COMMON_CONTAINERS, *IMAGE_CONTAINERS_OF["mjpeg"]}:  # FFmpeg's table, read once per process
        codecs_held(fmt)  # (a "cannot hold" message names the containers that would do)
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)

    def refused(*args, **kwargs):
        raise AssertionError(f"choose_encoder opened {args[:1]}")

    monkeypatch.setattr(av, "open", refused)  # no container, in memory or on disk
    monkeypatch.setattr(builtins, "open", refused)
    monkeypatch.setattr(os, "open", refused)
    chosen = 0
    for container in containers:
        for info in infos.values():
            for settings in SETTINGS:
                try:
                    choice = choose_encoder(container, settings, info, scale=2)
                except InputError:
                    continue  # (ffv1 into MP4 ...): refused, as the sink refuses it
                chosen += 1
                assert choice == choose_encoder(container, settings, info, scale=2)
                assert isinstance(hash(choice), int) and (choice.width, choice.height) == (32, 24)
                with pytest.raises(dataclasses.FrozenInstanceError):
                    choice.codec = "other"
    assert chosen >= 40
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("output", OUTPUTS)
def test_the_sink_opens_the_choice(output, infos, tmp_path):
    for source, info in infos.items():
        for settings in SETTINGS:
            try:
                choice = choose_encoder(OutputContainer.named(output), settings, info, scale=2)
            except InputError as e:
                with pytest.raises(InputError) as refused:
                    VideoSink(tmp_path / output, info, settings, scale=2, probe=True)
                assert str(refused.value) == str(e)  # refused by the sink too, in the same words
                continue
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                sink = VideoSink(tmp_path / output, info, settings, scale=2, probe=True)
            try:
                assert sink.choice == choice, (source, settings)
                cc = sink.vs.codec_context
                assert (cc.name, sink.vs.pix_fmt, cc.width, cc.height) == (choice.codec, choice.pix_fmt, 32, 24)
                assert (sink.codec, sink.pix_fmt, sink.crf, sink.preset) == (choice.codec, choice.pix_fmt,
                                                                            choice.crf, choice.preset)
                assert {k: int(getattr(cc, k)) for k in choice.colour_tags()} == choice.colour_tags()
                assert sink.memory_estimate_mb() == choice.memory_mb
                assert [str(w.message) for w in said] == list(choice.warnings)  # said by the sink, once each
            finally:
                sink.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SOURCES)  # the probes wrote nothing


def test_what_each_source_gets_by_default(infos):
    mkv = OutputContainer.named("out.mkv")
    got = {name: (c.codec, c.pix_fmt) for name, c in
           ((n, choose_encoder(mkv, EncoderSettings(), info)) for n, info in infos.items())}
    assert got == {"sdr.mp4": ("libx264", "yuv420p"), "deep.mkv": ("libx265", "yuv422p10le"),
                   "rgb": ("libx264", "yuv444p"), "alpha.mkv": ("libvpx-vp9", "yuva420p"),
                   "hlg.mkv": ("libx265", "yuv420p10le")}
    assert choose_encoder(mkv, EncoderSettings(), infos["alpha.mkv"]).warnings == ()
    alpha = choose_encoder(OutputContainer.named("out.mp4"), EncoderSettings(), infos["alpha.mkv"])
    assert (alpha.codec, alpha.pix_fmt) == ("libx264", "yuv420p")
    assert alpha.warnings == ("the source's alpha channel (yuva420p) is dropped: libx264 has no format with alpha "
                              "(VP9 in .webm or .mkv, ProRes 4444 in .mov, FFV1 or PNG frames keep it: the default "
                              "codec of .webm, .mkv and .mov does)",)
    y4m = OutputContainer("yuv4mpegpipe", codecs_held("yuv4mpegpipe"), stream="y4m")
    assert (choose_encoder(y4m, EncoderSettings(), infos["rgb"]).codec,
            choose_encoder(y4m, EncoderSettings(), infos["rgb"]).pix_fmt) == ("wrapped_avframe", "yuv444p")
    assert choose_encoder(OutputContainer.named("out.avi"), EncoderSettings(), infos["sdr.mp4"]).codec_tag == "XVID"
    assert isinstance(choose_encoder(mkv, EncoderSettings(), infos["sdr.mp4"]), EncoderChoice)
    # a raw HEVC stream holds HEVC alone (refused: "hevc holds none of the video codecs vsr writes")
    assert choose_encoder(OutputContainer.named("out.hevc"), EncoderSettings(), infos["sdr.mp4"]).codec == "libx265"


@pytest.mark.parametrize("output, codec, tag, said", [
    ("out.mp4", "libx265", "hvc1", True), ("out.mov", "libx265", "hvc1", True), ("out.mkv", "libx265", None, True),
    ("out.ts", "libx265", None, True),
    ("out.webm", "libsvtav1", None, False),  # (.webm's default for any source: AV1 holds 10 bits in its Main profile)
    ("out.avi", "mpeg4", "XVID", False)])  # (AVI's own codec, as for HDR: H.264 there reads back without times)
def test_a_deep_sdr_source_gets_a_deep_codec_players_decode(make_clip, output, codec, tag, said):
    """A 10-bit SDR source (a phone's HEVC) came out as 10-bit H.264 (High 10), which almost no hardware decoder or
    browser plays: by default it is 10-bit HEVC (Main 10, hvc1 in MP4 and QuickTime), as an HDR source's, and
    says so; ``-c libx264`` still writes High 10, and an 8-bit source still gets H.264."""
    src = open_source(make_clip("phone.mkv", width=64, height=48, frames=2, codec="libx265", pix_fmt="yuv420p10le",
                                matrix=1, range=1, primaries=1, transfer=1, options={"x265-params": "log-level=error"}))
    src.close()
    info, container = src.info, OutputContainer.named(output)
    assert info.hdr is None and info.bits == 10
    choice = choose_encoder(container, EncoderSettings(), info)
    assert (choice.codec, choice.codec_tag) == (codec, tag)
    if codec != "mpeg4":
        assert choice.pix_fmt == "yuv420p10le"
    assert choice.default_line == ((f"codec: {codec}, 10-bit HEVC, for the source's 10 bits (-c libx264 writes "
                                    "10-bit H.264, High 10, which few players decode)") if said else None)
    if "libx264" in container.codecs and codec != "mpeg4":
        asked = choose_encoder(container, EncoderSettings(codec="libx264"), info)
        assert (asked.codec, asked.pix_fmt, asked.default_line) == ("libx264", "yuv420p10le", None)
    eight = open_source(make_clip("eight.mkv", width=64, height=48, frames=2, codec="libx265"))
    eight.close()
    assert choose_encoder(container, EncoderSettings(), eight.info).codec == ("libx264" if said else codec)


@pytest.mark.parametrize("codec, output, width, height, beyond", [
    ("libx264", "o.mp4", 4000, 3000, True),  # 16000x12000: x264 encodes it, warning only in its own log
    ("libx265", "o.mkv", 3840, 2160, True), ("libx264", "o.mp4", 1920, 1080, False),  # 8K: the highest level's
    ("ffv1", "o.mkv", 4000, 3000, False)])  # no levels
def test_an_output_beyond_its_formats_highest_level_is_said(infos, codec, output, width, height, beyond):
    """A 4000x3000 source into H.264 came out 16000x12000 without a word: few players and no hardware decoder
    play frames beyond the format's highest level."""
    if codec not in av.codecs_available:
        pytest.skip(f"needs {codec}")
    info = dataclasses.replace(next(iter(infos.values())), width=width, height=height)
    choice = choose_encoder(OutputContainer.named(output), EncoderSettings(codec=codec), info, scale=4)
    said = [w for w in choice.warnings if "highest level" in w]
    assert said == ([f"the output's {4 * width}x{4 * height} frames ({16 * width * height / 1e6:.0f} megapixels) "
                     f"are beyond the highest level of {'H.264' if codec == 'libx264' else 'HEVC'} (35.7 megapixels, "
                     "8K): few players and no hardware decoder play them (--scale 4320p keeps 8K)"] if beyond else [])
