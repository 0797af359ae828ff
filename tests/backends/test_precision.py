"""``--precision auto``, the default of vsr upscale, preview and jobs add: int8 on the split plan where the CPU has
AVX-512 VNNI or AMX, fp32 elsewhere (``configs/quant/precision.toml``), said in the run's first line and recorded
in its report; ``--precision fp32`` overrides it; a job keeps the precision chosen where it was added.

The CPU is fed (flags, or ``$VSR_INT8_ISA``), never this machine's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vsr.backends import BackendRequest, PrecisionChoice, SplitOptions, backend_options, precision_choice
from vsr.backends.precision import ENV, PrecisionRule, asked_precision, choose_precision
from vsr.cli import build_parser, main
from vsr.cli.settings import say_precision, upscale_settings
from vsr.errors import ConfigError
from vsr.quant.isa import ENV as ISA_ENV, ISAS, isa_of

REPO = Path(__file__).resolve().parents[2]
VNNI = {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"}
AMX = VNNI | {"amx_tile", "amx_int8", "amx_bf16"}
AVX2 = {"avx2", "fma"}


@pytest.fixture
def auto(monkeypatch):
    """No precision asked for (the suite's conftest asks for fp32); ``auto(isa)`` makes this CPU's int8 ISA."""
    monkeypatch.delenv(ENV, raising=False)
    return lambda isa: monkeypatch.setenv(ISA_ENV, isa)


def test_auto_is_int8_with_vnni_or_amx_and_fp32_without():
    assert precision_choice(isa=isa_of(VNNI)).precision == "int8"
    assert precision_choice(isa=isa_of(AMX)).precision == "int8"
    assert precision_choice(isa=isa_of(AVX2)).precision == "fp32"
    assert precision_choice(isa=isa_of({"avx2", "avx_vnni"})).precision == "fp32"  # not measured there yet
    assert precision_choice(isa=isa_of(set())).precision == "fp32"


def test_the_reason_names_the_cpu_the_figure_and_the_override():
    vnni = precision_choice(isa="avx512-vnni")
    assert vnni == PrecisionChoice("int8", "auto", "avx512-vnni", vnni.reason)
    assert vnni.reason.startswith("this CPU has AVX-512 VNNI: int8 ran ") and "x fp32 per run" in vnni.reason
    assert vnni.reason.endswith("; --precision fp32 to override")
    assert precision_choice(isa="avx2").reason.endswith("; --precision int8 to try it")


def test_only_a_backend_with_an_int8_plan_is_chosen_for():
    assert precision_choice("ort", "whole", isa="amx") is None
    assert precision_choice("torch", isa="amx") is None
    assert precision_choice("ort", "split", "fp32", isa="amx") == PrecisionChoice("fp32", "fp32", "amx",
                                                                                    "--precision fp32")


def test_every_int8_isa_is_in_the_rule_with_its_measurement():
    rule = PrecisionRule.load()
    assert set(rule.isas) == set(ISAS)
    assert all(e.measured and e.cpu for e in rule.isas.values())


def test_a_rule_and_a_variable_with_a_bad_precision_are_one_error(tmp_path, monkeypatch):
    bad = tmp_path / "precision.toml"
    bad.write_text('[isa.amx]\nprecision = "int4"\ncpu = "AMX"\nmeasured = "-"\n')
    with pytest.raises(ConfigError, match="fp32 or int8"):
        choose_precision("auto", "amx", PrecisionRule.load(bad))
    monkeypatch.setenv(ENV, "int4")
    with pytest.raises(ConfigError, match=r"\$VSR_PRECISION must be one of auto, fp32, int8"):
        asked_precision(None)
    monkeypatch.setenv(ENV, "fp32")
    assert asked_precision(None) == ("fp32", "$VSR_PRECISION") and asked_precision("int8")[0] == "int8"


def test_backend_options_takes_auto():
    assert backend_options(precision="auto") in (SplitOptions(precision="int8"), SplitOptions())
    assert backend_options("ort", "whole", precision="auto").threads is None  # no int8 plan: its own


def settings(*argv):
    return upscale_settings(build_parser().parse_args(["upscale", "in.mp4", "out.mkv", *argv]))[0]


def test_upscale_defaults_to_int8_on_vnni_and_says_so_first(auto, capsys):
    auto("avx512-vnni")
    request = settings()
    assert request.options == SplitOptions(precision="int8") and request.precision.precision == "int8"
    say_precision(request)
    assert capsys.readouterr().err == f"vsr: precision: int8 ({request.precision.reason})\n"
    auto("avx2")
    assert settings().options == SplitOptions() and settings().precision.precision == "fp32"


def test_precision_fp32_overrides_silently(auto, capsys):
    auto("amx")
    request = settings("--precision", "fp32")
    assert request.options == SplitOptions() and request.precision.asked == "fp32"
    say_precision(request)
    assert capsys.readouterr().err == ""


def test_a_run_says_the_choice_first_and_records_it_in_its_report(tmp_path, make_clip, auto):
    auto("avx2")  # fp32: the quick plan to build, on any machine
    clip = make_clip("clip.mp4", width=24, height=16, frames=3)
    res = subprocess.run([sys.executable, "-m", "vsr", "upscale", clip, tmp_path / "out.mkv", "--weights", "random",
                          "--config", "edvr-tiny", "--threads", "1", "--codec", "ffv1", "--report",
                          tmp_path / "run.json"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("vsr: warning")]
    assert lines[0].startswith("vsr: precision: fp32 (this CPU has AVX2 and no VNNI: int8 ran "), res.stderr
    report = json.loads((tmp_path / "run.json").read_text())["settings"]
    assert report["precision"] == "fp32"
    assert report["precision_choice"] == {"precision": "fp32", "asked": "auto", "isa": "avx2",
                                          "reason": lines[0].split(" (", 1)[1][:-1]}


def test_a_refused_jobs_add_says_the_refusal_alone(tmp_path, auto, capsys):
    """The hostile sweep (issue 37): `jobs add` of a folder with no videos printed the precision line first."""
    auto("amx")
    (tmp_path / "empty").mkdir()
    assert main(["jobs", "add", str(tmp_path / "empty"), "--out-dir", str(tmp_path / "out"), "--store",
                 str(tmp_path / "jobs.db")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vsr: error: no videos in folder"), lines


@pytest.mark.parametrize("content", [b"", b"not a video\n"])
def test_jobs_add_of_a_file_that_is_no_video_says_the_refusal_alone(tmp_path, auto, capsys, content):
    """`jobs add` of an empty or text file named .mp4 printed the precision line ("kept in the job") before
    refusing it: no job was kept."""
    auto("amx")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(content)
    assert main(["jobs", "add", str(bad), "--out-dir", str(tmp_path / "out"), "--store", str(tmp_path / "jobs.db"),
                 "--weights", "random", "--config", "edvr-tiny"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vsr: error: not a video file: {bad}"), lines


def test_jobs_add_into_a_file_that_is_no_job_store_says_so_alone(tmp_path, make_clip, auto, capsys):
    """The hostile sweep (seed 41): `jobs add --store` naming a file that is not a job store measured the source
    and printed the weights and precision lines before refusing the store; the store is checked first, and the
    file is left as it was."""
    auto("amx")
    clip = make_clip("clip.mp4", width=24, height=16, frames=3)
    store = tmp_path / "notes.txt"
    store.write_text("a user's notes\n")
    assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / "out"), "--store", str(store)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vsr: error: job store ") and "not a job store" in lines[0], lines
    assert store.read_text() == "a user's notes\n" and not (tmp_path / "out").exists()


def test_a_job_keeps_the_precision_chosen_where_it_was_added(tmp_path, make_clip, auto, capsys):
    from vsr.jobs import JobSpec
    from vsr.jobs.store import JobStore

    auto("amx")
    clip = make_clip("clip.mp4", width=24, height=16, frames=3)
    store = tmp_path / "jobs.db"
    assert main(["jobs", "add", str(clip), "--out-dir", str(tmp_path / "out"), "--store", str(store),
                 "--weights", "random", "--config", "edvr-tiny", "--codec", "ffv1"]) == 0
    err = capsys.readouterr().err
    assert "vsr: precision: int8 (this CPU has AMX: " in err and "kept in the job: every worker runs int8" in err
    auto("avx2")  # a worker on another CPU reads the job as it was added
    with JobStore(store, write=False) as s:
        spec = JobSpec.from_json(s.spec_json(1))
    assert spec.backend.options.precision == "int8" and spec.backend.precision.isa == "amx"
    # the reason is no part of what the chunks hold: the same job asked for with --precision int8 has its key
    assert spec.key == JobSpec(spec.input, spec.output, BackendRequest(spec.backend.weights, spec.backend.config,
                                                                       spec.backend.options),
                               spec.encoder, spec.runner, spec.overwrite, spec.source).key


@pytest.mark.parametrize("argv, error", [
    (["upscale", "{tmp}/missing.mp4", "{tmp}/out.mkv"], "vsr: error: no such file or folder: "),
    (["preview", "{tmp}/missing.mp4", "--out", "{tmp}/p.png"], "vsr: error: no such file or folder: "),
    (["upscale", "{clip}", "{tmp}/out.mkv", "--crf", "99"], "vsr: error: --crf 99"),
    (["upscale", "{clip}", "{tmp}/out.mkv", "--weights", "reel"], "vsr: error: weights file not found: reel"),
    (["preview", "{clip}", "--out", "{tmp}/p.png", "--weights", "reel"], "vsr: error: weights file not found: reel"),
])
def test_a_refused_upscale_or_preview_says_the_refusal_alone(tmp_path, make_clip, auto, capsys, argv, error):
    """The precision line came first on every CPU, so each refused run printed two lines (a missing input, a
    --crf out of range, a mistyped weights name); it is said once the run is past its checks."""
    auto("avx512-vnni")
    clip = make_clip("clip.mp4", width=24, height=16, frames=3)
    assert main([a.format(tmp=tmp_path, clip=clip) for a in argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(error), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_the_precision_line_still_comes_first_once_the_run_is_past_its_checks(auto, capsys):
    from types import SimpleNamespace

    from vsr.cli.settings import PrecisionLine

    auto("avx512-vnni")
    request = settings()
    line = PrecisionLine(request)
    for name in PrecisionLine.CHECKING:
        line.phase(name)
    assert capsys.readouterr().err == ""
    line.weights(SimpleNamespace(line=lambda: "real (because)"))  # --weights auto: just before the weights line
    line.phase("exporting ONNX")
    line.start()
    assert capsys.readouterr().err.splitlines() == [f"vsr: precision: int8 ({request.precision.reason})",
                                                    "vsr: weights: real (because)"]
    line = PrecisionLine(request)
    line.phase("exporting ONNX")  # named weights: at the backend's first step
    line.start()
    assert capsys.readouterr().err.count("vsr: precision: ") == 1
    quiet = PrecisionLine(request, quiet=True)
    quiet.phase("exporting ONNX")
    quiet.start()
    assert capsys.readouterr().err == ""
