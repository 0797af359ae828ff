"""HDR sources: their static metadata read from the first decoded frame, and written again by the encoder and
into the container.

A PQ (SMPTE ST 2084) or HLG (ARIB STD-B67) source keeps its colour tags through :class:`~vsr.video.colour.ColourSpec`
like any other; what it carries besides them, the mastering display (SMPTE ST 2086) and the content light level
(MaxCLL, MaxFALL), is frame side data that no encoder takes from PyAV's frames, so each encoder that writes it
is given it in its own parameters (:data:`PARAMS`), in its own units.  FFmpeg's decoders put a container's
(mp4 ``mdcv``/``clli``, Matroska's ``MasteringMetadata``) on every frame too, so the first frame says all.

The container's own copy is what players read before any frame and all a codec without such messages (FFV1,
ProRes, VP9) has; FFmpeg's muxers take it only from stream side data, which PyAV cannot set, so vsr writes it
into the closed file itself (:func:`write_container_hdr`: :mod:`vsr.video.isobmff`, :mod:`vsr.video.matroska`).

Dynamic metadata changes from scene to scene and no encoder here takes it from vsr's frames.  HDR10+ follows
an HEVC or AV1 source into an HEVC or AV1 output all the same, as the message it came in (:mod:`vsr.video.hdr10plus`),
HDR Vivid an HEVC source into an HEVC output, and Dolby Vision's RPUs too (:mod:`vsr.video.dovi`); elsewhere each
is named in one warning, and the output keeps the static metadata.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from vsr.video import hdr10plus, isobmff, matroska, side_data
from vsr.video.colour import ColourSpec, bit_depth
from vsr.video.track_metadata import CONTAINERS, TrackMetadata, add_track_metadata

# AVColorTransferCharacteristic of HDR
TRC_SMPTE2084, TRC_ARIB_STD_B67 = 16, 18
HDR_TRANSFERS = {TRC_SMPTE2084: "PQ", TRC_ARIB_STD_B67: "HLG"}
# The default codecs of an HDR source, first the container holds: 10-bit HEVC (what HDR televisions and
# players decode), else AV1 (.webm holds no HEVC).  A source deeper than 8 bits gets them too (10-bit H.264,
# High 10, plays almost nowhere: vsr.video.encoder_choice.default_codec).
HDR_CODECS = ("libx265", "libsvtav1")
# Frame side data that changes per scene and cannot follow, by PyAV's name of its type.
DYNAMIC = {"DYNAMIC_HDR_PLUS": "HDR10+", "DOVI_RPU_BUFFER": "Dolby Vision", "DOVI_METADATA": "Dolby Vision",
           "DYNAMIC_HDR_VIVID": "HDR Vivid"}
# x265 and x264: chromaticities in 0.00002, luminance in 0.0001 cd/m2 (as HEVC's and H.264's SEI store them).
CHROMA_UNIT, LUMINANCE_UNIT = 50000, 10000


def is_hdr(colour: ColourSpec) -> bool:
    return colour.transfer in HDR_TRANSFERS


@dataclass(frozen=True)
class MasteringDisplay:
    """SMPTE ST 2086: CIE 1931 ``(x, y)`` of the display's ``red``, ``green``, ``blue`` and ``white`` (None where the
    source gives no primaries), its ``min_luminance`` and ``max_luminance`` in cd/m2 (None where it gives none)."""

    red: tuple[Fraction, Fraction] | None
    green: tuple[Fraction, Fraction] | None
    blue: tuple[Fraction, Fraction] | None
    white: tuple[Fraction, Fraction] | None
    min_luminance: Fraction | None
    max_luminance: Fraction | None

    @classmethod
    def from_side_data(cls, data: bytes) -> "MasteringDisplay":
        """``AVMasteringDisplayMetadata``: 10 AVRationals (r, g, b, white as x, y; min, max luminance) and two ints
        saying which half is there."""
        v = np.frombuffer(data, "=i4", count=22)
        q = [Fraction(int(v[i]), int(v[i + 1])) if v[i + 1] else None for i in range(0, 20, 2)]
        has_primaries, has_luminance = bool(v[20]), bool(v[21])
        xy = [(q[i], q[i + 1]) if has_primaries else None for i in range(0, 8, 2)]
        return cls(xy[0], xy[1], xy[2], xy[3], q[8] if has_luminance else None, q[9] if has_luminance else None)

    def x26x(self) -> str:
        """x265's ``master-display`` and x264's ``mastering-display``: ``G(x,y)B(x,y)R(x,y)WP(x,y)L(max,min)``."""
        def xy(p):
            return f"({round(p[0] * CHROMA_UNIT)},{round(p[1] * CHROMA_UNIT)})"
        return (f"G{xy(self.green)}B{xy(self.blue)}R{xy(self.red)}WP{xy(self.white)}"
                f"L({round(self.max_luminance * LUMINANCE_UNIT)},{round(self.min_luminance * LUMINANCE_UNIT)})")

    def svtav1(self) -> str:
        """SVT-AV1's ``mastering-display``: the same shape in decimals (AV1 stores its own fixed point)."""
        def xy(p):
            return f"({float(p[0]):.6g},{float(p[1]):.6g})"
        return (f"G{xy(self.green)}B{xy(self.blue)}R{xy(self.red)}WP{xy(self.white)}"
                f"L({float(self.max_luminance):.6g},{float(self.min_luminance):.6g})")

    @property
    def complete(self) -> bool:
        """Primaries and luminance both given: the encoders' parameters take only the whole set."""
        return self.red is not None and self.max_luminance is not None


