"""Issue 32, "data loss and silent corruption": the probe's cases through the real command line, real files and
real FFmpeg.  Each case checks the exit status, the one line vsr says, that the user's files are as they were,
and that nothing half-written is left (no ``.vsr-partial`` temporary, no write probe).

1. ``--report`` / ``--html`` are outputs: never the input, the video or the job store, however spelt; an
   existing file only with ``--overwrite``; ``-`` is standard output; refused before the model loads.
2. Broken weights (NaN, 60000, a saturated output) stop the run naming them, before anything is committed; a
   bundled or fetched checkpoint with flipped bytes fails its sha256 at load.
3. A source cut short (MKV at 60 %, NUT mid-packet as a file and on a pipe, Y4M on a pipe) is said in one
   warning, recorded in the report and marked in ``vsr jobs list``.
4. A job's output folder swapped for a symbolic link after ``jobs add``: the job fails, nothing is written
   through the link.
5. A full disk (a real, small tmpfs in a private mount namespace): one line naming the output, nothing left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import av
import pytest

from tests.conftest import Clip, write_clip
from tests.jobs.test_full_disk import namespace
from tests.probe.cli_io import ProbeRunner
from tests.video.test_source_inputs import y4m

REPO = Path(__file__).resolve().parents[2]
TINY = ["--config", "edvr-tiny", "--backend", "torch", "--threads", "1", "--quiet"]
RUN = ["--weights", "random", *TINY]


@pytest.fixture(scope="module")
def vsr_cli():
    return ProbeRunner()


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) -> sha256; links by where they point."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "folder"
    return out


def nothing_half_written(folder: Path) -> None:
    left = [p for p in folder.rglob("*") if ".vsr-partial" in p.name or ".vsr-write-test" in p.name]
    assert not left, left


def clip(folder: Path, name: str, frames: int, codec: str = "libx264") -> Path:
    return write_clip(folder / name, Clip(width=16, height=12, frames=frames, codec=codec))


def frames_in(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


# ---- 1. reports and pages are outputs ----------------------------------------------------------------------

REFUSED_REPORTS = {
    "the input": (lambda d: ["upscale", d / "in.mkv", d / "o.mkv", "--report", d / "in.mkv"], "is the input"),
    "the output, spelt otherwise": (lambda d: ["upscale", d / "in.mkv", d / "o.mkv", "--report",
                                               f"{d}/./o.mkv"], "is the output"),
    "a link to the input, --overwrite": (lambda d: ["upscale", d / "in.mkv", d / "o.mkv", "--report",
                                                    d / "link.json", "--overwrite"], "is the input"),
    "a hard link to the input, --overwrite": (lambda d: ["upscale", d / "in.mkv", d / "o.mkv", "--report",
                                                         d / "hard.mkv", "--overwrite"], "is the input"),
    "an unrelated file": (lambda d: ["upscale", d / "in.mkv", d / "o.mkv", "--report", d / "notes.json"],
                          "notes.json exists (pass --overwrite"),
    "inside the PNG output folder": (lambda d: ["upscale", d / "in.mkv", d / "frames", "--report",
                                                d / "frames" / "r.json", "--overwrite"], "inside the output folder"),
    "- with OUT -": (lambda d: ["upscale", d / "in.mkv", "-", "--report", "-"], "both write standard output"),
    "vsr report's --html at its own input": (lambda d: ["report", d / "notes.json", "--html", d / "notes.json",
                                                        "--overwrite"], "is the input"),
    "jobs report's --html at the store": (lambda d: ["jobs", "report", "1", "--store", d / "q.db", "--html",
                                                     d / "q.db", "--overwrite"], "is the input"),
}


@pytest.mark.parametrize("case", list(REFUSED_REPORTS))
def test_a_report_is_refused_before_any_work(vsr_cli, tmp_path, case):
    d = tmp_path / "files"
    d.mkdir()
    clip(d, "in.mkv", 3)
    (d / "notes.json").write_text('{"mine": true}\n')
    (d / "q.db").write_bytes(b"a store\n")
    (d / "link.json").symlink_to(d / "in.mkv")
    os.link(d / "in.mkv", d / "hard.mkv")
    (d / "frames").mkdir()
    build, words = REFUSED_REPORTS[case]
    before = tree(d)
    ran = vsr_cli.run([*build(d), *(RUN if build(d)[0] == "upscale" else [])], tmp_path / "ran")
    assert ran.rc == 2 and "Traceback" not in ran.err, ran.err
    assert len(ran.lines) == 1 and ran.lines[0].startswith("vsr: error: ") and words in ran.lines[0], ran.err
    assert "seeded random weights" not in ran.err  # refused before the model was loaded
    assert tree(d) == before and ran.out == b""


def test_report_dash_is_standard_output_and_an_existing_report_needs_overwrite(vsr_cli, tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    src = clip(d, "in.mkv", 3)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", "--report", "-", *RUN], tmp_path / "a")
    assert ran.rc == 0 and ran.lines == [], ran.err
    assert json.loads(ran.out)["format"] == "vsr-run-report/2" and not (Path.cwd() / "-").exists()
    (d / "run.json").write_text("old\n")
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", "--report", d / "run.json", "--overwrite", *RUN], tmp_path / "b")
    assert ran.rc == 0 and json.loads((d / "run.json").read_text())["frames"] == 3
    assert sorted(tree(d)) == ["in.mkv", "o.mkv", "run.json"]


# ---- 2. broken weights -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broken_weights(tmp_path_factory) -> dict[str, Path]:
    """EDVR-tiny checkpoints: every value NaN, every value 60000, and a last convolution whose bias is -60000
    (a finite output, far below black)."""
    import torch

    from vsr.model.weights import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, _ = load_model("random", "edvr-tiny")
    sd = model.state_dict()
    d = tmp_path_factory.mktemp("weights")
    out = {}
    for name, edit in (("nan", lambda k, v: torch.full_like(v, float("nan"))),
                       ("60000", lambda k, v: torch.full_like(v, 60000.0)),
                       ("saturated", lambda k, v: torch.full_like(v, -60000.0) if k == "conv_last.bias" else v)):
        out[name] = d / f"{name}.pth"
        torch.save({k: edit(k, v) for k, v in sd.items()}, out[name])
    return out


@pytest.mark.parametrize("kind, words", [("nan", "not finite"), ("60000", "not finite"),
                                         ("saturated", "saturated")])
def test_broken_weights_stop_the_run_before_the_output_is_committed(vsr_cli, tmp_path, broken_weights, kind,
                                                                     words):
    d = tmp_path / "files"
    d.mkdir()
    src = clip(d, "in.mkv", 3)
    before = tree(d)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", *TINY, "--weights", broken_weights[kind]], tmp_path / "ran")
    assert ran.rc == 2 and len(ran.lines) == 1, ran.err
    assert words in ran.lines[0] and str(broken_weights[kind]) in ran.lines[0]
    assert tree(d) == before  # no output, no temporary


def flip(path: Path, at: int, n: int = 64) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, at + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_fetched_checkpoint_with_flipped_bytes_fails_its_sha256(vsr_cli, tmp_path):
    from vsr.model.official import find_official

    d = tmp_path / "files"
    d.mkdir()
    src = clip(d, "in.mkv", 3)
    cache = tmp_path / "weights"
    cache.mkdir()
    kept = cache / find_official("edvr-m-reds").filename
    kept.write_bytes((REPO / "vsr" / "weights" / "default.pth").read_bytes())  # any bytes not the published ones
    flip(kept, 4096)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", "--weights", "edvr-m-reds", "--backend", "torch", "--quiet"],
                      tmp_path / "ran", env={"VSR_WEIGHTS_DIR": str(cache)})
    assert ran.rc == 2 and len(ran.lines) == 1 and "weights are damaged" in ran.lines[0], ran.err
    assert "vsr models fetch edvr-m-reds" in ran.lines[0] and sorted(tree(d)) == ["in.mkv"]


def test_bundled_weights_with_flipped_bytes_fail_their_sha256(tmp_path, monkeypatch, capsys):
    """The bundled file lives in the package: a damaged copy of the folder stands in for it (the command line
    in this process, the module's folder pointed at the copy)."""
    import vsr.model.weights as weights
    from vsr.cli import main

    copy = tmp_path / "bundled"
    copy.mkdir()
    for name in ("default.pth", "default.json"):
        (copy / name).write_bytes((weights.WEIGHTS_DIR / name).read_bytes())
    flip(copy / "default.pth", (copy / "default.pth").stat().st_size // 2)
    monkeypatch.setattr(weights, "WEIGHTS_DIR", copy)
    src = clip(tmp_path, "in.mkv", 3)
    rc = main(["upscale", str(src), str(tmp_path / "o.mkv"), "--weights", "default", "--backend", "torch"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "the bundled 'default' weights are damaged" in err, err
    assert not (tmp_path / "o.mkv").exists()


# ---- 3. a source cut short ---------------------------------------------------------------------------------

def cut(path: Path, share: float) -> Path:
    """``path`` cut at ``share`` of its bytes, beside it."""
    out = path.with_name("cut-" + path.name)
    data = path.read_bytes()
    out.write_bytes(data[:int(len(data) * share)])
    return out


def ended_early(ran, report: Path | None = None) -> dict | None:
    assert ran.rc == 0 and len(ran.lines) == 1 and ran.lines[0].startswith("vsr: warning: "), ran.err
    assert "ended early" in ran.lines[0] and "decoded" in ran.lines[0], ran.lines
    return json.loads(report.read_text())["settings"]["input_ended_early"] if report else None


def test_an_mkv_cut_at_60_percent_says_how_many_frames_it_declared(vsr_cli, tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    src = cut(clip(d, "whole.mkv", 40), 0.6)
    before = tree(d)
    ran = vsr_cli.run(["upscale", src, d / "o.mkv", "--report", d / "r.json", *RUN], tmp_path / "ran")
    early = ended_early(ran, d / "r.json")
    written = frames_in(d / "o.mkv")
    assert early["frames_declared"] == 40 and early["frames_written"] == written < 40
    assert f"{written} written" in ran.lines[0] and "40 frames" in ran.lines[0]
    assert {k: v for k, v in tree(d).items() if k in before} == before
    nothing_half_written(d)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the ffmpeg command is not installed")
def test_a_whole_mkv_whose_audio_outlasts_its_video_is_not_cut(vsr_cli, tmp_path):
    """The container's duration is the audio's; no stream ends before it: whole, nothing to say."""
    src = tmp_path / "long-audio.mkv"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=16x12:rate=25:duration=0.16",
                    "-f", "lavfi", "-i", "sine=duration=1", "-c:v", "libx264", "-preset", "ultrafast", "-c:a",
                    "libopus", str(src)], check=True)
    ran = vsr_cli.run(["upscale", src, tmp_path / "o.mkv", *RUN], tmp_path / "ran")
    assert ran.rc == 0 and ran.lines == [], ran.err
    assert frames_in(tmp_path / "o.mkv") == 4


@pytest.mark.parametrize("on_stdin", [False, True], ids=["file", "pipe"])
def test_a_nut_cut_inside_a_packet_says_so(vsr_cli, tmp_path, on_stdin):
    d = tmp_path / "files"
    d.mkdir()
    whole = clip(d, "whole.nut", 12, codec="ffv1")
    src = cut(whole, 0.6)
    data = src.read_bytes()
    ran = vsr_cli.run(["upscale", "-" if on_stdin else src, d / "o.mkv", "--report", d / "r.json", *RUN],
                      tmp_path / "ran", stdin=data if on_stdin else None)
    early = ended_early(ran, d / "r.json")
    assert "no NUT index" in early["detail"] and early["frames_written"] == frames_in(d / "o.mkv") < 12
    ran = vsr_cli.run(["upscale", "-", d / "o2.mkv", *RUN], tmp_path / "whole", stdin=whole.read_bytes())
    assert ran.rc == 0 and ran.lines == [], ran.err  # the whole stream: nothing to say


def test_a_y4m_cut_inside_a_frame_on_standard_input_says_so(vsr_cli, tmp_path):
    src = y4m(tmp_path / "cut.y4m", 16, 12, 4, cut=100)
    ran = vsr_cli.run(["upscale", "-", tmp_path / "o.mkv", "--report", tmp_path / "r.json", *RUN],
                      tmp_path / "ran", stdin=src.read_bytes())
    early = ended_early(ran, tmp_path / "r.json")
    assert ran.lines[0].startswith("vsr: warning: standard input ended early") and "Y4M frame 3" in early["detail"]
    assert early["frames_written"] == frames_in(tmp_path / "o.mkv") == 3


def test_a_job_whose_input_ends_short_is_marked_in_the_list(vsr_cli, tmp_path):
    src = cut(clip(tmp_path, "whole.mkv", 40), 0.6)
    store, out = tmp_path / "q.db", tmp_path / "out"
    ran = vsr_cli.run(["jobs", "add", src, "--out-dir", out, "--store", store, "--codec", "ffv1", *RUN[:-1]],
                      tmp_path / "add")
    assert ran.rc == 0 and any("ended early" in ln for ln in ran.lines), ran.err
    ran = vsr_cli.run(["jobs", "run", "--until-empty", "--store", store], tmp_path / "run")
    assert ran.rc == 0, ran.err
    listed = vsr_cli.run(["jobs", "list", "--store", store], tmp_path / "list")
    assert "done, short" in listed.out.decode() and "the input ended early" in listed.out.decode()
    row = json.loads(vsr_cli.run(["jobs", "list", "--json", "--store", store], tmp_path / "json").out)[0]
    assert row["state"] == "done" and row["ended_early"]["frames_declared"] == 40
    assert row["ended_early"]["frames_written"] == frames_in(out / src.name) < 40


# ---- 4. a job's output folder swapped for a link ------------------------------------------------------------

def test_an_output_folder_swapped_for_a_link_is_not_written_through(vsr_cli, tmp_path):
    src = clip(tmp_path, "in.mkv", 3)
    store, out, elsewhere = tmp_path / "q.db", tmp_path / "out", tmp_path / "elsewhere"
    ran = vsr_cli.run(["jobs", "add", src, "--out-dir", out, "--store", store, "--codec", "ffv1", *RUN[:-1]],
                      tmp_path / "add")
    assert ran.rc == 0, ran.err
    out.rename(tmp_path / "out.real")
    elsewhere.mkdir()
    out.symlink_to(elsewhere)
    vsr_cli.run(["jobs", "run", "--until-empty", "--store", store], tmp_path / "run")
    row = json.loads(vsr_cli.run(["jobs", "list", "--json", "--store", store], tmp_path / "json").out)[0]
    assert row["state"] == "failed" and "is a symbolic link" in row["error"] and "\n" not in row["error"]
    assert list(elsewhere.iterdir()) == [] and list((tmp_path / "out.real").iterdir()) == []


# ---- 5. a full disk, for real ------------------------------------------------------------------------------

FULL_DISK = """
import contextlib, io, json, os, subprocess, sys
from pathlib import Path
from vsr.cli import main

src, full, roomy = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
run = sys.argv[4:]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "vsr-probe", str(full)], check=True)
try:
    subprocess.run(["dd", "if=/dev/zero", f"of={full / 'filler'}", "bs=4096"], capture_output=True)  # all of it
    results = {}
    for case, argv in (("frames", [str(src), str(full / "frames")]),
                       ("video", [str(src), str(full / "o.mkv")]),
                       ("mp4", [str(src), str(full / "o.mp4")]),
                       ("report", [str(src), str(roomy / "o.mkv"), "--report", str(full / "run.json")])):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["upscale", *argv, *run])
        results[case] = {"rc": rc, "err": err.getvalue(), "full": sorted(os.listdir(full))}
    print(json.dumps(results))
finally:
    subprocess.run(["umount", str(full)], check=False)
"""


@pytest.mark.skipif(namespace() is None, reason="no mount namespace here (unshare -m / -rm)")
def test_a_full_disk_is_one_line_naming_the_output_and_leaves_nothing(tmp_path):
    src = clip(tmp_path, "in.mkv", 3)
    full, roomy = tmp_path / "full", tmp_path / "roomy"
    full.mkdir()
    roomy.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(textwrap.dedent(FULL_DISK))
    res = subprocess.run([*namespace(), sys.executable, script, src, full, roomy, *RUN], capture_output=True,
                         text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr
    results = json.loads(res.stdout.splitlines()[-1])
    # (.mp4: its header's write failed in the encoder's opening, said as "libx264 rejected its options", exit 2)
    for case, named in (("frames", full / "frames"), ("video", full / "o.mkv"), ("mp4", full / "o.mp4"),
                        ("report", full / "run.json")):
        r = results[case]
        lines = [ln for ln in r["err"].splitlines() if ln.strip() and not ln.startswith("vsr: warning: using")]
        assert r["rc"] == 1 and len(lines) == 1, (case, r)
        assert lines[0].startswith(f"vsr: error: ") and f"cannot write {named}: No space left on device" in lines[0]
        assert r["full"] == ["filler"], (case, r)  # no temporary file or folder left on the full disk
    assert "o.mkv is written, but not its report" in results["report"]["err"]
    assert frames_in(roomy / "o.mkv") == 3 and sorted(os.listdir(roomy)) == ["o.mkv"]
    assert sorted(os.listdir(full)) == []  # the mount is gone with its namespace
