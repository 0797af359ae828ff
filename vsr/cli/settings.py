"""The options of an upscale (model, runner, encoder) shared by ``vsr upscale`` and ``vsr jobs add``, and the
settings objects they build: :class:`~vsr.backends.BackendRequest`, :class:`~vsr.video.EncoderSettings`,
:class:`~vsr.pipeline.RunnerSettings`."""

from __future__ import annotations

from vsr.cli.common import add_precision_args, check_int8_options, precision_options, unused_int8_options
from vsr.errors import InputError, tell


# The options that choose the frames a run outputs: by index, or by time (vsr.video.clock), not both
_FRAME_OPTIONS = (
    ("--frames", "A:B", "only output frames A..B-1 (0-based; default: all)"),
    ("--start", "T", "only output frames shown at T or later, on the source's clock (its first frame at 0), T in "
                     "seconds (90, 90.5) or [H:]M:S (1:30, 01:30:00.25) (default: its first frame)"),
    ("--end", "T", "only output frames shown before T (default: the source's end); --start/--end or --frames, not "
                   "both"),
)


def add_upscale_options(p, *, frames: bool = True) -> None:
    """The model, runner and encoder option groups of ``vsr upscale`` (``frames``: with ``--frames A:B`` and
    ``--start``/``--end``)."""
    from vsr.backends.registry import backend_names, plan_names

    m = p.add_argument_group("model")
    m.add_argument("--weights", default="auto", help="auto (default: 'real' for a compressed source, 'default' for a "
                   "clean one, measured and said in one line), checkpoint file, 'default' or 'real' (bundled), a "
                   "fetched official checkpoint's name (vsr models) or 'random' (tests)")
    m.add_argument("--config", default=None, help="model config name or TOML file (default: from the weights)")
    m.add_argument("--backend", default="auto", help=f"{' | '.join(backend_names())} (default: auto = cuda where "
                   "torch sees a GPU and cupy or pycuda is installed, else ONNX Runtime)")
    m.add_argument("--plan", default="auto",
                   help=f"{' | '.join(plan_names())} (ONNX Runtime graph plan; default: auto = split)")
    m.add_argument("--threads", default=None,
                   help="inference threads (default: the cores this process may use: affinity, CPU quota)")
    m.add_argument("--per-window-features", action="store_true",
                   help="compute each window's frames' features for every window, as before vsr kept each "
                        "frame's (same output, slower; for comparisons)")
    add_precision_args(p, auto=True)
    r = p.add_argument_group("runner")
    r.add_argument("--batch", default="1", help="windows (or tiles) per inference call (default 1)")
    for name, metavar, text in _FRAME_OPTIONS if frames else ():
        r.add_argument(name, default=None, metavar=metavar, help=text)
    r.add_argument("--tile", default=None, help="LR tile side in pixels; 0 = never tile (default: from "
                                                "--memory-budget)")
    r.add_argument("--tile-overlap", default="16", help="LR pixels of context around each tile (default 16)")
    r.add_argument("--memory-budget", default=None, metavar="MB",
                   help="peak memory of the whole run (model, frames in flight, encoder); sets the automatic "
                        "tile size (default: half of the machine's memory, rounded down to 1024, 1024..16384; "
                        "vsr jobs: 3072)")
    r.add_argument("--scene-cuts", default="auto", metavar="auto|off|FILE",
                   help="windows never cross a scene cut: auto = detect cuts (default), off = ignore them, FILE = "
                        "a text file of the frame indices that start a new scene")
    r.add_argument("--deinterlace", default="auto", choices=("auto", "off", "double", "film"),
                   help="auto = an interlaced source's frames are deinterlaced (bwdif) before they are upscaled, "
                        "the same frames at the same times (default); double = each field a frame of its own: "
                        "twice the frames at twice the rate (50p from 25i); film = inverse telecine: film's own "
                        "frames out of 3:2 pulldown (23.976 from 29.97); off = upscale them as decoded")
    r.add_argument("--frame-rate", default=None, metavar="R",
                   help="a folder of frames' rate, frame i at i/R seconds: 24, 25, 23.976 (= 24000/1001), 29.97 (= "
                        "30000/1001), 30000/1001, ... (default 25); a video has its own timestamps: refused")
    r.add_argument("--scene-threshold", default=None, metavar="X",
                   help="detector's ratio of a cut's frame difference to its neighbours' (default: "
                        "configs/pipeline/scenes.toml)")
    e = p.add_argument_group("encoder")
    e.add_argument("--scale", default=None, metavar="S",
                   help="output size: S times the source's each way, 1 to 4 (2: 1080p -> 2160p; 1.5: 720p -> "
                        "1080p; default 4), or a height: 2160p = the shorter side 2160 whatever the source's "
                        "(within x1..x4); EDVR upscales x4, then each frame is downscaled (Lanczos)")
    e.add_argument("-c", "--codec", default=None, help="video encoder: libx264 (default where the container holds "
                                                 "H.264; HDR and deeper than 8 bits: libx265; alpha: libvpx-vp9 in "
                                                 ".webm/.mkv, prores_ks in .mov), libx265, libsvtav1, ffv1, "
                                                 "prores_ks, ...")
    e.add_argument("--crf", default=None, help="constant rate factor (codec's default if omitted)")
    e.add_argument("--preset", default=None, help="encoder preset")
    e.add_argument("--pix-fmt", default=None, help="output pixel format (default: the source's, e.g. "
                                                   "yuv420p10le for 10-bit)")
    e.add_argument("-x", dest="encoder_options", action="append", default=[], metavar="KEY=VALUE",
                   help="encoder option, repeatable (e.g. -x tune=film -x x264-params=aq-mode=3)")