@dataclass(frozen=True)
class HdrMetadata:
    """What an HDR source carries besides its colour tags: ``transfer`` ("PQ" or "HLG"), its ``mastering``
    display, its ``light_level`` (MaxCLL, MaxFALL in cd/m2) and the ``dynamic`` metadata that cannot follow."""

    transfer: str
    mastering: MasteringDisplay | None = None
    light_level: tuple[int, int] | None = None
    dynamic: tuple[str, ...] = ()

    def describe(self) -> dict:
        m = self.mastering
        return {"transfer": self.transfer,
                "mastering_display": m.x26x() if m is not None and m.complete else None,
                "max_cll": list(self.light_level) if self.light_level else None, "dynamic": list(self.dynamic)}


def read_hdr(frame: av.VideoFrame, colour: ColourSpec) -> HdrMetadata | None:
    """The HDR metadata of a source whose first decoded frame is ``frame`` (None: not a PQ or HLG source)."""
    if not is_hdr(colour):
        return None
    mastering = light = None
    dynamic: list[str] = []
    for sd in side_data.entries(frame):
        name = sd.type.name
        if name == "MASTERING_DISPLAY_METADATA":
            mastering = MasteringDisplay.from_side_data(bytes(sd))
        elif name == "CONTENT_LIGHT_LEVEL":
            cll = np.frombuffer(bytes(sd), "=u4", count=2)
            light = (int(cll[0]), int(cll[1]))
        elif name in DYNAMIC and DYNAMIC[name] not in dynamic:
            dynamic.append(DYNAMIC[name])
    return HdrMetadata(HDR_TRANSFERS[colour.transfer], mastering, light, tuple(dynamic))


def _x265(hdr: HdrMetadata, pix_fmt: str) -> dict[str, str]:
    p = _x264(hdr, pix_fmt)
    if not p:
        return {}
    p = {"master-display": p["mastering-display"]} if "mastering-display" in p else {}
    if hdr.light_level is not None:
        p["max-cll"] = "{},{}".format(*hdr.light_level)
    p["hdr10"] = "1"  # (x265 writes the SEI with every keyframe: a player that seeks finds it)
    if hdr.transfer == "PQ" and pix_fmt == "yuv420p10le":
        p["hdr10-opt"] = "1"  # x265's luma and chroma QP offsets for PQ (it refuses them, loudly, on other input)
    return p


def _x264(hdr: HdrMetadata, pix_fmt: str) -> dict[str, str]:
    p = {}
    if hdr.mastering is not None and hdr.mastering.complete:
        p["mastering-display"] = hdr.mastering.x26x()
    if hdr.light_level is not None:
        p["cll"] = "{},{}".format(*hdr.light_level)
    return p


