"""Every pixel format vsr's encoders take, written by the sink as a run writes it, against FFmpeg's own
conversion of the same RGB (issue 37 items 1 and 2).

For each encoder vsr offers and each format of the issue's families that it takes (4:1:0, 4:1:1, 4:4:0, NV12,
NV21, P010, grey at 8-16 bits, GBR at 8-16 bits, packed RGB, full-range JPEG YUV), the sink gets one upscaled
frame: RGB of 16-bit codes, converted tile by tile as the post stage does (two cores, the second's chroma fed by
the first's rows).  Two checks:

* the frame the encoder is handed is FFmpeg's ``scale`` filter of the same RGB (rgb48le in; the sink's matrix,
  range and chroma siting; swscale's bilinear filter from every RGB pixel) within 1 level, sample for sample;
* the file decodes in that format's kind (RGB as RGB, grey as grey), tagged as written, and holds exactly what
  the encoder was handed where the codec runs lossless here (FFV1, PNG, rawvideo; x264 and x265 at their
  lossless settings, VP9 lossless), else within the codec's own loss (PSNR >= 30 dB).
"""

from __future__ import annotations

import subprocess
import warnings
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from vsr.video import EncoderSettings, VideoInfo
from vsr.video.colour import KR_KB, MATRIX_NAMES, RANGE_FULL, SPC_RGB, ColourSpec, CHROMA_SITING, bit_depth, is_gray_format
from vsr.video.colour import is_rgb_format
from vsr.video.planes import PlaneFormat, convert_tile, plane_views, region
from vsr.video.sink import VideoSink

H, W = 32, 48  # the output picture: 4:1:0 chroma of 8 x 12, two tiles of 16 rows
FAMILIES = ("yuv410p", "yuv411p", "yuv440p", "yuv420p", "yuvj420p", "yuv422p10le", "yuv444p12le", "nv12", "nv21",
            "p010le", "gray", "gray10le", "gray12le", "gray16le", "gray16be", "gbrp", "gbrp10le", "gbrp12le",
            "gbrp14le", "gbrp16le", "rgb24", "bgr0", "rgb48be", "yuv420p16le")
# (codec, output name, options that make it lossless here; None: lossy, compared by PSNR)
ENCODERS = (("ffv1", "o.mkv", {}), ("png", "o.mov", {}), ("libx264", "o.mkv", {"qp": "0"}),
            ("libx264rgb", "o.mkv", {"qp": "0"}), ("libx265", "o.mkv", {"x265-params": "lossless=1:log-level=error"}),
            ("libvpx-vp9", "o.webm", {"lossless": "1"}), ("libsvtav1", "o.mkv", None), ("prores_ks", "o.mov", None),
            ("mjpeg", "o.mov", None), ("mpeg4", "o.avi", None), ("rawvideo", "o.nut", {}))


def offered(codec: str) -> list[str]:
    """The formats of :data:`FAMILIES` that ``codec`` takes (rawvideo: all; MJPEG: its full-range ones, as it
    refuses limited-range YUV at normal compliance, in one line)."""
    c = av.Codec(codec, "w")
    formats = [f.name for f in c.video_formats or []]
    return [f for f in FAMILIES if (f in formats or not formats) and not (codec == "mjpeg" and f.startswith("yuv"))]


TABLE = [pytest.param(codec, name, opts, fmt, id=f"{codec}-{fmt}")
         for codec, name, opts in ENCODERS if codec in av.codecs_available for fmt in offered(codec)]


def source_info(path: Path, pix_fmt: str, colour: ColourSpec) -> VideoInfo:
    return VideoInfo(path=path, kind="png", width=W // 4, height=H // 4, pix_fmt=pix_fmt, bits=bit_depth(pix_fmt),
                     colour=colour, time_base=Fraction(1, 25), rate=Fraction(25), frames=1)


