"""Job files (``jobs/*.toml``): a batch of inputs and the options to upscale them with.  See ``jobs/example.toml``.

Top-level keys: ``inputs`` (a path or a list of paths: video files or folders of videos), ``out_dir``,
``ext`` (output container, a bare suffix; default: each input's own where it keeps timestamps, else mp4 or mkv),
``chunk_frames``, ``overwrite``, and an ``[upscale]`` table of ``vsr upscale`` options named as on the command
line without the dashes (``memory-budget`` or ``memory_budget``; ``encoder_options`` is a table of ``-x`` pairs;
``frames = "A:B"``, or times: ``start = "1:30"``, ``end = 100``).  Relative paths are relative to the job file.
Any other key, or a value of the wrong type, is one :class:`~vsr.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vsr.errors import InputError, printable
from vsr.files import loads_toml, read_small_text
from vsr.jobs.inputs import check_ext, videos_of

_TOP = {"inputs": "a path or a list of paths", "out_dir": "a path", "ext": "a container suffix (mkv, mp4...)",
        "chunk_frames": "an integer", "overwrite": "true or false", "upscale": "a table of vsr upscale options"}
# The vsr upscale options a job file may set (argparse dests), with the TOML types each takes.
UPSCALE_KEYS: dict[str, tuple[type, ...]] = {
    "weights": (str,), "config": (str,), "backend": (str,), "plan": (str,), "threads": (int,),
    "batch": (int,), "tile": (int,), "tile_overlap": (int,), "memory_budget": (int,),
    "codec": (str,), "crf": (int, float), "preset": (str,), "pix_fmt": (str,), "encoder_options": (dict,),
    "precision": (str,), "int8_scales": (str,), "int8_calibration": (str,), "per_window_features": (bool,),
    "scene_cuts": (str,), "scale": (int, float, str), "scene_threshold": (int, float), "frames": (str,),
    "start": (str, int, float), "end": (str, int, float), "deinterlace": (str,), "frame_rate": (int, float, str),
}


@dataclass(frozen=True)
class JobFile:
    """A parsed job file: absolute input paths, and what it sets (None: not set, the command line decides).

    ``upscale``: option dest -> value as the command line would give it (``encoder_options``: ``["K=V", ...]``);
    ``keys``: option dest -> the key as the file spells it (``memory-budget`` or ``memory_budget``), for errors.
    """

    path: Path
    inputs: tuple[Path, ...]
    out_dir: Path | None = None
    ext: str | None = None
    chunk_frames: int | None = None
    overwrite: bool | None = None
    upscale: dict = field(default_factory=dict)
    keys: dict = field(default_factory=dict)


def in_its_words(job: JobFile, message: str, out_dir: Path | None = None) -> str | None:
    """``message`` (about vsr upscale's options) with each option that ``job`` set named as the key it wrote
    (``--memory-budget`` -> ``memory-budget``, ``-x`` -> ``encoder_options``), after where that key is; None where
    it names none of them (an option of the command line's).  The checks that job files share with the command
    line name its options: a job file's bad value read as if the command line had given it.  The paths the job
    names (its inputs, the videos of a folder, its outputs under ``out_dir``, its files) are left as they are: an
    input ``x --frames y/a.mp4`` was printed as ``x frames y/a.mp4``."""
    paths = _its_paths(job, out_dir)
    # the message cut at each of those paths: the odd parts are the paths, kept; options are named in the rest
    parts = re.split(f"({'|'.join(map(re.escape, paths))})", message) if paths else [message]
    for dest, key in job.keys.items():
        option = "-x" if dest == "encoder_options" else "--" + dest.replace("_", "-")
        parts[::2] = [re.sub(rf"(?<![\w-]){re.escape(option)}(?![\w-])", lambda _, key=key: key, part)
                      for part in parts[::2]]
    said = "".join(parts)
    return None if said == message else f"job file {job.path}: [upscale]: {said}"


def _its_paths(job: JobFile, out_dir: Path | None) -> list[str]:
    """The paths a message about ``job`` may print, longest first (as printed: escaped too), each an output's
    stem in ``out_dir`` (its suffix is the job's)."""
    found = [job.path, *job.inputs, *(Path(v) for v in job.upscale.values() if isinstance(v, str) and
                                      os.path.isabs(v))]
    videos = []
    for src in job.inputs:
        try:
            videos += videos_of(src) if src.is_dir() else [src]
        except (OSError, InputError):  # (said by the checks themselves)
            continue
    found += videos + [d / v.stem for d in {job.out_dir, out_dir} - {None} for v in videos] + [job.out_dir]
    text = {form for p in found if p is not None for form in (str(p), printable(p))}
    return sorted(text, key=len, reverse=True)


def _unknown(where: str, key: str, known) -> InputError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"
    return InputError(f"{where}: unknown key {key!r}{hint}")


def _typed(where: str, key: str, value, types: tuple[type, ...], what: str):
    # bool is an int in Python; a TOML true is no frame count
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise InputError(f"{where}: {key} must be {what}, not {value!r}")
    return value


MAX_JOB_FILE_BYTES = 64 << 20  # a line an input: a million videos


def read_job_file(path: str | Path) -> JobFile:
    """``path`` -> :class:`JobFile`; a missing or malformed file, or an unknown key, is one :class:`InputError`."""
    path = Path(path)
    try:
        data = loads_toml(read_small_text(path, MAX_JOB_FILE_BYTES, "job file", "TOML text"))
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"job file {path} is not valid TOML: {e}") from None
    where = f"job file {path}"
    for key in data:
        if key not in _TOP:
            raise _unknown(where, key, _TOP)
    base = path.resolve().parent
    inputs = data.get("inputs")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) and i for i in inputs):
        raise InputError(f"{where}: inputs must be {_TOP['inputs']} (at least one)")
    out_dir = data.get("out_dir")
    if out_dir is not None:
        out_dir = Path(os.path.normpath(base / _typed(where, "out_dir", out_dir, (str,), _TOP["out_dir"])))
    ext = data.get("ext")
    if ext is not None:
        ext = check_ext(_typed(where, "ext", ext, (str,), _TOP["ext"]), f"{where}: ext")[1:]
    chunk_frames = data.get("chunk_frames")
    if chunk_frames is not None and _typed(where, "chunk_frames", chunk_frames, (int,), _TOP["chunk_frames"]) < 1:
        raise InputError(f"{where}: chunk_frames must be >= 1, not {chunk_frames}")
    overwrite = data.get("overwrite")
    if overwrite is not None:
        _typed(where, "overwrite", overwrite, (bool,), _TOP["overwrite"])
    upscale, keys = _upscale(data.get("upscale", {}), f"{where}: [upscale]")
    # a checkpoint or config file named in the job file is relative to it too (not a bundled name or auto, nor a
    # config name)
    if upscale.get("weights") not in (None, "auto", "default", "real", "clean", "random"):
        upscale["weights"] = str(base / upscale["weights"])
    if str(upscale.get("config", "")).endswith(".toml"):
        upscale["config"] = str(base / upscale["config"])
    if upscale.get("scene_cuts") not in (None, "auto", "off"):  # a file of cut frame indices
        upscale["scene_cuts"] = str(base / upscale["scene_cuts"])
    if upscale.get("int8_calibration") is not None:
        upscale["int8_calibration"] = str(base / upscale["int8_calibration"])
    return JobFile(path, tuple(Path(os.path.normpath(base / i)) for i in inputs), out_dir, ext, chunk_frames,
                   overwrite, upscale, keys)


def _upscale(table, where: str) -> tuple[dict, dict]:
    if not isinstance(table, dict):
        raise InputError(f"{where} must be a table of vsr upscale options")
    out, keys = {}, {}
    for key, value in table.items():
        dest = key.replace("-", "_")
        if dest not in UPSCALE_KEYS:
            raise _unknown(where, key, UPSCALE_KEYS)
        types = UPSCALE_KEYS[dest]
        what = " or ".join({str: "a string", int: "an integer", float: "a number", dict: "a table",
                            bool: "true or false"}[t] for t in types)
        _typed(where, key, value, types, what)
        if dest == "encoder_options":
            if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value.values()):
                raise InputError(f"{where}: encoder_options values must be strings or numbers")
            value = [f"{k}={v}" for k, v in value.items()]
        out[dest], keys[dest] = value, key
    return out, keys