def _svtav1(hdr: HdrMetadata, pix_fmt: str) -> dict[str, str]:
    p = {}
    if hdr.mastering is not None and hdr.mastering.complete:
        p["mastering-display"] = hdr.mastering.svtav1()
    if hdr.light_level is not None:
        p["content-light"] = "{},{}".format(*hdr.light_level)
    return p


# Encoders that write the static metadata: their parameters option and what goes into it.
PARAMS = {"libx265": ("x265-params", _x265), "libx264": ("x264-params", _x264),
          "libsvtav1": ("svtav1-params", _svtav1)}


def hdr_options(codec: str, pix_fmt: str, hdr: HdrMetadata | None, opts: dict[str, str],
                container: str | None = None) -> dict[str, str]:
    """:func:`hdr_params`, with each of :func:`hdr_warnings` said as a warning."""
    for text in hdr_warnings(codec, pix_fmt, hdr, container):
        warnings.warn(text, stacklevel=3)
    return hdr_params(codec, pix_fmt, hdr, opts)


# the dynamic metadata vsr reads from a source's packets (vsr.video.hdr10plus), and the outputs that keep each
_READ = {"HDR10+": "HEVC or AV1", "HDR Vivid": "HEVC"}


def hdr_warnings(codec: str, pix_fmt: str, hdr: HdrMetadata | None, container: str | None = None,
                 hdr10plus_read: bool = False) -> list[str]:
    """What of an HDR source does not follow into ``codec`` in ``pix_fmt`` in a file of FFmpeg's format
    ``container`` (None: a stream, which is not rewritten), one line each: dynamic metadata (HDR10+ and HDR Vivid
    follow where the source's are read, ``hdr10plus_read``, and ``codec`` carries them), fewer than 10 bits,
    static metadata that neither ``codec`` nor the container can hold (none for an SDR source, ``hdr`` None)."""
    if hdr is None:
        return []
    said = []
    kept = [n for n in hdr.dynamic if n in _READ and hdr10plus_read
            and hdr10plus.carried_by(av.Codec(codec, "w").canonical_name, n)]
    # (Dolby Vision says its own: vsr.video.dovi.carried)
    lost = [name for name in hdr.dynamic if name not in kept and name != "Dolby Vision"]
    if lost:
        hint = "".join(f" (an {_READ[n]} output keeps {n})" for n in lost if n in _READ and hdr10plus_read)
        said.append(f"the source's {' and '.join(lost)} dynamic metadata cannot follow: the output keeps its static "
                    f"{hdr.transfer} metadata (colour tags, mastering display, light level)"
                    f"{''.join(' and ' + n for n in kept)} only{hint}")
    if bit_depth(pix_fmt) < 10:
        said.append(f"{codec} writes this {hdr.transfer} source in {pix_fmt}: 8 bits band its gradients "
                    f"(libx265, the default, writes 10)")
    if codec not in PARAMS and container not in CONTAINERS and has_static(hdr):
        where = f"this {container} output" if container else "a stream"
        said.append(f"{codec} in {where} cannot hold the source's HDR mastering display and content light level: "
                    f"the output keeps the {hdr.transfer} colour tags only (libx265, the default, writes them, as "
                    f"do .mkv, .mp4, .mov and .webm files)")
    return said


def hdr_params(codec: str, pix_fmt: str, hdr: HdrMetadata | None, opts: dict[str, str]) -> dict[str, str]:
    """``opts`` with the source's static HDR metadata added to ``codec``'s own parameters (a key the user gave
    there stays the user's); ``opts`` itself where ``codec`` cannot write it or the source is SDR."""
    if hdr is None or codec not in PARAMS:
        return opts
    key, params_of = PARAMS[codec]
    given = opts.get(key, "")
    mine = {k.split("=")[0].strip() for k in given.split(":") if k.strip()}
    added = [f"{k}={v}" for k, v in params_of(hdr, pix_fmt).items() if k not in mine]
    if not added:
        return opts
    return {**opts, key: ":".join(([given] if given else []) + added)}


def has_static(hdr: HdrMetadata | None) -> bool:
    """Whether ``hdr`` holds static metadata a file can carry: a complete mastering display, or a light level."""
    return hdr is not None and (hdr.light_level is not None or (hdr.mastering is not None and hdr.mastering.complete))