def say_weights(choice) -> None:
    """The weights ``--weights auto`` chose for a source (:class:`vsr.model.choice.WeightsChoice`), in one line
    on standard error."""
    from vsr.errors import printable

    tell(f"vsr: weights: {printable(choice.line())}")


def say_precision(request) -> None:
    """The precision ``--precision auto`` chose for a run (:class:`vsr.backends.PrecisionChoice`), in one line on
    standard error; nothing where a precision was asked for (the option, ``$VSR_PRECISION``) or none was chosen (a
    backend without an int8 plan)."""
    if request.precision is not None and request.precision.asked == "auto":
        tell(f"vsr: precision: {request.precision.line()}")


class PrecisionLine:
    """:func:`say_precision`, once, when a run is past its checks (its input, output, encoder and weights): just
    before the weights line of ``--weights auto`` (``weights(choice)``), else at the first of the backend's own
    steps (``phase(name)``: export, plan, sessions, warm-up) or the first frame (``start()``).  So it is still the
    run's first line, and a run refused for a missing input, a wrong codec or a mistyped weights name prints its
    one error line alone.  ``quiet``: never."""

    CHECKING = ("choosing backend", "opening input", "choosing weights", "loading model")

    def __init__(self, request, quiet: bool = False):
        self.request = request
        self.said = quiet

    def start(self) -> None:
        if not self.said:
            self.said = True
            say_precision(self.request)

    def phase(self, name: str) -> None:
        if name not in self.CHECKING:
            self.start()

    def weights(self, choice) -> None:
        self.start()
        say_weights(choice)


def to_int(value, option: str, minimum: int, maximum: int | None = None) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{option} must be an integer, not {value!r}") from None
    if maximum is not None and not minimum <= v <= maximum:
        raise InputError(f"{option} must be between {minimum} and {maximum}, not {v}")
    if v < minimum:
        raise InputError(f"{option} must be >= {minimum}, not {v}")
    return v


def parse_threads(value) -> int | None:
    """``--threads``: None (all cores), or 1 to :data:`~vsr.backends.options.MAX_THREADS`."""
    from vsr.backends.options import MAX_THREADS

    return None if value is None else to_int(value, "--threads", 1, MAX_THREADS)


def parse_frames(text: str | None) -> tuple[int, int | None]:
    """``"A:B"``, ``"A:"``, ``":B"`` -> (A, B or None)."""
    if text is None:
        return 0, None
    parts = text.split(":")
    if len(parts) != 2:
        raise InputError(f"--frames must be A:B (e.g. 0:100), not {text!r}")
    a = to_int(parts[0], "--frames start", 0) if parts[0] else 0
    b = to_int(parts[1], "--frames stop", 1) if parts[1] else None
    if b is not None and b <= a:
        raise InputError(f"--frames {text}: stop must be greater than start")
    return a, b


def parse_times(args) -> tuple | None:
    """``--start T`` and ``--end T`` -> ``(start, end)`` in seconds (either None: not given), or None where neither
    is given; with ``--frames``, or an end not after the start, one line."""
    from vsr.video.clock import parse_time

    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start is None and end is None:
        return None
    if getattr(args, "frames", None) is not None:
        raise InputError(f"--frames {args.frames} and {times_said(args)} both choose the frames: give one of them")
    s = None if start is None else parse_time(start, "--start")
    e = None if end is None else parse_time(end, "--end")
    if e is not None and e <= (s or 0):
        raise InputError(f"{times_said(args)}: the end must be after the start" + ("" if s else " (0)"))
    return s, e


