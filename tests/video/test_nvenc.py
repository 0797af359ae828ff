"""NVENC (h264_nvenc, hevc_nvenc, av1_nvenc): --crf as constant quality, --preset as p1..p7; where none opens
(here: no GPU), an explicit ``-c ..._nvenc`` is one line, exit 2, before any work, nothing written; the default
encoder is NVENC's H.264 only for a GPU run where it opens (a stand-in says it opens: there is no NVENC here)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import av
import pytest

from vsr.backends import BackendRequest, CudaOptions
from vsr.errors import InputError
from vsr.pipeline.upscale import _on_gpu
from vsr.video import EncoderSettings, codecs, encoder_choice, nvenc
from vsr.video.codecs import effective
from vsr.video.encoder_choice import OutputContainer, check_values, default_codec, encoder_options

REPO = Path(__file__).resolve().parents[2]
NO_NVENC = nvenc.nvenc_problem("h264_nvenc") is not None


def test_crf_is_constant_quality_and_presets_map_onto_p1_to_p7():
    s = EncoderSettings(codec="hevc_nvenc", crf=24, preset="slow")
    opts, _ = encoder_options("hevc_nvenc", s, 3840, 2160)
    assert opts == {"rc": "vbr", "cq": "24", "b": "0", "preset": "p5"}
    assert effective("hevc_nvenc", opts) == {"crf": 24, "preset": "p5", "q": None}
    assert effective("h264_nvenc", {}) == {"crf": None, "preset": "p4", "q": None}  # NVENC's own default: no CQ target
    opts, _ = encoder_options("av1_nvenc", EncoderSettings(preset="P7", options=(("cq", "30"),)), 64, 64)
    assert opts == {"preset": "p7", "cq": "30"}
    check_values("h264_nvenc", {"cq": "51", "preset": "p1"}, s)
    with pytest.raises(InputError, match=r"--crf 60 is out of range for h264_nvenc \(1..51\)"):
        check_values("h264_nvenc", *encoder_options("h264_nvenc", EncoderSettings(crf=60), 64, 64)[:1],
                     EncoderSettings(crf=60))
    with pytest.raises(InputError, match="--preset turbo is not a h264_nvenc preset .*p7, or x264's names"):
        check_values("h264_nvenc", {"preset": "turbo"}, EncoderSettings(preset="turbo"))


@pytest.mark.skipif(not NO_NVENC, reason="checks the behaviour where NVENC does not open")
def test_explicit_nvenc_without_one_is_one_line_exit_2_and_nothing_written(tmp_path):
    from tests.conftest import Clip, write_clip

    codec = "h264_nvenc"
    src = write_clip(tmp_path / "in.mp4", Clip(frames=2))
    out = tmp_path / "out" / "o.mp4"
    out.parent.mkdir()
    r = subprocess.run([sys.executable, "-m", "vsr", "upscale", str(src), str(out), "-c", codec, "--weights",
                        "random", "--config", "edvr-tiny", "--backend", "torch"], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"vsr: error: --codec {codec}: no NVIDIA hardware encoder (NVENC) opens here (")
    assert r.stderr.count("\n") == 1 and "loading" not in r.stderr
    assert list(out.parent.iterdir()) == []  # no output, no temporary beside it
    for other in ("hevc_nvenc", "av1_nvenc"):
        with pytest.raises(InputError, match=f"--codec {other}: no NVIDIA hardware encoder"):
            codecs.video_codec(other)


def test_the_default_is_nvenc_only_for_a_gpu_run_where_it_opens(monkeypatch):
    with av.open(io.BytesIO(), "w", format="mp4") as mp4_oc, av.open(io.BytesIO(), "w", format="webm") as webm_oc:
        mp4, webm = OutputContainer.of(mp4_oc), OutputContainer.of(webm_oc)
        monkeypatch.setattr(encoder_choice, "nvenc_problem", lambda codec: None)  # stand-in: NVENC opens
        assert default_codec(mp4, hardware=True) == "h264_nvenc"
        assert default_codec(mp4) == "libx264" and default_codec(webm, hardware=True) != "h264_nvenc"
        monkeypatch.setattr(encoder_choice, "nvenc_problem", lambda codec: "Cannot load libcuda.so.1")
        assert default_codec(mp4, hardware=True) == "libx264"
    assert _on_gpu(BackendRequest(options=CudaOptions())) and _on_gpu(BackendRequest(options=CudaOptions("cuda:1")))
    assert not _on_gpu(BackendRequest(options=CudaOptions(device="cpu"))) and not _on_gpu(BackendRequest())
