"""MPEG-TS outputs (.ts, .m2ts): FFmpeg's codec query names only MPEG-2 video and MP2 audio for its muxer, so
vsr refused H.264 into .ts (and a batch job of a .ts input, which keeps its container). The muxer writes H.264,
HEVC, AAC, AC-3 and more (vsr.video.codecs.UNLISTED): an upscale into .ts is H.264 with the audio copied, at the
source's timestamps."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.video import EncoderSettings, open_sink, open_source
from vsr.video.codecs import codecs_held


def ts_clip(path: Path, audio: str) -> Path:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs ffmpeg")
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24:rate=25", "-f", "lavfi", "-i",
                    "sine=sample_rate=48000", "-t", "1", "-c:v", "libx264", "-c:a", audio, str(path)], check=True)
    return path


def test_the_muxer_holds_what_it_writes():
    held = codecs_held("mpegts")
    assert {"libx264", "h264", "libx265", "aac", "ac3", "mp2", "mpeg2video", "dvb_subtitle"} <= held
    assert "ffv1" not in held and "prores_ks" not in held


@pytest.mark.parametrize("audio", ["aac", "ac3"])
def test_into_ts_h264_with_the_audio_copied_at_the_sources_times(tmp_path, audio):
    src = ts_clip(tmp_path / "in.ts", audio)
    out = tmp_path / "out.ts"
    source = open_source(src)
    try:
        sink = open_sink(out, source.info, EncoderSettings(), scale=1)
        flat = np.full((3, 24, 32), 100, sink.plane_dtype())
        for f in source.frames():
            sink.write(flat, f.pts, f.duration)
        sink.commit()
    finally:
        source.close()

    def streams(path):
        with av.open(str(path)) as c:
            v = c.streams.video[0]
            times = [f.time for f in c.decode(v)]
            a = c.streams.audio[0]
            packets = [(p.pts, bytes(p)) for p in c.demux(a) if p.size]
            return v.codec_context.name, times, a.codec_context.name, packets
    codec, times, acodec, packets = streams(out)
    _, src_times, _, src_packets = streams(src)
    assert (codec, acodec) == ("h264", audio)
    assert times == src_times and len(times) == 25
    assert packets == src_packets  # copied packet for packet