def times_said(args) -> str:
    """``--start``/``--end`` as given (``--start 1:30 --end 1:40``), for lines about them."""
    return " ".join(f"--{o} {v}" for o, v in (("start", args.start), ("end", args.end)) if v is not None)


def times_line(frames: tuple[int, int | None], times: tuple) -> str:
    """The frames ``--start``/``--end`` chose, and the times: ``frames 900:1000 (1:30 to 1:40)``."""
    from vsr.video.clock import say_time

    start, end = times
    a, b = frames
    return (f"frames {a}:{'' if b is None else b} ({say_time(start or 0)} to "
            f"{'the end' if end is None else say_time(end)})")


def with_times(runner, src, times: tuple, said: str):
    """``runner`` with the frames ``times`` (:func:`parse_times`) name in ``src``, by each frame's own timestamp
    (:func:`vsr.video.clock.frames_between`): a run of them is a ``--frames A:B`` run in all else."""
    from dataclasses import replace
    from pathlib import Path

    from vsr.video import open_source
    from vsr.video.clock import frames_between
    from vsr.video.output import is_stream
    from vsr.video.png_frames import one_picture

    if is_stream(src):
        raise InputError(f"{said}: standard input is read once, and its frames' times are known only as it is "
                         "read; give --frames A:B")
    if one_picture(Path(src)):  # (FFmpeg's reading of it, a still image, said 'only 0.04s long' of --start 1)
        raise InputError(f"{said}: {src} is one picture, which has no times (they trim a video or a folder of "
                         "frames)")
    source = open_source(src, deinterlace=runner.deinterlace, frame_rate=runner.frame_rate)
    try:
        return replace(runner, frames=frames_between(source, *times, said))
    finally:
        source.close()


# The encoder options --crf and --preset set (NVENC's cq; x264's qp, which its CRF overrides): the same given by -x
# too was taken from -x without a word
_SET_BY = {"--crf": ("crf", "cq", "qp"), "--preset": ("preset",)}


def parse_options(items: list[str], crf=None, preset=None) -> tuple[tuple[str, str], ...]:
    """``-x KEY=VALUE`` items; one that sets what ``--crf`` or ``--preset`` (given: ``crf``, ``preset``) sets is
    refused in one line."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"-x takes KEY=VALUE, not {item!r}")
        for option, given in (("--crf", crf), ("--preset", preset)):
            if given is not None and key in _SET_BY[option]:
                raise InputError(f"{option} {given} and -x {item} both set the encoder's {key}: give one of them")
        out.append((key, value))
    return tuple(out)


def _calibration_why(asked: str, given_by: str, choice) -> str:
    """Why the run's precision is not int8, where ``--precision fp32`` was not given: what chose fp32."""
    if asked == "fp32":
        return "" if given_by == "--precision" else f"{given_by} is fp32"
    if choice is None:  # auto, on a backend with no int8 plan (the CUDA runtime, PyTorch eager, the whole graph)
        return "--precision auto runs this backend in fp32 (it has no int8 plan)"
    return f"--precision auto chose {choice.line()}"


