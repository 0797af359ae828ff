"""Degradations that turn an HR clip into the LR clip a real video would give: blur, downscale with a random
kernel, Gaussian/Poisson noise, JPEG, and real H.264 compression of the whole LR clip (PyAV, libx264).

``(T, H, W, 3)`` uint8 HR -> ``(T, H/4, W/4, 3)`` uint8 LR.  Every probability and range lives in a TOML file
(``configs/degrade/NAME.toml``, loaded by :func:`load_degrade`); the code only draws from them.  Parameters are
drawn once per clip (one camera, one encoder), noise once per frame.  Everything random comes from the
``numpy.random.Generator`` passed in and x264 runs single-threaded without its AVX-512 functions (see
:func:`x264`), so a seed fixes the LR bytes.

Order (RealBasicVSR's video pipeline, one pass): blur (HR) -> resize to x1/4 -> noise -> JPEG -> x264.
``clean`` is the probability of the plain BI degradation instead (MATLAB bicubic x1/4, today's training pairs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from vsr.errors import ConfigError, InputError
from vsr.files import config_dir
from vsr.model.config import read_toml
from vsr.quality.resize import bicubic_downscale_x4

SCALE = 4
MODES = ("clean", "real", "mix")
# Resize kernels by name; "matlab" is MATLAB's antialiased bicubic (the BI degradation).
KERNELS = {"area": cv2.INTER_AREA, "bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC,
           "lanczos": cv2.INTER_LANCZOS4, "matlab": None}
# What x264 needs to pick its AVX-512 functions (x264's own test: F, CD, BW, DQ and VL), as /proc/cpuinfo names them.
X264_AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")


@dataclass(frozen=True)
class Blur:
    """Gaussian blur of the HR frames: isotropic, or anisotropic with a random angle (sigmas in HR pixels)."""

    p: float = 0.0
    sigma: tuple[float, float] = (0.2, 3.0)
    anisotropic: float = 0.5  # share of anisotropic kernels
    ratio: tuple[float, float] = (0.3, 1.0)  # minor/major sigma of an anisotropic kernel


@dataclass(frozen=True)
class Resize:
    """Downscale to exactly 1/4 with a random kernel, optionally through a random intermediate size first."""

    kernels: tuple[str, ...] = ("matlab",)
    two_step: float = 0.0  # probability of an intermediate resize
    intermediate: tuple[float, float] = (0.5, 1.0)  # its scale relative to HR


@dataclass(frozen=True)
class Noise:
    """Additive Gaussian noise (std in 8-bit levels) or Poisson (shot) noise at a random photon peak."""

    p: float = 0.0
    gaussian: float = 0.5  # share of Gaussian noise (the rest is Poisson)
    sigma: tuple[float, float] = (1.0, 10.0)
    peak: tuple[float, float] = (50.0, 1000.0)  # Poisson: photons at white, drawn log-uniform (fewer = noisier)
    gray: float = 0.4  # probability the noise is the same in all channels


@dataclass(frozen=True)
class Jpeg:
    """Per-frame JPEG (OpenCV) at one random quality for the clip."""

    p: float = 0.0
    quality: tuple[int, int] = (40, 95)


@dataclass(frozen=True)
class Video:
    """H.264 (libx264) of the whole LR clip, encoded and decoded in memory: real codec artefacts."""

    p: float = 0.0
    crf: tuple[int, int] = (18, 35)
    presets: tuple[str, ...] = ("medium",)
    fps: int = 25
    gop: int = 0  # keyframe interval; 0 = x264's default


@dataclass(frozen=True)
class Context:
    """What a training window is degraded as part of (:class:`vsr.train.data.PairSampler`).

    A real video is compressed whole: its macroblock grid, its rate control and its GOP (I, P and B frames)
    act on full frames and long clips, not on a 24-pixel patch of 5 frames.  ``lr_size`` > 0: the degraded clip
    is ``lr_size`` LR pixels square and the training patch is cut from it afterwards; ``frames`` > 0: the clip
    has that many frames and the training window is its middle ``num_frame``.  0: the window itself.
    """

    lr_size: int = 0
    frames: int = 0


@dataclass(frozen=True)
class Degradation:
    """One recipe: the probability of a clean (BI) clip and the settings of each operation."""

    name: str
    clean: float = 0.0
    blur: Blur = Blur()
    resize: Resize = Resize()
    noise: Noise = Noise()
    jpeg: Jpeg = Jpeg()
    video: Video = Video()
    context: Context = Context()


CLEAN = Degradation("clean", clean=1.0)
_TABLES = {"blur": Blur, "resize": Resize, "noise": Noise, "jpeg": Jpeg, "video": Video, "context": Context}


def degrade_dir() -> Path:
    return config_dir() / "degrade"


def load_degrade(name_or_path: str | Path) -> Degradation:
    """``"clean"``, ``configs/degrade/<name>.toml`` or a TOML path; a bad key or value is a one-line
    :class:`ConfigError` naming the file, the key and what it must be."""
    if str(name_or_path) == "clean":
        return CLEAN
    p = Path(name_or_path)
    if p.suffix == ".toml" and not p.is_file():  # a file the user names: say what is wrong with it
        raise ConfigError(f"degradation {p} is a folder, not a TOML file" if p.is_dir()
                          else f"degradation recipe: no such file: {p}")
    if p.suffix != ".toml":
        p = degrade_dir() / f"{name_or_path}.toml"
    if not p.is_file():
        known = sorted(["clean", *(f.stem for f in degrade_dir().glob("*.toml"))])
        raise ConfigError(f"unknown degradation {str(name_or_path)!r} (known: {', '.join(known)}, or a .toml path)")
    data = read_toml(p)
    try:
        return _from_toml(data, p.stem)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def _from_toml(data: dict, stem: str) -> Degradation:
    top = {"name", "description", "clean", *_TABLES}
    unknown = sorted(set(data) - top)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(top))})")
    parts = {}
    for key, cls in _TABLES.items():
        table = data.get(key, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{key} must be a table ([{key}])")
        parts[key] = _table(cls, table, key)
    clean = data.get("clean", 0.0)
    _check("clean", clean, cls_default=0.0)
    return Degradation(name=str(data.get("name", stem)), clean=float(clean), **parts)


def _table(cls, table: dict, key: str):
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(f"[{key}] has unknown key {unknown[0]!r} (known: {', '.join(sorted(names))})")
    values = {}
    defaults = cls()
    for name, value in table.items():
        where = f"[{key}] {name}"
        _check(where, value, cls_default=getattr(defaults, name))
        values[name] = tuple(value) if isinstance(value, list) else value
    obj = cls(**values)
    if isinstance(obj, Resize):
        bad = [k for k in obj.kernels if k not in KERNELS]
        if bad or not obj.kernels:
            raise ConfigError(f"[{key}] kernels: {bad[0] if bad else 'empty'!r} is not one of {', '.join(KERNELS)}")
    if isinstance(obj, Video):
        bad = [k for k in obj.presets if k not in X264_PRESETS]
        if bad or not obj.presets:
            raise ConfigError(f"[{key}] presets: {bad[0] if bad else 'empty'!r} is not an x264 preset")
        if not 0 <= obj.crf[0] <= obj.crf[1] <= 51:
            raise ConfigError(f"[{key}] crf: {list(obj.crf)} must be [lo, hi] with 0 <= lo <= hi <= 51")
    return obj


def _check(where: str, value, *, cls_default) -> None:
    """``value`` must have the default's shape: a number, a [lo, hi] pair, or a list of names."""
    def real(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if isinstance(cls_default, tuple) and cls_default and isinstance(cls_default[0], str):
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{where} = {value!r}: must be a list of names")
    elif isinstance(cls_default, tuple):
        if not (isinstance(value, list) and len(value) == 2 and all(real(v) for v in value) and value[0] <= value[1]
                and value[0] >= 0):
            raise ConfigError(f"{where} = {value!r}: must be a range [lo, hi] with 0 <= lo <= hi")
    elif isinstance(cls_default, int):  # fps, gop, context sizes
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise ConfigError(f"{where} = {value!r}: must be a whole number >= 0")
    elif not (real(value) and 0 <= value <= 1):
        raise ConfigError(f"{where} = {value!r}: must be a probability in [0, 1]")


# -- the operations ----------------------------------------------------------------------------------------------

def gaussian_kernel(sigma_x: float, sigma_y: float, angle: float) -> np.ndarray:
    """A normalised 2-D Gaussian ``(k, k)`` float32 with axes ``sigma_x``, ``sigma_y`` rotated by ``angle`` rad."""
    radius = max(1, int(math.ceil(3 * max(sigma_x, sigma_y))))
    ax = np.arange(-radius, radius + 1, dtype=np.float64)
    xx, yy = np.meshgrid(ax, ax)
    c, s = math.cos(angle), math.sin(angle)
    u, v = c * xx + s * yy, -s * xx + c * yy
    k = np.exp(-0.5 * ((u / sigma_x) ** 2 + (v / sigma_y) ** 2))
    return (k / k.sum()).astype(np.float32)


def blur(clip: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Each frame of ``(T, H, W, 3)`` uint8 filtered with ``kernel`` (reflected borders), uint8."""
    return np.stack([cv2.filter2D(f, -1, kernel, borderType=cv2.BORDER_REFLECT_101) for f in clip])


def resize(clip: np.ndarray, size: tuple[int, int], kernel: str) -> np.ndarray:
    """Each frame resized to ``size = (h, w)`` with the named kernel of :data:`KERNELS`, uint8."""
    h, w = size
    if kernel == "matlab":
        if clip.shape[1] == SCALE * h and clip.shape[2] == SCALE * w:
            return np.stack([bicubic_downscale_x4(f) for f in clip])
        kernel = "area"  # MATLAB bicubic is only for the exact x1/4 step
    return np.stack([cv2.resize(f, (w, h), interpolation=KERNELS[kernel]) for f in clip])


def add_noise(clip: np.ndarray, rng: np.random.Generator, *, gaussian: bool, level: float, gray: bool) -> np.ndarray:
    """Gaussian noise of std ``level`` (8-bit levels) or Poisson noise at ``level`` photons for white, a fresh
    draw per frame; ``gray``: one draw for all three channels.  uint8 out."""
    x = clip.astype(np.float32)
    shape = (*clip.shape[:3], 1) if gray else clip.shape
    if gaussian:
        n = rng.normal(0.0, level, shape).astype(np.float32)
    else:
        base = x.mean(axis=3, keepdims=True) if gray else x
        n = (rng.poisson(base / 255.0 * level) / level * 255.0 - base).astype(np.float32)
    return np.clip(np.round(x + n), 0, 255).astype(np.uint8)


def jpeg(clip: np.ndarray, quality: int) -> np.ndarray:
    """Each frame through OpenCV's JPEG encoder and decoder at ``quality``."""
    out = []
    for f in clip:
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(f, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
        if not ok:
            raise RuntimeError("OpenCV could not JPEG-encode a frame")
        out.append(cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))
    return np.stack(out)


@lru_cache(maxsize=1)
def x264_asm() -> dict[str, str]:
    """The x264 options that keep its output a function of its input: ``asm=AVX2`` where the CPU has AVX-512.

    x264's AVX-512 functions read memory it never wrote: on this project's AVX-512 EPYC the same clip, encoded
    single-threaded, came out different in 5 to 20 % of encodes, and under glibc's ``MALLOC_PERTURB_`` (which fills
    fresh memory with a given byte) differently for every one of 45 clips, sizes and presets tried; capped at
    AVX2 (which every AVX-512 CPU has) none changed.  Elsewhere x264 chooses its functions itself.
    """
    from vsr.quant.isa import cpu_flags

    return {"x264-params": "asm=AVX2"} if all(f in cpu_flags() for f in X264_AVX512) else {}


def x264(clip: np.ndarray, *, crf: int, preset: str, fps: int = 25, gop: int = 0) -> np.ndarray:
    """The clip ``(T, h, w, 3)`` uint8 encoded as one H.264 stream (libx264, yuv420p, single thread, no AVX-512:
    the bytes depend only on the input and the settings, see :func:`x264_asm`) and decoded back, in memory."""
    import av

    t, h, w = clip.shape[:3]
    # 4:2:0 needs even sides: edge-pad, then crop the decoded frames back.
    ph, pw = h + h % 2, w + w % 2
    if (ph, pw) != (h, w):
        clip = np.pad(clip, ((0, 0), (0, ph - h), (0, pw - w), (0, 0)), mode="edge")
    enc = av.CodecContext.create("libx264", "w")
    enc.width, enc.height, enc.pix_fmt = pw, ph, "yuv420p"
    enc.time_base = Fraction(1, fps)
    enc.framerate = Fraction(fps, 1)
    enc.thread_count = 1
    opts = {"crf": str(int(crf)), "preset": preset, **x264_asm()}
    if gop:
        opts["g"] = str(int(gop))
    enc.options = opts
    packets = []
    for i, f in enumerate(clip):
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24").reformat(format="yuv420p")
        frame.pts = i
        packets.extend(enc.encode(frame))
    packets.extend(enc.encode(None))
    dec = av.CodecContext.create("h264", "r")
    dec.thread_count = 1
    out = []
    for p in packets:
        out.extend(dec.decode(p))
    out.extend(dec.decode(None))
    if len(out) != t:
        raise RuntimeError(f"x264 round trip gave {len(out)} frames for {t}")
    return np.stack([f.to_ndarray(format="rgb24")[:h, :w] for f in out])


# -- drawing a recipe --------------------------------------------------------------------------------------------

def _uniform(rng: np.random.Generator, r: tuple[float, float]) -> float:
    return float(rng.uniform(r[0], r[1])) if r[1] > r[0] else float(r[0])


def _pick(rng: np.random.Generator, names: tuple[str, ...]) -> str:
    return names[int(rng.integers(len(names)))] if len(names) > 1 else names[0]


def degrade_clip(hr: np.ndarray, d: Degradation, rng: np.random.Generator) -> np.ndarray:
    """``(T, H, W, 3)`` uint8 HR (``H``, ``W`` multiples of 4) -> ``(T, H/4, W/4, 3)`` uint8 LR under ``d``.

    The same draws from ``rng`` always give the same LR bytes.
    """
    t, hh, ww = hr.shape[:3]
    if hh % SCALE or ww % SCALE:
        raise ValueError(f"HR clip is {ww}x{hh}: sides must be multiples of {SCALE}")
    size = (hh // SCALE, ww // SCALE)
    # Every probability is drawn whether or not it is used, so one op's setting never shifts another's draws.
    u = rng.random(6)
    if u[0] < d.clean:
        return resize(hr, size, "matlab")
    x = hr
    b = d.blur
    if u[1] < b.p:
        s = _uniform(rng, b.sigma)
        if rng.random() < b.anisotropic:
            x = blur(x, gaussian_kernel(s, s * _uniform(rng, b.ratio), float(rng.uniform(0, math.pi))))
        else:
            x = blur(x, gaussian_kernel(s, s, 0.0))
    r = d.resize
    if u[2] < r.two_step:
        k = _uniform(rng, r.intermediate)
        x = resize(x, (max(size[0], round(hh * k)), max(size[1], round(ww * k))), _pick(rng, r.kernels))
    x = resize(x, size, _pick(rng, r.kernels))
    n = d.noise
    if u[3] < n.p:
        gaussian = bool(rng.random() < n.gaussian)
        level = _uniform(rng, n.sigma) if gaussian else math.exp(_uniform(rng, (math.log(n.peak[0]),
                                                                                   math.log(n.peak[1]))))
        x = add_noise(x, rng, gaussian=gaussian, level=level, gray=bool(rng.random() < n.gray))
    if u[4] < d.jpeg.p:
        x = jpeg(x, int(rng.integers(d.jpeg.quality[0], d.jpeg.quality[1] + 1)))
    v = d.video
    if u[5] < v.p:
        crf = int(rng.integers(v.crf[0], v.crf[1] + 1))
        x = x264(x, crf=crf, preset=_pick(rng, v.presets), fps=v.fps, gop=v.gop)
    return x


def clip_degradation(name_or_path: str | Path, seed: int = 0):
    """The :class:`vsr.quality.evaluate.ClipDegradation` that ``vsr eval --degrade NAME --seed S`` uses: the
    recipe's draws come from ``numpy.random.default_rng(seed)``, so one seed gives one LR clip."""
    from vsr.quality.evaluate import ClipDegradation

    if seed < 0:
        raise InputError(f"--seed {seed}: must be >= 0")
    d = load_degrade(name_or_path)
    return ClipDegradation(f"{d.name} seed {seed}", lambda clip: degrade_clip(clip, d, np.random.default_rng(seed)))
