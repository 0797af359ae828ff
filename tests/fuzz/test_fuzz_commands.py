"""The hostile and mistaken cases of issue 23 through the real command line (``vsr jobs``, ``report``,
``export``, ``bench``, ``preview``, ``train``, ``upscale --report``; one process each).

Every case ends with exit 2 and exactly one stderr line, ``vsr: error: ...`` holding the expected words, no
traceback, no secret, no control character, and nothing created, changed or removed anywhere under the test's
folder (inputs, stores, output folders, and a "victim" folder outside them all).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Clip, write_clip
from tests.fuzz.cli_runner import CliRunner

TINY = ["--weights", "random", "--config", "edvr-tiny", "--backend", "torch", "--threads", "1"]
NOISE = ("vsr: warning: using seeded random weights",)
# A report `vsr report` reads (the smallest that is one).
REPORT = {"format": "vsr-run-report/2", "frames": 2, "wall_s": 1.0,
          "stages": [{"name": "infer", "items": 2, "busy_s": 0.9, "wait_in_s": 0.0, "wait_out_s": 0.0}]}


@pytest.fixture(scope="module")
def vsr_cli():
    return CliRunner()


@pytest.fixture(autouse=True)
def private_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))  # no case ever touches the real store
    monkeypatch.delenv("VSR_JOBS_STORE", raising=False)
    monkeypatch.delenv("VSR_JOBS", raising=False)


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root``: its kind and mode, and for files their size and modification time (links not
    followed; a folder's own time changes when a probe file comes and goes, which writes nothing)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            if name.endswith(("-shm", "-wal")):
                continue  # SQLite's own index of a store it reads
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_mode,) + (() if p.is_dir() else (st.st_size, st.st_mtime_ns))
    return out


def clip(d: Path, name: str = "a.mp4", frames: int = 4, **kw) -> Path:
    return write_clip(d / name, Clip(**{"width": 24, "height": 16, "frames": frames, **kw}))


def store(d: Path, report: str | None = None) -> Path:
    """A store holding one job (its chunk committed with ``report`` as its stored report, if given)."""
    from vsr.jobs.leases import owner_id
    from vsr.jobs.store import JobStore
    from tests.jobs.test_store import job

    path = d / "q.db"
    with JobStore(path, create=True) as s:
        s.add_jobs([job("a", 1)])
        if report is not None:
            me = owner_id()
            s.commit_chunk(me, s.claim(me, 30), {}, computed=True)
    if report is not None:
        import sqlite3

        db = sqlite3.connect(path)
        db.execute("UPDATE chunks SET report = ?", (report,))
        db.commit()
        db.close()
    return path


def report_file(d: Path, data, name: str = "run.json") -> Path:
    p = d / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def nested(depth: int) -> str:
    return '{"stages": [], "x": ' + "[" * depth + "]" * depth + "}"


# ---- the cases: each builder gets the case's folder and returns the command line -------------------------

def add(*extra, name="a.mp4"):
    return lambda d: ["jobs", "add", clip(d, name), "--out-dir", d / "out", "--store", d / "q.db", *TINY, *extra]


def on_store(*argv, report=None):
    return lambda d: ["jobs", *argv, "--store", store(d, report)]


def job_file_ext(d):
    jf = d / "batch.toml"
    jf.write_text(f'inputs = ["{clip(d)}"]\nout_dir = "out"\next = "../../victim/evil"\n')
    return ["jobs", "add", jf, "--store", d / "q.db", *TINY]


def report_cmd(data, *extra):
    return lambda d: ["report", report_file(d, data), *extra]


def report_html_at_folder(d):
    (d / "page.html").mkdir()
    return ["report", report_file(d, REPORT), "--html", d / "page.html", "--overwrite"]


def report_too_large(d):
    p = d / "big.json"
    with open(p, "wb") as f:
        f.truncate(65 << 20)  # sparse: no disk used
    return ["report", p]


def export(*extra, prepare=None):
    def build(d):
        if prepare is not None:
            prepare(d)
        return ["export", "--weights", "random", "--config", "edvr-tiny", "--height", "8", "--width", "8",
                "--out", d / "m.onnx", *extra]
    return build


def split_with_other_files(d):
    (d / "plan").mkdir()
    (d / "plan" / "notes.txt").write_text("mine\n")
    return export("--split", d / "plan")(d)


def one_frame_train(d):
    # no validation set: the refusal under test is the data's, and Vid4 is not in a clone (tests/data.py)
    return ["train", "--config", "edvr-tiny", "--data", clip(d, "one.mp4", frames=1, width=200, height=200),
            "--iters", "1", "--val", "none", "--out", d / "run"]


def one_frame_preview(d):
    return ["preview", clip(d, "one.mp4", frames=1), "--out", d / "p.png", *TINY]


def upscale_report_at_folder(d):
    (d / "run.json").mkdir()
    return ["upscale", clip(d), d / "o.mkv", *TINY, "--quiet", "--report", d / "run.json"]


def case(name, build, words):
    return pytest.param(build, words, id=name)


SECRET = "s3cret-pw"
CASES = [
    case("jobs add --ext ../victim/evil", add("--ext", "../victim/evil"), "--ext must be a container suffix"),
    case("jobs add --ext a/b", add("--ext", "a/b"), "--ext must be a container suffix"),
    case("jobs add --ext '.'", add("--ext", "."), "--ext must be a container suffix"),
    case("job file ext ../../victim/evil", job_file_ext, "ext must be a container suffix"),
    case("jobs add --crf 99", add("--crf", "99"), "--crf 99 is out of range for libx264"),
    case("jobs add -x bogus=1", add("-x", "bogus=1"), "libx264 has no option 'bogus'"),
    case("jobs add --codec nosuch", add("--codec", "nosuch"), "unknown codec 'nosuch'"),
    case("jobs add --chunk-frames 10**30", add("--chunk-frames", str(10**30)), "--chunk-frames must be at most"),
    case("jobs add --frames 9:12 of 4 frames", add("--frames", "9:12"), "--frames 9:12: "),
    case("jobs add --frames 3:1", add("--frames", "3:1"), "stop must be greater than start"),
    case("jobs add --broker ''", add("--broker", ""), "--broker is empty"),
    case("jobs cancel beyond SQLite's integers", on_store("cancel", str(2**64)), "job ids run from 1"),
    case("jobs retry 2**63", on_store("retry", str(2**63)), "job ids run from 1"),
    case("jobs retry 0", on_store("retry", "0"), "job ids run from 1"),
    case("jobs report of a non-JSON stored report", on_store("report", "1", report="{not json"), "is not JSON"),
    case("jobs report of a 10**400 stored report",
         on_store("report", "1", report='{"stages": [], "frames": 1' + "0" * 400 + ', "wall_s": 1}'),
         "beyond any number in a run report"),
    case("jobs run --lease inf", on_store("run", "--lease", "inf"), "--lease must be between 1 and"),
    case("jobs run --lease nan", on_store("run", "--lease", "nan"), "--lease must be between 1 and"),
    case("jobs run --lease 1e400", on_store("run", "--lease", "1e400"), "--lease must be between 1 and"),
    case("jobs run --lease 0", on_store("run", "--lease", "0"), "--lease must be between 1 and"),
    case("jobs run --workers 10**6", on_store("run", "--workers", str(10**6)), "--workers must be at most 256"),
    case("jobs run --workers 0", on_store("run", "--workers", "0"), "--workers must be >= 1"),
    case("jobs run --max-attempts 10**20", on_store("run", "--max-attempts", str(10**20)), "--max-attempts must be"),
    case("jobs list --broker ''", lambda d: ["jobs", "list", "--broker", ""], "--broker is empty"),
    case("jobs list --broker user:password@", lambda d: ["jobs", "list", "--broker",
                                                          f"redis://vsr:{SECRET}@127.0.0.1:1/0"], "redis://vsr:***@"),
    case("jobs list --broker ?password=", lambda d: ["jobs", "list", "--broker",
                                                     f"redis://127.0.0.1:1/0?password={SECRET}"], "password=***"),
    case("report nested 100000 deep", report_cmd(nested(100000)), "nests deeper than"),
    case("report nested 40 deep", report_cmd(nested(40)), "nests deeper than 32 levels"),
    case("report frames 10**400", report_cmd('{"stages": [], "frames": 1' + "0" * 400 + ', "wall_s": 1.0}'),
         "digits) is beyond any in a run report"),
    case("report timeline -1e308..1e308 --html",
         lambda d: ["report", report_file(d, {**REPORT, "timeline": {"stages": {"infer": {"intervals": [
             [-1e308, 1e308]]}}, "steps": {}}}), "--html", d / "r.html"], "beyond any number in a run report"),
    case("report NaN", report_cmd('{"stages": [], "frames": NaN, "wall_s": 1.0}'), "NaN is not a number"),
    case("report of format 999", report_cmd({**REPORT, "format": "vsr-run-report/999"}),
         "format vsr-run-report/999, which this vsr cannot read"),
    case("report --html at a folder", report_html_at_folder, "is a folder: give the page's file name"),
    case("report of 65 MiB", report_too_large, "larger than any run report"),
    case("report of a folder", lambda d: ["report", d], "is a folder, not a run report"),
    case("export --out over a file", export(prepare=lambda d: (d / "m.onnx").write_text("mine")),
         "m.onnx exists (pass --overwrite"),
    case("export --out at a folder", export("--overwrite", prepare=lambda d: (d / "m.onnx").mkdir()),
         "is a folder: give the model's file name"),
    case("export --height 100000 --width 100000", lambda d: export()(d)[:5] + ["--height", "100000", "--width",
                                                                              "100000", "--out", d / "m.onnx"],
         "at most 4096 each"),
    case("export --split DIR holding other files", split_with_other_files, "holds 'notes.txt', which is not part"),
    case("bench --cases ''", lambda d: ["bench", "--cases", ""], "names no case"),
    case("bench --cases ' , '", lambda d: ["bench", "--cases", " , "], "names no case"),
    case("preview of a 1-frame clip", one_frame_preview, "has 1 frame: a preview times 2 frames or more"),
    case("train on a 1-frame clip", one_frame_train, "no training video has the 3 consecutive frames"),
    case("upscale --report at a folder", upscale_report_at_folder, "is a folder: give the report's file name"),
]


@pytest.mark.parametrize("build, words", CASES)
def test_one_line_nothing_touched(vsr_cli, tmp_path, build, words):
    d = tmp_path / "case"
    d.mkdir()
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("mine\n")
    argv = build(d)
    before = tree(tmp_path)
    rc, err = vsr_cli(argv, tmp_path / "stderr.txt")
    (tmp_path / "stderr.txt").unlink()
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(NOISE)]
    assert "Traceback" not in err, err
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("vsr: error: "), err
    assert words in lines[0], lines[0]
    assert SECRET not in err and all(c.isprintable() for c in lines[0])
    assert tree(tmp_path) == before, "a file was created, changed or removed"


def test_export_writes_with_the_users_permissions_and_never_replaces_without_overwrite(vsr_cli, tmp_path):
    """Issue 23: `vsr export --out` replaced an existing file without --overwrite, and wrote it mode 0600."""
    out = tmp_path / "m.onnx"
    argv = export()(tmp_path)
    mask = os.umask(0o022)
    os.umask(mask)
    rc, err = vsr_cli(argv, tmp_path / "stderr.txt")
    assert rc == 0, err
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask
    stamp = out.stat().st_mtime_ns
    rc, err = vsr_cli(argv, tmp_path / "stderr.txt")
    assert rc == 2 and "m.onnx exists (pass --overwrite" in err and out.stat().st_mtime_ns == stamp