def write_container_hdr(path: Path, container: str, hdr: HdrMetadata | None, codec: str) -> str | None:
    """Write ``hdr``'s static metadata into the closed file at ``path`` of FFmpeg's format ``container`` (one of
    :data:`CONTAINERS`; else nothing), whose video ``codec`` wrote: the video track's ``mdcv``/``clli`` boxes, or
    Matroska's ``Colour`` elements.  Returns why it could not (one line), or None."""
    meta = hdr_metadata(container, hdr)
    try:
        add_track_metadata(path, container, meta)
    except isobmff.NotWritable as e:
        return hdr_not_written(container, hdr, codec, e)
    return None


def hdr_metadata(container: str, hdr: HdrMetadata | None) -> TrackMetadata:
    """``hdr``'s static metadata as ``container`` holds it beside the video track (nothing where it holds none
    or there is none): ``mdcv``/``clli`` boxes, or Matroska's ``Colour`` elements."""
    if container not in CONTAINERS or not has_static(hdr):
        return TrackMetadata()
    m = hdr.mastering if hdr.mastering is not None and hdr.mastering.complete else None
    if container in ("mp4", "mov"):
        boxes = []
        if m is not None:
            boxes.append(isobmff.mdcv((m.red, m.green, m.blue), m.white, (m.max_luminance, m.min_luminance)))
        if hdr.light_level is not None:
            boxes.append(isobmff.clli(*hdr.light_level))
        return TrackMetadata(boxes=boxes)
    return TrackMetadata(colour=matroska.colour_metadata(
        (m.red, m.green, m.blue) if m else None, m.white if m else None,
        (m.max_luminance, m.min_luminance) if m else None, hdr.light_level))


def hdr_not_written(container: str, hdr: HdrMetadata, codec: str, e: Exception) -> str:
    """The line that says :func:`hdr_metadata` could not be written into a ``container`` file (``e``: why)."""
    kept = "its video stream carries them" if codec in PARAMS else f"it keeps the {hdr.transfer} colour tags only"
    return (f"the source's HDR mastering display and content light level could not be written into the "
            f"{container} file ({e}): {kept}")


_XY = r"\(\s*([\d.]+)\s*,\s*([\d.]+)\s*\)"
_MASTER = re.compile(rf"G{_XY}B{_XY}R{_XY}WP{_XY}L{_XY}$")
# each encoder's parameter names of the mastering display and the light level, and its chromaticity and luminance
# units (SVT-AV1 takes decimals)
_NAMES = {"libx265": ("master-display", "max-cll", CHROMA_UNIT, LUMINANCE_UNIT),
          "libx264": ("mastering-display", "cll", CHROMA_UNIT, LUMINANCE_UNIT),
          "libsvtav1": ("mastering-display", "content-light", 1, 1)}


def as_encoded(codec: str, options: dict[str, str], hdr: HdrMetadata | None) -> HdrMetadata | None:
    """``hdr`` as the encoder ``codec`` writes it with ``options``: a mastering display or light level the user
    gave in its parameters (``-x x265-params=max-cll=...``) in place of the source's, so that the container's copy
    says what the stream says."""
    if hdr is None or codec not in _NAMES:
        return hdr
    master_key, light_key, chroma, luma = _NAMES[codec]
    given = dict(kv.split("=", 1) for kv in options.get(PARAMS[codec][0], "").split(":") if "=" in kv)
    if light_key in given:
        try:
            cll, fall = (int(v) for v in given[light_key].split(","))
            hdr = replace(hdr, light_level=(cll, fall))
        except ValueError:
            pass  # the encoder says what it makes of it
    m = _MASTER.match(given.get(master_key, "").replace(" ", ""))
    if m is not None:
        g, b, r, w, lum = [(Fraction(m[i]), Fraction(m[i + 1])) for i in range(1, 11, 2)]
        xy = [(x / chroma, y / chroma) for x, y in (r, g, b, w)]
        hdr = replace(hdr, mastering=MasteringDisplay(*xy, lum[1] / luma, lum[0] / luma))
    return hdr