def test_rgb(bits: int, seed: int = 0) -> np.ndarray:
    """Smooth colour with texture, ``(3, H, W)`` codes of ``bits`` (8 or 16): what an upscaled frame looks like."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    rgb = np.stack([0.5 + 0.45 * np.sin(x / 5), 0.5 + 0.45 * np.cos(y / 4), (x + y) / (H + W)])
    rgb = np.clip(rgb + rng.normal(0, 0.03, rgb.shape), 0, 1)
    return np.round(rgb * ((1 << bits) - 1)).astype(np.uint8 if bits == 8 else np.uint16)


test_rgb.__test__ = False  # a helper, not a test


def write_with_sink(sink: VideoSink, rgb: np.ndarray) -> av.VideoFrame:
    """One frame through the post stage's path: planes from the sink, two tiles converted into them, finished;
    the frame the encoder is handed."""
    fmt = sink.planes
    planes = sink.new_planes(H, W)
    views = plane_views(planes)
    for y0, y1 in ((0, H // 2), (H // 2, H)):
        convert_tile(rgb, fmt, region(views, fmt, y0, y1, 0, W), core=(y0, y1, 0, W))
    frame = sink.finish(planes)
    sink.write(frame, 0, 1)
    sink.commit()
    return frame


def raw(frame: av.VideoFrame) -> np.ndarray:
    """A frame's samples as FFmpeg's rawvideo lays them out (planes one after another, no padding)."""
    cc = av.CodecContext.create("rawvideo", "w")
    cc.width, cc.height, cc.pix_fmt = frame.width, frame.height, frame.format.name
    data = b"".join(bytes(p) for p in cc.encode(frame))
    return samples(data, frame.format.name)


def samples(data: bytes, pix_fmt: str) -> np.ndarray:
    f = av.VideoFormat(pix_fmt)
    if bit_depth(pix_fmt) <= 8:
        return np.frombuffer(data, np.uint8).astype(np.int64)
    return np.frombuffer(data, ">u2" if f.is_big_endian else "<u2").astype(np.int64)


def ffmpeg_conversion(rgb: np.ndarray, pix_fmt: str, spec: ColourSpec, fmt: PlaneFormat) -> np.ndarray:
    """FFmpeg's own conversion of ``rgb`` (uint8 or uint16 ``(3, H, W)``: rgb24 or rgb48le in) into ``pix_fmt``: matrix, range and (where
    subsampled) chroma siting as the sink tagged them."""
    scale = "scale=flags=bilinear+accurate_rnd+full_chroma_inp+full_chroma_int"
    if spec.matrix != SPC_RGB:
        px, py = CHROMA_SITING.get(fmt.siting, (0.0, 0.0))
        scale += (f":out_color_matrix={MATRIX_NAMES[spec.matrix]}:out_range={'pc' if spec.range == RANGE_FULL else 'tv'}"
                  f":out_h_chr_pos={round(256 * px * ((1 << fmt.sub_x) - 1))}"
                  f":out_v_chr_pos={round(256 * py * ((1 << fmt.sub_y) - 1))}")
    out = subprocess.run(["ffmpeg", "-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24" if rgb.dtype == np.uint8 else "rgb48le", "-s", f"{W}x{H}", "-i", "-",
                          "-vf", scale, "-pix_fmt", pix_fmt, "-f", "rawvideo", "-"],
                         input=np.ascontiguousarray(rgb.transpose(1, 2, 0)).tobytes(),
                         capture_output=True, check=True).stdout
    return samples(out, pix_fmt)


def reference(rgb: np.ndarray, pix_fmt: str, spec: ColourSpec, fmt: PlaneFormat) -> np.ndarray:
    """What the encoder should be handed: FFmpeg's conversion, except for grey deeper than 8 bits, where swscale
    is off by up to an 8-bit step (rgb48le -> gray16le: 241 levels from the exact luma), and the exact BT.601 luma
    (swscale's grey), full range, rounded half up is the reference."""
    if not (is_gray_format(pix_fmt) and bit_depth(pix_fmt) > 8):
        return ffmpeg_conversion(rgb, pix_fmt, spec, fmt)
    x = rgb.astype(np.float64) / np.iinfo(rgb.dtype).max
    y = np.floor((0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2]) * ((1 << bit_depth(pix_fmt)) - 1) + 0.5)
    return y.astype(np.int64).ravel()