def upscale_settings(args):
    """The parsed options of :func:`add_upscale_options` -> ``(BackendRequest, EncoderSettings,
    RunnerSettings)``; a bad value is one :class:`InputError` line naming the option."""
    from vsr.backends import BackendRequest, backend_options, precision_choice
    from vsr.backends.precision import asked_precision
    from vsr.backends.registry import backend_names, plan_names
    from vsr.pipeline import RunnerSettings
    from vsr.video import EncoderSettings

    if args.backend not in backend_names():
        raise InputError(f"--backend must be one of {', '.join(backend_names())}, not {args.backend!r}")
    if args.plan not in plan_names():
        raise InputError(f"--plan must be one of {', '.join(plan_names())}, not {args.plan!r}")
    crf = None
    if args.crf is not None:
        try:
            crf = float(args.crf)
        except ValueError:
            raise InputError(f"--crf must be a number, not {args.crf!r}") from None
    asked, given_by = asked_precision(args.precision)
    choice = precision_choice(args.backend, args.plan, asked, given_by=given_by)
    precision = {**precision_options(args), "precision": "fp32" if choice is None else choice.precision}
    why = _calibration_why(asked, given_by, choice)
    unused = unused_int8_options(args)
    if asked == "auto" and unused and precision["precision"] != "int8":
        # the user chose no precision: the options are for where auto chooses int8 (a job file, a script for
        # several machines), not an error where it does not; said, as they are not used
        import warnings

        warnings.warn(f"{' and '.join(unused)} {'is' if len(unused) == 1 else 'are'} not used: "
                      f"{why.replace('--precision auto ', 'precision auto ', 1)}")
    else:
        check_int8_options(args, precision["precision"], why)
    request = BackendRequest(args.weights, args.config, backend_options(args.backend, args.plan,
                                                                       parse_threads(args.threads), **precision),
                             precision=choice)
    tile = to_int(args.tile, "--tile", 0) if args.tile is not None else None
    overlap = to_int(args.tile_overlap, "--tile-overlap", 0)
    if tile and tile <= 2 * overlap:
        raise InputError(f"--tile {tile} must be larger than twice --tile-overlap {overlap}")
    check_tile_grid(tile, overlap)
    runner = RunnerSettings(batch=to_int(args.batch, "--batch", 1), tile=tile, overlap=overlap,
                            memory_budget_mb=None if args.memory_budget is None else
                            to_int(args.memory_budget, "--memory-budget", 256, 1 << 30),  # (1 PB)
                            frames=parse_frames(getattr(args, "frames", None)), deinterlace=args.deinterlace,
                            frame_rate=parse_rate_option(args.frame_rate),
                            **parse_scene_cuts(args.scene_cuts, args.scene_threshold))
    encoder = EncoderSettings(codec=args.codec, crf=crf, preset=args.preset, pix_fmt=args.pix_fmt,
                              options=parse_options(args.encoder_options, args.crf, args.preset),
                              scale=parse_output_scale(args.scale),
                              quiet=not getattr(args, "verbose", False))  # the encoder's own banner: under -v
    return request, encoder, runner


def parse_rate_option(value) -> str | None:
    """``--frame-rate`` -> its exact fraction as text (``"24000/1001"`` for 23.976), or None (not given: 25)."""
    from vsr.video.frame_source import parse_frame_rate

    return None if value is None else str(parse_frame_rate(value))


def parse_output_scale(value):
    """``--scale`` -> its canonical text (``"2"``, ``"3/2"``, ``"2160p"``), or None (not given: the model's x4)."""
    from vsr.video.resize import parse_scale

    return None if value is None else parse_scale(value)


def parse_scene_cuts(mode: str, threshold: str | None) -> dict:
    """``--scene-cuts`` and ``--scene-threshold`` -> the :class:`~vsr.pipeline.RunnerSettings` fields."""
    from vsr.pipeline.scenes import read_cut_file

    out: dict = {"scene_cuts": mode}
    if mode not in ("auto", "off"):
        out = {"scene_cuts": "list", "scene_list": read_cut_file(mode)}
    if threshold is not None:
        try:
            t = float(threshold)
        except ValueError:
            raise InputError(f"--scene-threshold must be a number, not {threshold!r}") from None
        if not t > 0 or t == float("inf"):
            raise InputError(f"--scene-threshold must be a positive number, not {threshold}")
        if mode != "auto":
            raise InputError("--scene-threshold applies to --scene-cuts auto only")
        out["scene_threshold"] = t
    return out


def check_tile_grid(tile: int | None, overlap: int) -> None:
    """Tiles cut on EDVR's 4-pixel grid (its pyramid halves the frame twice): a tile side that is not a multiple of
    4, or an odd overlap, puts tiles off that grid, and their pixels then differ from the untiled run's by up to
    62/255 (measured: --tile 33 on REDS with the bundled weights; 36, 40 and 48 stay within 1/255)."""
    if tile and tile % 4:
        below, above = tile - tile % 4, tile - tile % 4 + 4
        raise InputError(f"--tile {tile}: tiles are cut on EDVR's 4-pixel grid (its pyramid halves the frame twice); "
                         f"give a multiple of 4 ({below} or {above})")
    if tile != 0 and overlap % 2:  # (None: tiles the memory plan chooses, multiples of 16, where frames need them)
        raise InputError(f"--tile-overlap {overlap}: an odd overlap puts tiles off EDVR's 4-pixel grid; give "
                         f"{overlap - 1} or {overlap + 1}")
