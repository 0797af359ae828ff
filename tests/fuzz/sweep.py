"""A hostile sweep of vsr's command line: hundreds of generated cases, each one process, judged on what must never
happen (issue 37: "0 tracebacks, 0 data loss, 0 hangs, 0 writes outside outputs").

    python -m tests.fuzz.sweep [--cases 300] [--seed 37] [--out sweep.json] [--keep DIR]

Each case runs in a folder of its own holding its inputs and a ``victim/`` folder that no case names as an output
(symlinks planted by a case point into it).  A case is judged by:

* ``traceback``: a Python traceback on stderr;
* ``hang``: still running after ``--timeout`` seconds (killed);
* ``data loss``: a file that was there before (an input, the victim's, a user's file in an output folder) changed
  or gone, other than the output the case names with ``--overwrite``;
* ``outside``: a new file or folder anywhere but the outputs the case names;
* ``crash``: the process killed by a signal (a native abort or segfault);
* ``error lines``: a failure (exit not 0) whose stderr is not exactly one ``vsr: error:`` line (not a fault by
  itself: counted apart).

Stop cases: ``upscale`` (ONNX Runtime's split plan with an empty engine cache, or torch), ``export`` and
``preview`` as real ``python -m vsr`` processes (imports and all), sent SIGINT, SIGTERM or SIGHUP at a random
moment.  Judged as above, and: ``stop``: an exit other than 130 (or 0, finished first), stderr not ending in
``vsr: interrupted`` (after the status lines) or with an error line, an output published after the stop, a
temporary left in the engine cache.

The cases (deterministic for a seed): byte mutations of small real-format clips (MP4/H.264, MKV/FFV1, WebM/VP9,
Y4M, an HDR10 MKV/HEVC upscaled into .mkv, .mp4, .mov or .webm, two MPEG-TS files of two sizes joined, an
H.264 MPEG-TS with closed captions in every frame upscaled into .mp4, .mkv, .ts or .webm, the same interlaced
with ``--deinterlace auto``, ``double``, ``film`` or ``off``, HEVC in MPEG-TS and AV1 in Matroska with HDR10+ in every
frame into HEVC and AV1, a 360 stereo Matroska file by mkvmerge into .mp4, .mov, .mkv, .ts, VP9 with alpha in WebM
into .webm, .mkv, .mov, .mp4 or PNG frames, ProRes 4444 into .mov, .webm or PNG frames, an animated WebP by
img2webp into .webp, .gif, .mkv, .mp4 or PNG frames; ``--kinds`` picks some of
these alone), hostile option values, hostile outputs (planted symlinks,
special files, folders of the user's files, paths under a file, odd suffixes, names with control characters),
and the other commands (``report``, ``jobs``, ``export``, ``preview``) on broken files.  Not part of the test suite (minutes of CPU): its result goes into
docs/benchmarks.md with the command that made it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]


@dataclass
class Case:
    name: str
    build: Callable[[Path], tuple[list, list[str], bool]]  # folder -> (argv, output paths, overwrite)
    results: dict = field(default_factory=dict)
    stop: tuple[int, float] | None = None  # (signal, seconds after the start): a stop case


# ---- inputs -----------------------------------------------------------------------------------------------------

def _clip(d: Path, kind: str) -> Path:
    from tests.conftest import Clip, write_clip
    from tests.video.test_source_inputs import y4m

    if kind == "y4m":
        return y4m(d / "in.y4m", 16, 12, 3)
    if kind == "hdr":
        return _hdr_clip(d / "in.mkv")
    if kind.startswith("hdr10+"):  # HEVC in MPEG-TS, AV1 in Matroska, with an HDR10+ message in every frame
        from tests.video.test_hdr10plus import with_hdr10plus
        if kind == "hdr10+av1":
            return with_hdr10plus(d / "in.mkv", codec="libsvtav1", frames=3, extra=("-svtav1-params", "preset=12"))
        return with_hdr10plus(d / "in.ts", frames=3)
    if kind.startswith("dovi"):  # HEVC in mp4 with a Dolby Vision RPU in every frame: profile 8.1, or 5
        from tests.video.test_dovi import IPT, PQ, with_dovi
        five = kind == "dovi5"
        return with_dovi(d / "in.mp4", profile=5 if five else 8, frames=3, tags=IPT if five else PQ)
    if kind == "360":  # H.264 in Matroska, equirectangular and top-bottom stereo (by mkvmerge)
        from tests.video.test_spherical import EQUIRECT_TB, mkvmerge
        return mkvmerge(d / "in.mkv", *EQUIRECT_TB, frames=3)
    if kind in ("captions", "interlaced"):  # H.264 in MPEG-TS with closed captions (A/53 SEI) in every frame
        from tests.video.test_captions import captioned
        woven = ("-flags", "+ilme+ildct", "-x264-params", "tff=1", "-vf", "tinterlace=mode=interleave_top,setfield=tff")
        if kind == "interlaced":
            return captioned(d / "in.ts", frames=4, extra=woven)
        return captioned(d / "in.ts", frames=3)
    if kind == "webp":  # an animated WebP by libwebp's img2webp, read by libwebp through Pillow
        from tests.video.test_webp_source import animated
        return animated(d, "-lossy")
    if kind == "joined":  # two MPEG-TS files of two sizes end to end: the size changes part-way
        a = write_clip(d / "a.ts", Clip(width=16, height=12, frames=3, codec="libx264", pix_fmt="yuv420p"))
        b = write_clip(d / "b.ts", Clip(width=24, height=16, frames=3, codec="libx264", pix_fmt="yuv444p"))
        out = d / "in.ts"
        out.write_bytes(a.read_bytes() + b.read_bytes())
        a.unlink()
        b.unlink()
        return out
    suffix, codec, pix = {"mp4": (".mp4", "libx264", "yuv420p"), "mkv": (".mkv", "ffv1", "yuv444p"),
                          "webm": (".webm", "libvpx-vp9", "yuv420p"),
                          # alpha: VP9's beside each frame (decoded by libvpx), ProRes 4444's in its frames
                          "alpha": (".webm", "libvpx-vp9", "yuva420p"),
                          "prores4444": (".mov", "prores_ks", "yuva444p10le")}[kind]
    return write_clip(d / f"in{suffix}", Clip(width=16, height=12, frames=3, codec=codec, pix_fmt=pix))


def _hdr_clip(path: Path, frames: int = 3, size: tuple[int, int] = (32, 24)) -> Path:
    """An HDR10 clip as x265 writes one (BT.2020, PQ, mastering display and light level in its SEI)."""
    import av
    import numpy as np

    with av.open(str(path), "w") as oc:
        vs = oc.add_stream("libx265", rate=25)
        (vs.width, vs.height), vs.pix_fmt = size, "yuv420p10le"
        cc = vs.codec_context
        cc.color_primaries, cc.color_trc, cc.colorspace, cc.color_range = 9, 16, 9, 1
        vs.options = {"x265-params": "log-level=error:hdr10=1:max-cll=1000,400:master-display="
                                     "G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1)"}
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), 10 * i % 256, np.uint8), format="rgb24")
            for pkt in vs.encode(f.reformat(format="yuv420p10le")):
                oc.mux(pkt)
        for pkt in vs.encode(None):
            oc.mux(pkt)
    return path


def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    how = rng.choice(["flip", "zero", "truncate", "duplicate", "insert", "flip many"])
    n = len(b)
    if how == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(n)] ^= 1 << rng.randrange(8)
    elif how == "flip many":
        for _ in range(rng.randint(16, 256)):
            b[rng.randrange(n)] = rng.randrange(256)
    elif how == "zero":
        at, size = rng.randrange(n), rng.randint(4, 512)
        b[at:at + size] = bytes(len(b[at:at + size]))
    elif how == "truncate":
        b = b[:rng.randrange(1, n)]
    elif how == "duplicate":
        at, size = rng.randrange(n), rng.randint(8, 256)
        b[at:at] = b[at:at + size]
    else:
        at = rng.randrange(n)
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(b)


def mutation_case(kind: str, seed: int) -> Case:
    def build(d: Path):
        src = _clip(d, kind)
        rng = random.Random(seed)
        src.write_bytes(_mutate(src.read_bytes(), rng))
        # an HDR source goes into each container vsr writes its metadata into (a file rewritten after the muxer),
        # captions into H.264 in each container, and into a codec that cannot hold them, HDR10+ into HEVC and AV1
        suffixes = {"hdr": [".mkv", ".mp4", ".mov", ".webm"], "captions": [".mp4", ".mkv", ".ts", ".webm"],
                    "interlaced": [".mp4", ".mkv"], "hdr10+": [".mp4", ".mkv", ".webm"], "hdr10+av1": [".mp4", ".mkv"],
                    "360": [".mp4", ".mov", ".mkv", ".ts"], "alpha": [".webm", ".mkv", ".mov", ".mp4", ""],
                    "prores4444": [".mov", ".webm", ""], "webp": [".webp", ".gif", ".mkv", ".mp4", ""],
                    "dovi": [".mp4", ".mkv", ".mov", ".ts", ""], "dovi5": [".mp4", ".mkv", ".webm"]}
        out = d / "out" / ("up" + rng.choice(suffixes.get(kind, [".mkv"])))
        (d / "out").mkdir()
        deint = ["--deinterlace", rng.choice(["auto", "double", "film", "off"])] if kind == "interlaced" else []
        return ["upscale", src, out, *TINY, "--frames", "0:2", *deint], [out], False
    return Case(f"mutated {kind} #{seed}", build)


# ---- options ----------------------------------------------------------------------------------------------------

OPTION_VALUES = {
    "--tile": ["0", "-4", "3", "4", "33", "1000000", "x", "8.5"],
    "--tile-overlap": ["-2", "1", "3", "99999", "nan"],
    "--frames": ["", ":", "0:0", "5:", ":-1", "1e9:", "0x1:2", "\u0663:\u0664", "0:1:1", " 0:1"],
    "--crf": ["-1", "52", "1e9", "nan", "ten"],
    "--scale": ["0", "0.99", "4.01", "1e400", "nan", "1/0", "1", "1.37", "\u0662", "9" * 5000],
    "--threads": ["0", "-1", "100000", "two"],
    "--batch": ["0", "-1", "1e3"],
    "--precision": ["int4", "", "FP32"],
    "--format": ["nut", "y4m", "bogus", "mp4"],
    "-c": ["nosuch", "png", "ffv1", "libx264rgb", "rawvideo"],
    "-x": ["=", "crf", "preset=nosuch", "a=b=c"],
    "--weights": ["@dir", "@empty", "@flipped", "@loop", "/dev/null", "@text"],
    "--config": ["@empty", "@deep", "@binary", "@dir", "/dev/zero"],
    "--scene-cuts": ["@missing", "@empty", "@garbage", "@dir"],
    "--report": ["@victim-link", "@input", "", "@dir", "@under-file", "/dev/full"],
}


def _special(d: Path, token: str, src: Path) -> str:
    """The hostile file a ``@token`` names, made in ``d``."""
    name = token[1:]
    p = d / f"special-{name}"
    if name == "dir":
        p.mkdir()
    elif name == "empty":
        p.write_bytes(b"")
    elif name == "text":
        p.write_text("not weights\n" * 10)
    elif name == "binary":
        p.write_bytes(bytes(range(256)) * 4)
    elif name == "deep":
        p.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    elif name == "garbage":
        p.write_text("cut at frame banana\n\x00\x01\n")
    elif name == "loop":
        os.symlink(p, p)
    elif name == "flipped":
        from vsr.model.weights import DEFAULT_WEIGHTS

        data = bytearray(DEFAULT_WEIGHTS.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
    elif name == "victim-link":
        os.symlink(d / "victim" / "keep.txt", p)
    elif name == "input":
        return str(src)
    elif name == "under-file":
        (d / "afile.txt").write_text("x\n")
        return str(d / "afile.txt" / "r.json")
    elif name == "missing":
        return str(d / "nope" / "cuts.txt")
    return str(p)


def option_case(option: str, value: str, with_overwrite: bool) -> Case:
    def build(d: Path):
        src = _clip(d, "mp4")
        out = d / "out" / "up.mkv"
        (d / "out").mkdir()
        v = _special(d, value, src) if value.startswith("@") else value
        outs = [out]
        if option == "--report" and not value.startswith("@"):
            outs.append(Path(v))
        return (["upscale", src, out, *TINY, "--frames", "0:1", option, v]
                + (["--overwrite"] if with_overwrite else [])), outs, with_overwrite
    return Case(f"{option} {value!r}" + (" --overwrite" if with_overwrite else ""), build)


# ---- outputs ----------------------------------------------------------------------------------------------------

def output_case(kind: str, overwrite: bool) -> Case:
    def build(d: Path):
        src = _clip(d, "mp4")
        extra = ["--overwrite"] if overwrite else []
        if kind == "symlink to the victim":
            out = d / "up.mkv"
            os.symlink(d / "victim" / "keep.txt", out)
        elif kind == "the input itself":
            out = src
        elif kind == "under a file":
            (d / "afile.txt").write_text("x\n")
            out = d / "afile.txt" / "up.mkv"
        elif kind == "missing folder":
            out = d / "no" / "such" / "up.mkv"
        elif kind == "folder of the user's PNGs":
            out = d / "frames"
            out.mkdir()
            for i in range(3):
                (out / f"{i}.png").write_bytes(b"\x89PNG user's own\n")
            return ["upscale", src, out, *TINY, "--frames", "0:1", *extra], [], False
        elif kind == "control characters in the name":
            out = d / "up\x1b[31m\nred.mkv"
        elif kind == "/dev/null":
            out = Path("/dev/null")
            return ["upscale", src, out, *TINY, "--frames", "0:1", *extra], [], False
        elif kind == "a FIFO":
            out = d / "fifo.mkv"
            os.mkfifo(out)
            return ["upscale", src, out, *TINY, "--frames", "0:1", *extra], [], False
        else:  # a suffix
            out = d / f"up{kind}"
        return ["upscale", src, out, *TINY, "--frames", "0:1", *extra], [out], overwrite
    return Case(f"output {kind!r}" + (" --overwrite" if overwrite else ""), build)


OUTPUT_KINDS = ["symlink to the victim", "the input itself", "under a file", "missing folder",
                "folder of the user's PNGs", "control characters in the name", "/dev/null", "a FIFO",
                ".png", ".jpg", ".gif", ".txt", "", ".MP4", ".y4m", ".webm", ".mov", ".avi", ".nut", ".ts"]


# ---- other commands ---------------------------------------------------------------------------------------------

def command_case(name: str, argv: Callable[[Path], tuple[list, list[Path]]]) -> Case:
    def build(d: Path):
        a, outs = argv(d)
        return a, outs, False
    return Case(name, build)


def _file(d: Path, name: str, data: bytes | str) -> Path:
    p = d / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def command_cases() -> list[Case]:
    reports = {"empty": b"", "not json": b"{nope", "deep": "[" * 100000 + "]" * 100000,
               "huge number": '{"format": "vsr-run-report/2", "frames": 1e400, "stages": []}',
               "wrong types": '{"format": "vsr-run-report/2", "frames": "x", "wall_s": [], "stages": {}}',
               "escape codes": '{"format": "vsr-run-report/2", "frames": 1, "wall_s": 1, "stages": '
                               '[{"name": "\\u001b[2J\\u001b]0;pwned\\u0007", "items": 1, "busy_s": 1}]}',
               "binary": bytes(range(256))}
    out = []
    for k, data in reports.items():
        out.append(command_case(f"report of {k}", lambda d, data=data: (["report", _file(d, "r.json", data)], [])))
        out.append(command_case(f"report --html of {k}", lambda d, data=data: (
            ["report", _file(d, "r.json", data), "--html", d / "out.html"], [d / "out.html"])))
    stores = {"garbage": b"SQLite format 3\x00" + bytes(range(256)) * 8, "empty": b"", "text": b"jobs\n"}
    for k, data in stores.items():
        for cmd in (["jobs", "list"], ["jobs", "run", "--until-empty"], ["jobs", "status"]):
            out.append(command_case(f"{' '.join(cmd)} on a {k} store", lambda d, data=data, cmd=cmd: (
                [*cmd, "--store", _file(d, "q.db", data)], [])))
    for kind in ("mp4", "mkv", "y4m"):
        for seed in range(3):
            def preview(d, kind=kind, seed=seed):
                src = _clip(d, kind)
                src.write_bytes(_mutate(src.read_bytes(), random.Random(1000 + seed)))
                return ["preview", src, *TINY[:-1], "--out", d / "p.png"], [d / "p.png"]
            out.append(command_case(f"preview of mutated {kind} #{seed}", preview))
    out.append(command_case("jobs add of a folder of nothing", lambda d: (
        ["jobs", "add", (d / "x").mkdir() or d / "x", "--out-dir", d / "o", "--store", d / "q.db"],
        [d / "o", d / "q.db"])))
    out.append(command_case("jobs add into a victim symlink store", lambda d: (
        ["jobs", "add", _clip(d, "mp4"), "--out-dir", d / "o", "--store",
         os.symlink(d / "victim" / "keep.txt", d / "q.db") or d / "q.db"], [d / "o"])))
    out.append(command_case("export onto a victim symlink", lambda d: (
        ["export", "--weights", "random", "--config", "edvr-tiny", "--height", "16", "--width", "16", "--out",
         os.symlink(d / "victim" / "keep.txt", d / "m.onnx") or d / "m.onnx"], [])))
    out.append(command_case("export --overwrite onto a victim symlink", lambda d: (  # refused, as report --html's
        ["export", "--weights", "random", "--config", "edvr-tiny", "--height", "16", "--width", "16", "--out",
         os.symlink(d / "victim" / "keep.txt", d / "m.onnx") or d / "m.onnx", "--overwrite"], [])))
    return out


# ---- stops ------------------------------------------------------------------------------------------------------

STOP_COMMANDS = {
    "upscale split": lambda d, src: ["upscale", src, d / "out.mkv", "--weights", "random", "--config", "edvr-tiny",
                                     "--plan", "split", "--threads", "1"],
    "upscale torch": lambda d, src: ["upscale", src, d / "out.mp4", *TINY[:-1]],
    "export": lambda d, src: ["export", "--weights", "random", "--config", "edvr-tiny", "--height", "48", "--width",
                              "64", "--out", d / "m.onnx", "--split", d / "plan"],
    "preview": lambda d, src: ["preview", src, *TINY[:-1], "--out", d / "p.png"],
    # an HDR10 source into Matroska: the file is rewritten for its container metadata after the encoder's flush
    "upscale hdr": lambda d, src: ["upscale", src, d / "out.mkv", *TINY[:-1]],
}
STOP_SIGNALS = {"SIGINT": 2, "SIGTERM": 15, "SIGHUP": 1}


def stop_case(command: str, sig: str, delay: float) -> Case:
    def build(d: Path):
        from tests.conftest import Clip, write_clip

        if command == "upscale hdr":
            src = _hdr_clip(d / "in.mkv", 24, (64, 48))
        else:
            src = write_clip(d / "in.mp4", Clip(width=64, height=48, frames=24))
        argv = STOP_COMMANDS[command](d, src)
        return argv, [Path(a) for a in argv if isinstance(a, Path) and a != src], False
    return Case(f"{command}, {sig} at {delay:.1f} s", build, stop=(STOP_SIGNALS[sig], delay))


def stop_cases(n: int, rng: random.Random) -> list[Case]:
    return [stop_case(rng.choice(list(STOP_COMMANDS)), rng.choice(list(STOP_SIGNALS)), rng.uniform(0.2, 8.0))
            for _ in range(n)]


def _run_stopped(argv: list, stop: tuple[int, float], timeout: float, cwd: str, engines: Path) -> tuple[int, str]:
    """``python -m vsr ARGV`` as a user starts it (Ctrl-C at its default), sent ``stop``'s signal after its
    seconds; (exit code, stderr)."""
    import signal
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "VSR_ENGINE_DIR": str(engines), "PYTHONPATH": str(repo)}
    p = subprocess.Popen([sys.executable, "-m", "vsr", *map(str, argv)], cwd=cwd, env=env, text=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _, err = p.communicate(timeout=stop[1])
    except subprocess.TimeoutExpired:
        p.send_signal(stop[0])
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise TimeoutError from None
    return p.returncode, err


def _stop_faults(rc: int, err: str, outs: list[Path], engines: Path) -> list[str]:
    if rc == 0:
        return []  # it finished before the signal
    faults = []
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc != 130 or lines[-1:] != ["vsr: interrupted"] or any(ln.startswith("vsr: error") for ln in lines):
        faults.append(f"stop: exit {rc}, stderr {lines[-2:]}")
    faults += [f"stop: {o.name} published after the stop" for o in outs if o.exists()]
    faults += [f"stop: {p.name} left in the engine cache" for p in engines.rglob(".*")]
    return faults


KINDS = ("mp4", "mkv", "webm", "y4m", "hdr", "joined", "captions", "interlaced", "hdr10+", "hdr10+av1", "360",
         "alpha", "prores4444", "webp", "dovi", "dovi5")


def all_cases(n: int, seed: int, stops: int = 0, only: tuple[str, ...] | None = None) -> list[Case]:
    """``n`` cases: ``stops`` stop cases, the fixed ones, then mutated inputs of each kind in turn; ``only``: the
    mutated inputs of these kinds alone."""
    rng = random.Random(seed)
    cases = stop_cases(stops, random.Random(seed + 1)) + command_cases() if only is None else []
    if only is None:
        cases += [output_case(k, ow) for k in OUTPUT_KINDS for ow in (False, True)]
        cases += [option_case(o, v, ow) for o, vs in OPTION_VALUES.items() for v in vs for ow in (False, True)
                  if not ow or o == "--report"]
    kinds = list(only or KINDS)
    i = 0
    while len(cases) < n:
        cases.append(mutation_case(kinds[i % len(kinds)], rng.randrange(1 << 30)))
        i += 1
    return cases[:n] if n < len(cases) else cases


# ---- judging ----------------------------------------------------------------------------------------------------

def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest()) if st.st_size < 1 << 26 \
                    else ("file", st.st_size, st.st_mtime_ns)
            elif p.is_dir():
                out[str(p)] = ("dir",)
            else:
                out[str(p)] = ("special",)
    return out


def _under(p: str, outs: list[Path]) -> bool:
    return any(p == str(o) or p.startswith(str(o) + os.sep) for o in outs)


def run_case(runner, case: Case, root: Path, timeout: float, index: int = 0) -> dict:
    d = root / f"case{index:04d}"  # two cases may share a name (the same stop at the same moment)
    d.mkdir(parents=True)
    (d / "victim").mkdir()
    (d / "victim" / "keep.txt").write_text("the user's file\n")
    argv, outs, overwrite = case.build(d)
    before = _snapshot(d)
    t0 = time.monotonic()
    err_path = root / "stderr.txt"
    engines = root / f"engines-{d.name}"
    try:
        if case.stop is not None:
            rc, err = _run_stopped(argv, case.stop, timeout, str(d), engines)
        else:
            rc, err = runner(argv, err_path, timeout=timeout, cwd=str(d))
        hang = False
    except TimeoutError:
        rc, err, hang = None, "" if case.stop else err_path.read_text(errors="replace"), True
    after = _snapshot(d)
    faults = []
    if "Traceback (most recent call last)" in err:
        faults.append("traceback")
    if hang:
        faults.append("hang")
    if rc is not None and rc < 0:
        faults.append(f"crash: signal {-rc}")
    if case.stop is not None and not hang:
        faults += _stop_faults(rc, err, outs, engines)
    for p, st in before.items():
        if after.get(p) != st and not (overwrite and _under(p, outs)) and not (st[0] == "dir" and p in after):
            faults.append(f"data loss: {p[len(str(d)) + 1:]}")
    for p in after:
        if p not in before and not _under(p, outs):
            faults.append(f"outside: {p[len(str(d)) + 1:]}")
    lines = [ln for ln in err.splitlines() if ln.strip() and "seeded random weights" not in ln]
    return {"case": case.name, "rc": rc, "seconds": round(time.monotonic() - t0, 2), "faults": faults,
            "error_lines_ok": rc in (0, None) or case.stop is not None  # a stop's lines: judged above
            or (len(lines) == 1 and lines[0].startswith("vsr: error: ")),
            "stderr": err[-600:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--stops", type=int, default=0, help="this many stop cases first (each a real process)")
    ap.add_argument("--out", default="sweep.json")
    ap.add_argument("--keep", default=None, help="keep each case's folder under this one")
    ap.add_argument("--kinds", default=None, help=f"only mutated inputs of these kinds, comma-separated: {KINDS}")
    args = ap.parse_args()
    only = tuple(args.kinds.split(",")) if args.kinds else None
    if only and set(only) - set(KINDS):
        ap.error(f"--kinds: one of {', '.join(KINDS)}")
    from tests.fuzz.cli_runner import CliRunner

    runner = CliRunner()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="vsr-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    results = []
    cases = all_cases(args.cases, args.seed, args.stops, only)
    try:
        for i, case in enumerate(cases, 1):
            r = run_case(runner, case, root, args.timeout, i)
            results.append(r)
            mark = "FAULT " + "; ".join(r["faults"]) if r["faults"] else ("ok" if r["error_lines_ok"] else "lines")
            print(f"[{i}/{len(cases)}] {case.name!r}: rc {r['rc']} {mark}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    kinds = ("traceback", "hang", "data loss", "outside", "crash", "stop")
    summary = {k: sum(any(f.startswith(k) for f in r["faults"]) for r in results) for k in kinds}
    summary |= {"cases": len(results), "exit 0": sum(r["rc"] == 0 for r in results),
                "exit 2": sum(r["rc"] == 2 for r in results),
                "failures not one error line": sum(not r["error_lines_ok"] for r in results)}
    Path(args.out).write_text(json.dumps({"summary": summary, "seed": args.seed, "results": results}, indent=1))
    print(json.dumps(summary))
    sys.exit(1 if any(summary[k] for k in kinds) else 0)


if __name__ == "__main__":
    main()