def level(pix_fmt: str) -> int:
    """One level of ``pix_fmt`` in its samples (P010 keeps its 10 bits at the top of 16), to 11 bits: FFmpeg's
    YUV conversion holds no more (yuv420p16le from 8-bit RGB: 19 levels of 16 bits off vsr's exact codes)."""
    bits = bit_depth(pix_fmt)
    stored = 16 if pix_fmt.startswith(("p0", "p2", "p4")) else bits
    return 1 << (stored - bits + max(0, bits - 11))


def psnr(a: np.ndarray, b: np.ndarray, top: int) -> float:
    mse = float(np.mean((a - b) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(top * top / mse)


@pytest.mark.parametrize("codec,name,opts,pix_fmt", TABLE)
def test_each_format_each_encoder_takes_is_ffmpegs_conversion(tmp_path, codec, name, opts, pix_fmt):
    rgb = test_rgb(16 if bit_depth(pix_fmt) > 8 and (is_rgb_format(pix_fmt) or is_gray_format(pix_fmt)) else 8)
    spec = ColourSpec.of(pix_fmt, W // 4, H // 4, 2, 0, 2, 2)  # untagged: the rules read it as players do
    settings = EncoderSettings(codec=codec, pix_fmt=None if codec == "rawvideo" else pix_fmt,
                               options=tuple((opts or {}).items()))
    sink = VideoSink(tmp_path / name, source_info(tmp_path / "src", pix_fmt, spec), settings, scale=4)
    assert sink.pix_fmt == pix_fmt
    handed = write_with_sink(sink, rgb.astype(np.float32) / np.float32(np.iinfo(rgb.dtype).max))
    assert handed.format.name == pix_fmt
    want = reference(rgb, pix_fmt, sink.colour, sink.planes)
    got = raw(handed)
    step = level(pix_fmt)
    assert got.shape == want.shape and int(np.abs(got - want).max()) <= step
    with av.open(str(tmp_path / name)) as c:
        decoded = next(c.decode(video=0))
    if pix_fmt.startswith("p0") and name.endswith(".nut"):
        return  # NUT's tag for P010 reads back as rgb555le (FFmpeg's table): the conversion is checked above
    dec = decoded.format.name
    if is_rgb_format(pix_fmt):
        assert is_rgb_format(dec), dec  # RGB stays RGB (full range by definition)
    elif is_gray_format(pix_fmt):  # grey, or 4:0:0 that H.264's and HEVC's decoders give as YUV, neutral chroma
        assert is_gray_format(dec) or (raw(decoded)[H * W:] == 1 << (bit_depth(dec) - 1)).all(), dec
    else:
        assert not is_rgb_format(dec) and not is_gray_format(dec), dec
        if codec not in ("rawvideo", "mpeg4"):  # (NUT has no colour fields; FFmpeg's MPEG-4 writes none)
            assert KR_KB[decoded.colorspace] == KR_KB[sink.colour.matrix] and decoded.color_range == sink.colour.range
    a, b = raw(decoded), raw(handed)
    if dec != pix_fmt:  # the same samples in the decoder's layout (nv12 -> yuv420p, bgr0 -> gbrp, gray -> 4:0:0)
        a = a[:H * W] if is_gray_format(pix_fmt) and not is_gray_format(dec) else a
        b = b if is_gray_format(pix_fmt) and not is_gray_format(dec) else raw(handed.reformat(format=dec))
    if "0" in pix_fmt[:4]:  # bgr0's padding byte: whatever each side put there
        a, b = raw(decoded.reformat(format="rgb24")), raw(handed.reformat(format="rgb24"))
    if opts is not None:
        np.testing.assert_array_equal(a, b)
    else:
        assert psnr(a, b, (1 << bit_depth(dec)) - 1) >= 30


@pytest.mark.parametrize("source,codec,name,want", [
    ("gbrp", "ffv1", "o.mkv", "bgr0"),  # FFV1's 8-bit RGB is packed
    ("gbrp10le", "ffv1", "o.mkv", "gbrp10le"), ("gbrp16le", "ffv1", "o.mkv", "gbrp16le"),
    ("rgb48le", "png", "o.mov", "rgb48be"), ("yuv420p10le", "png", "o.mov", "rgb48be"),
    ("gbrp", "libx264rgb", "o.mkv", "bgr0"),
    ("gbrp", "libx264", "o.mkv", "yuv444p"), ("gbrp12le", "libx265", "o.mkv", "yuv444p12le"),  # lossy: YUV 4:4:4
    ("gbrp", "prores_ks", "o.mov", "yuv444p10le"),  # ProRes 4444, not 422
    ("gray10le", "ffv1", "o.mkv", "gray10le"), ("gray", "libx264", "o.mkv", "yuv420p"),
    ("yuva420p", "ffv1", "o.mkv", "yuva420p"), ("gbrap10le", "ffv1", "o.mkv", "gbrap10le"),  # alpha kept
    ("yuva420p", "libx264", "o.mkv", "yuv420p"), ("gbrap", "libx264rgb", "o.mkv", "bgr0"),  # (or dropped)
    ("yuv420p", "mjpeg", "o.mov", "yuvj420p"),  # JPEG's full range: limited is refused at normal compliance
    ("yuv410p", "ffv1", "o.mkv", "yuv410p"), ("yuv411p", "libx264", "o.mkv", "yuv420p"),
    # packed and semi-planar YUV keep their subsampling and depth (uyvy422 became 4:2:0); 1-bit grey stays grey
    # (it became yuv420p16le in FFV1); XYZ and Bayer are RGB of their depth (XYZ became 10-bit 4:2:0 in FFV1)
    ("uyvy422", "ffv1", "o.mkv", "yuv422p"), ("yuyv422", "libx264", "o.mkv", "yuv422p"),
    ("p010le", "libx264", "o.mkv", "yuv420p10le"), ("nv24", "ffv1", "o.mkv", "yuv444p"),
    ("monob", "ffv1", "o.mkv", "gray"), ("xyz12le", "ffv1", "o.mkv", "gbrp12le"),
    ("xyz12le", "libx265", "o.mkv", "yuv444p12le"), ("bayer_rggb16le", "ffv1", "o.mkv", "gbrp16le")])
def test_the_output_keeps_its_sources_kind_and_depth_where_the_codec_holds_them(tmp_path, recwarn, source, codec,
                                                                               name, want):
    """RGB in, RGB out (full range, the source's depth) where the codec is lossless or RGB only; grey likewise;
    alpha kept where the codec has a format for it, else dropped with one line; lossy codecs get YUV (4:4:4 for
    RGB)."""
    spec = ColourSpec.of(source, W // 4, H // 4, 2, 0, 2, 2)
    sink = VideoSink(tmp_path / name, source_info(tmp_path / "src", source, spec), EncoderSettings(codec=codec))
    assert sink.pix_fmt == want
    if is_rgb_format(want) or is_gray_format(want):
        assert (sink.colour.matrix, sink.colour.range) == (SPC_RGB, RANGE_FULL)
    alpha = [str(w.message) for w in recwarn if "alpha" in str(w.message)]
    assert len(alpha) == (1 if source.startswith(("yuva", "gbrap")) and not want.startswith(("yuva", "gbrap")) else 0), \
        alpha
    rgb = test_rgb(16)
    write_with_sink(sink, rgb.astype(np.float32) / np.float32(65535))
    if codec == "ffv1" and is_rgb_format(want):  # lossless RGB: the codes themselves, at the source's depth
        with av.open(str(tmp_path / name)) as c:
            cc = c.streams.video[0].codec_context
            assert (cc.colorspace, cc.color_range) == (SPC_RGB, RANGE_FULL)  # tagged as ffmpeg tags RGB: gbr, pc
            got = raw(next(c.decode(video=0)))
        top = (1 << bit_depth(want)) - 1
        r, g, b = np.floor(rgb.astype(np.float64) / 65535 * top + 0.5).astype(np.int64)
        if want == "bgr0":
            np.testing.assert_array_equal(got.reshape(H, W, 4)[..., :3], np.stack([b, g, r], -1))
        else:
            np.testing.assert_array_equal(got[:3 * H * W], np.concatenate([g.ravel(), b.ravel(), r.ravel()]))


@pytest.mark.parametrize("source,codec,name,requested,said", [
    ("yuv422p12le", "libx264", "o.mkv", None, "the source's 12-bit samples (yuv422p12le) are written in 10 bits: "
                                              "libx264 takes no more (FFV1 in .mkv keeps them: -c ffv1)"),
    ("gray16le", "libx264", "o.mp4", None, "the source's 16-bit samples (gray16le) are written in 10 bits: libx264 "
                                           "takes no more (FFV1 in .mkv keeps them: -c ffv1)"),
    ("yuv422p12le", "libx265", "o.mkv", None, None), ("yuv422p12le", "ffv1", "o.mkv", None, None),
    ("xyz12le", "ffv1", "o.mkv", None, None),  # (was "... in 10 bits: ffv1 takes no more (... -c ffv1)")
    ("yuv422p12le", "libx264", "o.mkv", "yuv420p", None)])  # asked for: said by the encoder line alone
def test_a_source_deeper_than_its_output_is_said(tmp_path, source, codec, name, requested, said):
    """A 12-bit master into H.264 became 10-bit without a word."""
    spec = ColourSpec.of(source, W // 4, H // 4, 2, 0, 2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink = VideoSink(tmp_path / name, source_info(tmp_path / "src", source, spec),
                         EncoderSettings(codec=codec, pix_fmt=requested))
        sink.abort()
    assert [str(w.message) for w in caught if "-bit samples" in str(w.message)] == ([said] if said else [])


def test_every_format_ffmpeg_has_has_a_planar_twin_of_its_layout_and_depth():
    """What an encoder that does not take a source's own format is offered instead: a format FFmpeg has, YUV of
    the same subsampling and at least the same depth, grey as grey, RGB (Bayer, XYZ included) as RGB."""
    from vsr.video.formats import planar_twin
    from vsr.video.planes import chroma_shifts

    twins = {}
    for name in sorted(av.video.format.names):
        if "f16" in name or "f32" in name or not av.VideoFormat(name).components:  # (float; hardware surfaces)
            continue
        twin = twins[name] = planar_twin(name)
        assert twin in av.video.format.names, name
        if twin == name:
            continue
        assert bit_depth(twin) >= min(bit_depth(name), 8) or name.startswith(("monob", "monow")), (name, twin)
        if twin.startswith("yuv"):
            assert chroma_shifts(twin) == chroma_shifts(name) and bit_depth(twin) >= bit_depth(name), (name, twin)
    assert {k: twins[k] for k in ("uyvy422", "nv12", "p010le", "nv16", "y210le", "xv30le", "monow", "xyz12le",
                                  "bayer_gbrg8", "yuv420p", "gbrp10le", "gray12le")} == {
        "uyvy422": "yuv422p", "nv12": "yuv420p", "p010le": "yuv420p10le", "nv16": "yuv422p", "y210le": "yuv422p10le",
        "xv30le": "yuv444p10le", "monow": "gray", "xyz12le": "gbrp12le", "bayer_gbrg8": "gbrp", "yuv420p": "yuv420p",
        "gbrp10le": "gbrp10le", "gray12le": "gray12le"}
