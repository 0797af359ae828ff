"""`vsr upscale` from the command line: the default job, the report, bad inputs (one line, exit 2), and
interruption (no output file, ever)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import pytest

from tests.conftest import Audio, Subtitles, probe
from vsr.cli import main

TINY = ["--weights", "random", "--config", "edvr-tiny"]
REPO = Path(__file__).resolve().parents[2]


def cli(capsys, *args) -> tuple[int, str]:
    rc = main(["upscale", *map(str, args)])
    return rc, capsys.readouterr().err


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("vsr: error:")]


def test_default_backend_job_with_report(make_clip, tmp_path, capsys):
    """The main job on the default (ONNX Runtime) backend, with a JSON report and the end table."""
    src = make_clip("in.mp4", width=16, height=12, frames=4, rate=Fraction(30000, 1001), audio=[Audio("aac")])
    out, rep = tmp_path / "out.mp4", tmp_path / "run.json"
    rc, err = cli(capsys, src, out, *TINY, "--threads", 1, "--batch", 2, "--report", rep)
    assert rc == 0, err
    a, b = probe(src), probe(out)
    assert b["frames"] == 4 and b["video_times"] == a["video_times"] and b["packets"][1] == a["packets"][1]
    report = json.loads(rep.read_text())
    assert report["frames"] == 4 and report["settings"]["backend"].startswith("ort")  # whole or split plan
    assert report["settings"]["config"] == "edvr-tiny" and report["settings"]["batch"] == 2
    assert [s["name"] for s in report["stages"]] == ["decode", "scenes", "window", "batch", "infer", "post", "encode"]
    assert report["settings"]["scene_cuts"]["mode"] == "auto"  # the default
    assert report["bottleneck"] in {s["name"] for s in report["stages"]}
    assert report["backend_steps_s"] and all(v >= 0 for v in report["backend_steps_s"].values())
    assert "bottleneck:" in err


def test_without_default_weights_says_so_in_one_line(make_clip, tmp_path, capsys):
    from vsr.model.weights import DEFAULT_WEIGHTS

    if DEFAULT_WEIGHTS.is_file():
        pytest.skip("this build bundles default weights")
    src = make_clip("in.mp4", frames=2)
    rc, err = cli(capsys, src, tmp_path / "out.mp4")
    assert rc == 2 and len(errors(err)) == 1 and "default weights" in err
    assert not (tmp_path / "out.mp4").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def make_bad(tmp_path: Path, kind: str, make_clip) -> list:
    good = make_clip("good.mp4", frames=2)
    if kind == "missing":
        return [tmp_path / "nope.mp4", tmp_path / "o.mp4"]
    if kind == "not a video":
        p = tmp_path / "text.mp4"
        p.write_text("hello\n")
        return [p, tmp_path / "o.mp4"]
    if kind == "no video stream":
        p = tmp_path / "audio.m4a"
        with av.open(str(p), "w") as oc:
            s = oc.add_stream("aac", rate=48000)
            import numpy as np
            fr = av.AudioFrame.from_ndarray(np.zeros((1, 2048), np.float32), format="flt", layout="stereo")
            fr.sample_rate, fr.pts = 48000, 0
            for pk in list(s.encode(fr)) + list(s.encode(None)):
                oc.mux(pk)
        return [p, tmp_path / "o.mp4"]
    if kind == "zero frames":
        p = tmp_path / "empty.mkv"
        with av.open(str(p), "w") as oc:
            s = oc.add_stream("libx264", rate=25)
            s.width, s.height, s.pix_fmt = 16, 16, "yuv420p"
            oc.start_encoding()
        return [p, tmp_path / "o.mp4"]
    if kind == "zero frames mp4":
        p = tmp_path / "empty.mp4"
        with av.open(str(p), "w") as oc:
            s = oc.add_stream("libx264", rate=25)
            s.width, s.height, s.pix_fmt = 16, 16, "yuv420p"
            oc.start_encoding()
        return [p, tmp_path / "o.mp4"]
    if kind == "empty file":
        p = tmp_path / "empty.mov"
        p.write_bytes(b"")
        return [p, tmp_path / "o.mp4"]
    if kind == "empty png folder":
        (tmp_path / "frames").mkdir()
        return [tmp_path / "frames", tmp_path / "o.mp4"]
    if kind == "unwritable output":
        (tmp_path / "file").write_text("x")
        return [good, tmp_path / "file" / "o.mp4"]
    if kind == "output is input":
        return [good, good]
    if kind == "unknown codec":
        return [good, tmp_path / "o.mp4", "--codec", "libnothing"]
    if kind == "codec/container mismatch":
        return [good, tmp_path / "o.webm", "--codec", "libx264"]
    if kind == "unknown container":
        return [good, tmp_path / "o.xyz"]
    if kind == "y4m file":
        return [good, tmp_path / "o.y4m"]
    if kind == "bad pix fmt":
        return [good, tmp_path / "o.mp4", "--pix-fmt", "yuv411p"]
    if kind == "bad crf":
        return [good, tmp_path / "o.mp4", "--crf", "high"]
    if kind == "encoder rejects option":
        return [good, tmp_path / "o.mp4", "-x", "crf=abc"]
    if kind == "name ends with a dot":  # (Python sees no suffix: a folder of PNG frames 'o.')
        return [good, tmp_path / "o."]
    if kind == "suffix alone":  # (a hidden folder of PNG frames '.mp4')
        return [good, tmp_path / ".mp4"]
    if kind == "stdout by name":  # (it said /proc/PID/fd is not writable, or wrote PNG frames there)
        return [good, Path("/dev/stdout")]
    if kind == "crf twice":  # (-x won without a word)
        return [good, tmp_path / "o.mp4", "--crf", "20", "-x", "crf=30"]
    if kind == "preset twice":
        return [good, tmp_path / "o.mp4", "--preset", "fast", "-x", "preset=slow"]
    if kind == "bad batch":
        return [good, tmp_path / "o.mp4", "--batch", "0"]
    if kind == "bad frames":
        return [good, tmp_path / "o.mp4", "--frames", "5:2"]
    if kind == "frames past the end":
        return [good, tmp_path / "o.mp4", "--frames", "10:12"]
    if kind == "bad -x":
        return [good, tmp_path / "o.mp4", "-x", "novalue"]
    if kind == "bad backend":
        return [good, tmp_path / "o.mp4", "--backend", "tpu"]
    if kind == "bad tile":
        return [good, tmp_path / "o.mp4", "--tile", "16", "--tile-overlap", "16"]
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "not a video", "no video stream", "zero frames", "zero frames mp4",
                                  "empty file", "empty png folder",
                                  "unwritable output", "output is input", "unknown codec",
                                  "codec/container mismatch", "unknown container", "y4m file", "bad pix fmt",
                                  "bad crf",
                                  "encoder rejects option", "crf twice", "preset twice", "stdout by name",
                                  "name ends with a dot", "suffix alone",
                                  "bad batch", "bad frames", "frames past the end", "bad -x", "bad backend",
                                  "bad tile"])
def test_bad_inputs_give_one_line_and_exit_2(make_clip, tmp_path, capsys, kind):
    args = make_bad(tmp_path, kind, make_clip)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    rc, err = cli(capsys, *args, *TINY, "--backend" if "--backend" not in args else "--quiet",
                  *(["torch"] if "--backend" not in args else []), "--quiet")
    assert rc == 2, err
    assert len(errors(err)) == 1, err
    if kind in ("zero frames", "empty png folder"):
        assert "zero frames" in err
    if kind == "y4m file":  # (it said to use .mp4 or .mkv: Y4M goes out, as a stream)
        assert "vsr upscale IN - > OUT.y4m" in err
    if kind == "stdout by name":
        assert "for standard output give '-'" in err
    if kind.endswith("twice"):
        assert "both set the encoder's" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, no temporaries


@pytest.mark.parametrize("option", [["-x", "bogus=1"], ["--backend", "cuda"]])
def test_a_refused_run_says_its_error_alone(make_clip, tmp_path, capsys, option):
    """What the checks say on the way (a subtitle converted for .mp4, a still image) is said once they all pass: a
    refused run said a warning, then its error."""
    if option[-1] == "cuda":
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is here: --backend cuda is not refused")
    src = make_clip("in.mkv", frames=2, subtitles=[Subtitles()])
    rc, err = cli(capsys, src, tmp_path / "o.mp4", *TINY, "--backend", "torch", "--quiet", *option)
    assert rc == 2 and err.splitlines() == errors(err) and len(errors(err)) == 1, err
    rc, err = cli(capsys, src, tmp_path / "o.mp4", *TINY, "--backend", "torch", "--quiet", "--frames", "0:1")
    assert rc == 0 and "vsr: warning: mp4 cannot hold subrip subtitles" in err, err  # said where the run goes on


@pytest.mark.parametrize("frames", ["8:20", "30:40"])
def test_a_start_past_the_end_names_the_length(make_clip, tmp_path, capsys, frames):
    """A Matroska clip declares no frame count: a start past its end said 'fewer than 6 frames' of 6 frames (the
    first frame the run decodes), or 'fewer than 28 (about 6 by its duration)'."""
    src = make_clip("six.mkv", frames=6)
    rc, err = cli(capsys, src, tmp_path / "o.mp4", *TINY, "--backend", "torch", "--quiet", "--scene-cuts", "off",
                  "--frames", frames)
    assert rc == 2 and errors(err) == [f"vsr: error: --frames {frames}: the source has only 6 frames"], err


def int8_run(make_clip, tmp_path, capsys, monkeypatch, env: dict, *args) -> tuple[int, str]:
    """A 2-frame upscale with ``args``, ``env`` the precision's variables."""
    for name in ("VSR_PRECISION", "VSR_INT8_ISA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    src = make_clip("in.mp4", frames=2)
    return cli(capsys, src, tmp_path / "o.mp4", *TINY, "--quiet", *args)


def calibrated_run(make_clip, tmp_path, capsys, monkeypatch, env: dict, *args) -> tuple[int, str]:
    """A 2-frame upscale with an empty ``--int8-calibration`` folder, ``env`` the precision's variables."""
    (tmp_path / "cal").mkdir()
    return int8_run(make_clip, tmp_path, capsys, monkeypatch, env, "--int8-calibration", tmp_path / "cal", *args)


NEEDS_INT8 = "vsr: error: --int8-calibration needs --precision int8 (it calibrates the split plan's int8 segments)"


@pytest.mark.parametrize("args,env,said", [
    (["--precision", "fp32"], {}, NEEDS_INT8),
    ([], {"VSR_PRECISION": "fp32"}, NEEDS_INT8 + ": $VSR_PRECISION is fp32"),
    (["--backend", "ort"], {"VSR_INT8_ISA": "avx512-vnni"}, "vsr: error: --int8-calibration "),
])
def test_a_calibration_no_int8_plan_uses_is_refused(make_clip, tmp_path, capsys, monkeypatch, args, env, said):
    """`--int8-calibration DIR` where the run builds no int8 plan was dropped without a word (`vsr export` refuses
    it in one line); where `--precision auto` chooses int8 the folder is used (here: read, and found empty)."""
    rc, err = calibrated_run(make_clip, tmp_path, capsys, monkeypatch, env, *args)
    assert rc == 2 and len(errors(err)) == 1 and errors(err)[0].startswith(said), err
    assert not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize("args,env,said", [
    (["--backend", "torch"], {}, "precision auto runs this backend in fp32 (it has no int8 plan)"),
    (["--backend", "ort"], {"VSR_INT8_ISA": "avx2"}, "precision auto chose fp32 (this CPU has AVX2"),
])
def test_a_calibration_precision_auto_leaves_unused_is_said(make_clip, tmp_path, capsys, monkeypatch, args, env,
                                                            said):
    """No precision asked (auto, the default): the folder is for machines where auto chooses int8 (a job file, a
    script run on several), so where it chooses fp32 the run goes on and says in one line the folder is unused."""
    rc, err = calibrated_run(make_clip, tmp_path, capsys, monkeypatch, env, "--threads", "1", *args)
    assert rc == 0, err
    said_lines = [ln for ln in err.splitlines() if "calibration" in ln]
    assert len(said_lines) == 1 and said_lines[0].startswith(f"vsr: warning: --int8-calibration is not used: {said}"), err
    assert (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize("folder,said", [
    ("cal", "no frames in it"), ("texts", "no frames in it"), ("nonexist", "no such folder"),
    ("in.mp4", "not a folder"),
])
@pytest.mark.parametrize("precision", [["--precision", "int8"], []])  # (auto: int8 on this VNNI stand-in)
def test_a_calibration_folder_without_frames_is_said_before_the_run(make_clip, tmp_path, capsys, monkeypatch, folder,
                                                                    said, precision):
    """An int8 run given an empty (or image-less) --int8-calibration folder said so after the random-weights
    warning, the model's load and its export; now alone, when the options are checked, and nothing written."""
    (tmp_path / "cal").mkdir()
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.png.txt").write_bytes(b"\xff\xd8")
    monkeypatch.chdir(tmp_path)
    rc, err = int8_run(make_clip, tmp_path, capsys, monkeypatch, {"VSR_INT8_ISA": "avx512-vnni"}, *precision,
                       "--backend", "ort", "--int8-calibration", folder)
    assert rc == 2 and err.splitlines() == [
        f"vsr: error: --int8-calibration {folder}: {said} (give a folder of PNG, JPEG, TIFF, BMP or WebP "
        "frames)"], err
    assert not (tmp_path / "o.mp4").exists() and not list(tmp_path.glob(".*vsr-partial*"))


NEEDS_INT8_SCALES = ("vsr: error: --int8-scales needs --precision int8 (it chooses the activation scales of the split "
                     "plan's int8 segments)")


@pytest.mark.parametrize("args,env,said", [
    (["--precision", "fp32"], {}, NEEDS_INT8_SCALES),
    ([], {"VSR_PRECISION": "fp32"}, NEEDS_INT8_SCALES + ": $VSR_PRECISION is fp32"),
])
def test_int8_scales_where_fp32_was_asked_is_refused(make_clip, tmp_path, capsys, monkeypatch, args, env, said):
    """`--int8-scales static|exact` with an fp32 run was dropped without a word, as --int8-calibration was."""
    rc, err = int8_run(make_clip, tmp_path, capsys, monkeypatch, env, "--int8-scales", "static", *args)
    assert rc == 2 and errors(err) == [said], err
    assert not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize("args,said", [
    ([], "--int8-scales is not used: "),
    (["--int8-calibration", "."], "--int8-scales and --int8-calibration are not used: "),
])
def test_int8_scales_where_precision_auto_chose_fp32_is_said(make_clip, tmp_path, capsys, monkeypatch, args, said):
    """No precision asked: where auto chooses fp32 the run goes on and says in one line the options are unused."""
    rc, err = int8_run(make_clip, tmp_path, capsys, monkeypatch, {}, "--backend", "torch", "--threads", "1",
                       "--int8-scales", "exact", *args)
    assert rc == 0, err
    said_lines = [ln for ln in err.splitlines() if "int8" in ln]
    assert said_lines == [f"vsr: warning: {said}precision auto runs this backend in fp32 (it has no int8 plan)"], err
    assert (tmp_path / "o.mp4").exists()


def test_int8_scales_runtime_the_default_asks_for_nothing(make_clip, tmp_path, capsys, monkeypatch):
    """`--int8-scales runtime` (the default, as jobs/example.toml gives it beside fp32) is no unused option."""
    rc, err = int8_run(make_clip, tmp_path, capsys, monkeypatch, {}, "--backend", "torch", "--threads", "1",
                       "--precision", "fp32", "--int8-scales", "runtime")
    assert rc == 0 and "int8" not in err, err


def start_run(src: Path, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "vsr", "upscale", str(src), str(out), *TINY, "--backend", "torch",
           "--threads", "1", "--quiet"]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal


def wait_for_partial(folder: Path, proc: subprocess.Popen, timeout: float = 300.0) -> Path:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        parts = list(folder.glob(".*vsr-partial*"))
        if parts:
            return parts[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run never started writing")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_run_leaves_nothing(make_clip, tmp_path, sig):
    src = make_clip("long.mp4", width=32, height=24, frames=300)
    out = tmp_path / "out.mp4"
    proc = start_run(src, out)
    wait_for_partial(tmp_path, proc)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.mp4"]


SWALLOWED_STOP_RUN = """
import ctypes, os, signal, sys, time
import vsr.backends
from vsr.cli import entry

real_open = vsr.backends.open_backend

@ctypes.CFUNCTYPE(None)
def callback():  # as llvmlite's object cache during a numba compile: what a ctypes callback raises is dropped
    os.kill(os.getpid(), int(os.environ["VSR_TEST_SIGNAL"]))
    for _ in range(2000):  # the handler runs in here, between two bytecodes, and its KeyboardInterrupt is lost
        time.sleep(0.001)

def open_and_call_back(**kw):
    backend = real_open(**kw)
    if os.environ["VSR_TEST_HOW"] == "callback":
        callback()
        print("the callback returned", flush=True)  # its KeyboardInterrupt was dropped, not raised here
    else:
        try:
            os.kill(os.getpid(), int(os.environ["VSR_TEST_SIGNAL"]))
            for _ in range(2000):
                time.sleep(0.001)
        except KeyboardInterrupt:  # as torch's exporter, stopped in a lazy import, fails on the half-imported module
            raise AttributeError("module 'torch._dynamo' has no attribute 'exc'")
    return backend

vsr.backends.open_backend = open_and_call_back
sys.argv = ["vsr", *sys.argv[1:]]
entry()
"""


@pytest.mark.parametrize("sig,how", [(signal.SIGINT, "callback"), (signal.SIGTERM, "callback"),
                                     (signal.SIGTERM, "converted")])
def test_a_stop_lost_inside_a_library_still_stops_the_run(make_clip, tmp_path, sig, how):
    """A signal whose KeyboardInterrupt Python drops (raised inside a ctypes callback, a __del__): seen once in a
    run under load, which then went on, wrote its output and exited 0; or one that a library turns into its own
    error (seen: torch's exporter, a traceback and exit 1).  The stop is recorded (vsr.interrupt), the run ends
    with 130 and one line (Python's "Exception ignored" report of the dropped one is not printed either: stop
    sweep seed 103), and leaves nothing."""
    src = make_clip("in.mp4", width=32, height=24, frames=8)
    out = tmp_path / "out.mp4"
    cmd = [sys.executable, "-c", SWALLOWED_STOP_RUN, "upscale", str(src), str(out), *TINY, "--backend", "torch",
           "--threads", "1", "--quiet"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VSR_TEST_SIGNAL": str(int(sig)), "VSR_TEST_HOW": how},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if how == "callback":
        assert "the callback returned" in proc.stdout  # the KeyboardInterrupt really was lost in the callback
    assert proc.returncode == 130, proc.stderr
    assert "vsr: interrupted" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


SLOW_BACKEND_RUN = """
import atexit, os, sys, time
import vsr.backends
from vsr.cli import entry

real_open = vsr.backends.open_backend

def open_slow(**kw):
    backend = real_open(**kw)
    def slow(fast):
        def call(*args):
            open(os.environ["VSR_TEST_CALLED"], "w").close()  # the test interrupts from now on
            time.sleep(60)  # stands in for a long native inference call (the GIL is released, as in ORT or torch)
            return fast(*args)
        return call
    backend.infer, backend.infer_stream = slow(backend.infer), slow(backend.infer_stream)
    return backend

vsr.backends.open_backend = open_slow
atexit.register(lambda: print("interpreter shutdown ran", file=sys.stderr))
sys.argv = ["vsr", *sys.argv[1:]]
entry()
"""


def test_interrupt_during_a_long_inference_call_exits_at_once(make_clip, tmp_path):
    """A CPU inference call can last minutes: Ctrl-C must not wait for it, and must not tear the process down
    under it (the stop leaves it after a grace period, removes the output and ends with os._exit(130))."""
    src = make_clip("in.mp4", width=32, height=24, frames=8)
    out = tmp_path / "out.mp4"
    cmd = [sys.executable, "-c", SLOW_BACKEND_RUN, "upscale", str(src), str(out), *TINY, "--backend", "torch",
           "--threads", "1", "--quiet"]
    called = tmp_path.parent / f"{tmp_path.name}-called"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "VSR_TEST_CALLED": str(called)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    wait_for_partial(tmp_path, proc)
    while not called.exists():  # model loaded (torch's import: seconds, after the output was opened), call under way
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=50)  # well before the 60 s call would have ended
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 30, "the stop waited for the inference call"
    assert "vsr: interrupted" in err and "Traceback" not in err
    assert "interpreter shutdown ran" not in err  # no library teardown under the running call
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_sigkill_never_leaves_an_output_file_and_the_next_run_cleans_up(make_clip, tmp_path, capsys):
    src = make_clip("long.mp4", width=32, height=24, frames=300)
    out = tmp_path / "out.mp4"
    proc = start_run(src, out)
    partial = wait_for_partial(tmp_path, proc)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=180)
    assert not out.exists() and partial.exists()
    rc, err = cli(capsys, src, out, *TINY, "--backend", "torch", "--frames", "0:2", "--quiet")
    assert rc == 0, err
    assert partial.exists()  # written a moment ago: maybe by a run on another host sharing the folder (NFS)
    then = time.time() - 1.5 * 86400
    os.utime(partial, (then, then))
    rc, err = cli(capsys, src, out, *TINY, "--backend", "torch", "--frames", "0:2", "--quiet", "--overwrite")
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.mp4", "out.mp4"]


@pytest.mark.parametrize("env, option, said", [
    ({"VSR_CONFIG_DIR": "{tmp}/none"}, [], "VSR_CONFIG_DIR={tmp}/none is not a folder"),  # was: unknown config
    ({"VSR_ENGINE_DIR": "{tmp}/a-file"}, [], "VSR_ENGINE_DIR={tmp}/a-file is not a folder"),  # NotADirectoryError
    ({}, ["--memory-budget", "99999999999999999999"], "--memory-budget must be between 256 and 1073741824"),
])
def test_a_setting_that_cannot_be_used_is_one_line(make_clip, tmp_path, capsys, monkeypatch, env, option, said):
    src = make_clip("in.mp4", width=16, height=12, frames=2)
    (tmp_path / "a-file").write_text("not a folder")
    for k, v in env.items():
        monkeypatch.setenv(k, v.format(tmp=tmp_path))
    rc, err = cli(capsys, src, tmp_path / "o.mp4", *TINY, "--backend", "ort", *option)
    assert rc == 2 and len(errors(err)) == 1 and not (tmp_path / "o.mp4").exists()
    assert errors(err)[0].startswith(f"vsr: error: {said.format(tmp=tmp_path)}")


@pytest.mark.parametrize("suffix", [".mp4", ".y4m"])
def test_a_start_past_the_end_of_a_counted_source_is_refused_before_the_model_loads(make_clip, tmp_path, suffix):
    """An MP4's sample table and a Y4M file's size count its frames: ``--frames 10:12`` of a 3-frame clip was
    refused only after the model loaded (on a first run: minutes of export and plan)."""
    from vsr.backends import BackendRequest, TorchOptions
    from vsr.errors import InputError
    from vsr.pipeline import RunnerSettings, upscale

    src = make_clip("in.mp4", frames=3)
    if suffix == ".y4m":
        import shutil
        if shutil.which("ffmpeg") is None:
            pytest.skip("needs ffmpeg")
        subprocess.run(["ffmpeg", "-v", "error", "-i", str(src), "-f", "yuv4mpegpipe", str(tmp_path / "in.y4m")],
                       check=True)
        src = tmp_path / "in.y4m"
    phases = []
    with pytest.raises(InputError, match=r"^--frames 10:12: the source has only 3 frames$"):
        upscale(src, tmp_path / "o.mkv", backend=BackendRequest("random", "edvr-tiny", TorchOptions(threads=1)),
                runner=RunnerSettings(frames=(10, 12)), on_phase=phases.append)
    assert phases == ["opening input"] and not (tmp_path / "o.mkv").exists()


def test_standard_error_gone_is_no_failure(make_clip, tmp_path):
    """Its reader gone before the end (`vsr upscale ... 2>&1 | head -1`, a closed terminal's pipe): the progress
    lines and the closing table raised BrokenPipeError, a finished run exited 141 as if stopped.  Now the lines are
    lost and the run is what it was: exit 0, the whole output."""
    src = make_clip("in.mp4", frames=5)
    out = tmp_path / "out.mkv"
    p = subprocess.Popen([sys.executable, "-m", "vsr", "upscale", str(src), str(out), *TINY, "--backend", "torch",
                          "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    p.stderr.close()  # its reader gone before the first line
    assert p.wait(timeout=300) == 0
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 5


def test_a_10_bit_sdr_source_becomes_10_bit_hevc_and_says_so(make_clip, tmp_path, capsys):
    """A phone's 10-bit SDR HEVC came out as 10-bit H.264 (High 10), which almost no hardware decoder or browser
    plays: by default it is 10-bit HEVC, tagged hvc1 for Apple's players, said in one line; -c libx264 still
    writes High 10, without the line; --quiet says nothing (it said the line)."""
    src = make_clip("phone.mp4", width=64, height=48, frames=2, codec="libx265", pix_fmt="yuv420p10le", matrix=1,
                    range=1, primaries=1, transfer=1, options={"x265-params": "log-level=error"})
    out, rep = tmp_path / "out.mp4", tmp_path / "run.json"
    rc, err = cli(capsys, src, out, *TINY, "--threads", 1, "--report", rep)
    assert rc == 0, err
    said = [line for line in err.splitlines() if line.startswith("vsr: codec:")]
    assert said == ["vsr: codec: libx265, 10-bit HEVC, for the source's 10 bits (-c libx264 writes 10-bit H.264, "
                    "High 10, which few players decode)"]
    with av.open(str(out)) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.name, cc.profile, cc.pix_fmt, cc.codec_tag) == ("hevc", "Main 10", "yuv420p10le", "hvc1")
        assert sum(1 for _ in c.decode(video=0)) == 2
    report = json.loads(rep.read_text())["settings"]
    assert (report["codec"], report["pix_fmt"], report["crf"]) == ("libx265", "yuv420p10le", 28)
    rc, err = cli(capsys, src, tmp_path / "asked.mp4", *TINY, "--threads", 1, "-c", "libx264")
    assert rc == 0, err
    assert "vsr: codec:" not in err
    with av.open(str(tmp_path / "asked.mp4")) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.name, cc.profile, cc.pix_fmt) == ("h264", "High 10", "yuv420p10le")
    # --quiet: "nothing on success but warnings" (docs/cli.md); the line is a default, not a warning
    rc, err = cli(capsys, src, tmp_path / "quiet.mp4", *TINY, "--threads", 1, "--quiet")
    assert rc == 0 and "vsr: codec:" not in err and "warning: using seeded random weights" in err, err
    with av.open(str(tmp_path / "quiet.mp4")) as c:
        assert c.streams.video[0].codec_context.name == "hevc"
