"""A damaged source (bytes overwritten in its middle) is said once, at the run's end, and kept in its report:
FFmpeg's demuxer skips what it cannot parse and its decoder conceals what it cannot decode, and a .mkv was
upscaled with frames missing without a word (vsr.video.damage).  A whole file says nothing."""

from __future__ import annotations

import json
import subprocess

import av
import pytest

from tests.data import VIDEOS, needs
from tests.probe.cli_io import ProbeRunner
from tests.probe.test_probe_data_loss import RUN
from tests.video.tools import ffmpeg
from vsr.report.combine import combine_reports
from vsr.video import open_source
from vsr.video.damage import unwatched
from vsr.video.passthrough import FilePackets


def clip(folder, name: str) -> object:
    """20 frames of 64x48 x264 (a keyframe each 12) in ``name``'s container."""
    path = folder / name
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-frames:v", "20",
                    "-c:v", "libx264", "-g", "12", str(path)], check=True)
    return path


def damaged(path, n: int = 600, at: int | None = None) -> object:
    """``path`` with ``n`` fixed bytes written over it at byte ``at`` (None: a third of the way in), beside it."""
    data = bytearray(path.read_bytes())
    at = len(data) // 3 if at is None else at
    data[at:at + n] = bytes((i * 37 + 11) % 256 for i in range(n))
    out = path.with_name("damaged-" + path.name)
    out.write_bytes(bytes(data))
    return out


def decoded(path) -> tuple[int, dict | None]:
    source = open_source(path)
    try:
        return sum(1 for _ in source.frames()), source.damage
    finally:
        source.close()


@pytest.mark.parametrize("name", ["a.mkv", "a.ts"])
def test_a_damaged_source_records_its_errors_and_a_whole_one_nothing(tmp_path, name):
    whole = clip(tmp_path, name)
    assert decoded(whole) == (20, None)
    _, damage = decoded(damaged(whole))
    assert damage is not None and damage["frames_with_errors"] + damage["error_lines"] >= 1, damage
    assert damage["first_s"] is not None and damage["first_error"]


def test_a_damaged_mp4_decodes_past_the_packets_its_decoder_refuses(tmp_path):
    """Overwritten bytes in an MP4's mdat: the decoder refuses packets as invalid data, which stopped the run
    ("decoding ... failed at frame 6"), the rest of the file lost.  Now they are skipped, as FFmpeg's own tools do
    (the same frames as ffprobe counts), said as damage, not as an early end (every packet is there)."""
    src = damaged(clip(tmp_path, "a.mp4"))
    counted = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames",
                              "-of", "csv=p=0", str(src)], capture_output=True, text=True, check=True).stdout
    source = open_source(src)
    try:
        assert sum(1 for _ in source.frames()) == int(counted) < 20
        assert source.damage is not None and source.damage["error_lines"] >= 1 and source.early_end is None
    finally:
        source.close()


@needs(VIDEOS)
def test_the_real_clips_are_not_damaged():
    for path in sorted(VIDEOS.iterdir()):
        assert decoded(path)[1] is None, path


def test_a_run_on_a_damaged_mkv_says_so_once_and_reports_it(tmp_path):
    src = damaged(clip(tmp_path, "a.mkv"))
    ran = ProbeRunner().run(["upscale", src, tmp_path / "o.mkv", "--report", tmp_path / "r.json", *RUN],
                            tmp_path / "ran")
    assert ran.rc == 0, ran.err
    assert len(ran.lines) == 1 and ran.lines[0].startswith(f"vsr: warning: {src} is damaged: "), ran.lines
    assert "the output has what FFmpeg recovered" in ran.lines[0]
    damage = json.loads((tmp_path / "r.json").read_text())["settings"]["input_damaged"]
    assert damage["error_lines"] >= 1 and damage["first_error"] in ran.lines[0]
    whole = ProbeRunner().run(["upscale", tmp_path / "a.mkv", tmp_path / "w.mkv", *RUN], tmp_path / "whole")
    assert whole.rc == 0 and whole.lines == [], whole.err


@pytest.mark.parametrize("name", ["a.mkv", "a.ts"])
def test_a_damaged_stream_on_standard_input_is_said_and_decoded_past(tmp_path, name):
    """(standard input was not watched: its damage was silent; a packet its decoder refused stopped the run)"""
    src = damaged(clip(tmp_path, name))
    ran = ProbeRunner().run(["upscale", "-", tmp_path / "o.mkv", "--report", tmp_path / "r.json", *RUN],
                            tmp_path / "ran", stdin=src.read_bytes())
    assert ran.rc == 0, ran.err
    said = [line for line in ran.lines if " is damaged: " in line]
    assert len(said) == 1 and said[0].startswith("vsr: warning: standard input is damaged: "), ran.lines
    damage = json.loads((tmp_path / "r.json").read_text())["settings"]["input_damaged"]
    assert damage["error_lines"] + damage["frames_with_errors"] >= 1


def test_damage_before_a_piped_stream_s_first_frame_is_said_as_of_the_file(tmp_path):
    """A stream on standard input is opened and probed from its own first frame, read once, outside the damage
    watch: 200 bytes overwritten in the first keyframe were said of the file and not of the same bytes piped."""
    src = damaged(clip(tmp_path, "a.ts"), 200, at=188 * 5 + 20)  # the sixth MPEG-TS packet: the first frame's
    said = {}
    for name, given, stdin in (("file", src, None), ("pipe", "-", src.read_bytes())):
        ran = ProbeRunner().run(["upscale", given, tmp_path / f"{name}.mkv", "--report", tmp_path / f"{name}.json",
                                 *RUN], tmp_path / name, stdin=stdin)
        assert ran.rc == 0, ran.err
        said[name] = json.loads((tmp_path / f"{name}.json").read_text())["settings"].get("input_damaged")
    assert said["file"] is not None and said["file"]["first_s"] == 0 and said["pipe"] == said["file"]


def test_damage_the_demuxer_meets_while_the_source_is_opened_again_is_said(tmp_path):
    """The second frame's block header overwritten in a .mkv: the demuxer logs "Element ... exceeds containing
    master element" while it opens the file (reading its first cluster) and stops there.  The decode opens the file
    again after the probe, and that opening was watched by nothing: the run said only that it ended early (1 of 20
    frames), as if the file were cut short, where the same bytes piped said damage."""
    src = clip(tmp_path, "a.mkv")
    with av.open(str(src)) as c:
        second = [packet.pos for packet in c.demux(video=0)][1]  # (its data: after its block's header)
    src = damaged(src, 8, at=second - 8)
    said, lines = {}, {}
    for name, given, stdin in (("file", src, None), ("pipe", "-", src.read_bytes())):
        ran = ProbeRunner().run(["upscale", given, tmp_path / f"{name}.mkv", "--report", tmp_path / f"{name}.json",
                                 *RUN], tmp_path / name, stdin=stdin)
        assert ran.rc == 0, ran.err
        said[name] = json.loads((tmp_path / f"{name}.json").read_text())["settings"].get("input_damaged")
        lines[name] = ran.lines
    damage = said["file"]
    assert damage is not None and "exceeds containing master element" in damage["first_error"], damage
    assert damage["demuxer_error_lines"] >= 1 and said["pipe"] == damage
    assert [line.split(": ")[2] for line in lines["file"]] == [f"{src} ended early", f"{src} is damaged"], lines


def test_a_second_reader_of_the_source_in_the_encode_stage_is_not_its_damage(tmp_path):
    """A run copies the source's audio with a demuxer of its own, in the encode stage, while the decode stage's
    watch is on: the watch, process-wide and by name (PyAV gives a line's name, not its context), counted that
    demuxer's lines on the damaged bytes again (a run's report said 2 error lines where the file has 1).  Lines
    of a thread under ``unwatched`` are no watch's."""
    src = tmp_path / "av.mkv"
    subprocess.run([ffmpeg(), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=10", "-f", "lavfi", "-i",
                    "sine=r=48000", "-frames:v", "100", "-t", "10", "-c:v", "libx264", "-g", "12", "-c:a", "aac",
                    str(src)], check=True)
    src = damaged(src)
    alone = decoded(src)[1]
    assert alone is not None and alone["error_lines"] >= 1

    def with_the_audio_copied(quiet: bool) -> dict | None:
        audio = FilePackets(src)
        audio.select({s.index for s in audio.streams})
        source = open_source(src)
        try:
            for i, _ in enumerate(source.frames()):
                if i == 1:  # (in the decoding thread: its lines as another thread's would be, but for unwatched)
                    copied = unwatched(iter(lambda: audio.next_packet() or None, None)) if quiet else \
                        iter(lambda: audio.next_packet() or None, None)
                    assert sum(1 for _ in copied) > 50
            return source.damage
        finally:
            source.close()
            audio.close()

    assert with_the_audio_copied(quiet=False)["error_lines"] > alone["error_lines"]  # (what the watch cannot tell)
    assert with_the_audio_copied(quiet=True) == alone
    ran = ProbeRunner().run(["upscale", src, tmp_path / "o.mkv", "--report", tmp_path / "r.json", *RUN],
                            tmp_path / "ran")  # (its encode stage copies the audio: unwatched)
    assert ran.rc == 0, ran.err
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["input_damaged"]["error_lines"] == \
        alone["error_lines"]


def test_a_jobs_report_sums_its_chunks_damage():
    first = {"frames_with_errors": 0, "error_lines": 2, "first_s": 1.5, "first_error": "x"}
    reports = [{"settings": {}}, {"settings": {"input_damaged": first}},
               {"settings": {"input_damaged": {**first, "frames_with_errors": 3, "first_s": 9.0}}}]
    assert combine_reports(reports)["settings"]["input_damaged"] == {**first, "frames_with_errors": 3,
                                                                      "error_lines": 4}


def test_a_job_whose_input_is_damaged_is_marked_in_the_list(tmp_path):
    """(`vsr jobs list` marked an input that ended early, ``done, short``; a damaged one read as a clean job)"""
    src = damaged(clip(tmp_path, "a.mkv"))
    store, out, cli = tmp_path / "q.db", tmp_path / "out", ProbeRunner()
    ran = cli.run(["jobs", "add", src, "--out-dir", out, "--store", store, "--codec", "ffv1", *RUN[:-1]],
                  tmp_path / "add")
    assert ran.rc == 0, ran.err
    ran = cli.run(["jobs", "run", "--until-empty", "--store", store], tmp_path / "run")
    assert ran.rc == 0, ran.err
    listed = cli.run(["jobs", "list", "--store", store], tmp_path / "list").out.decode()
    assert "done, damaged" in listed and "the input is damaged (" in listed, listed
    row = json.loads(cli.run(["jobs", "list", "--json", "--store", store], tmp_path / "json").out)[0]
    assert row["state"] == "done" and row["damaged"]["error_lines"] >= 1 and row["ended_early"] is None
    clean = tmp_path / "clean.db"
    cli.run(["jobs", "add", tmp_path / "a.mkv", "--out-dir", tmp_path / "o2", "--store", clean, "--codec", "ffv1",
             *RUN[:-1]], tmp_path / "add2")
    cli.run(["jobs", "run", "--until-empty", "--store", clean], tmp_path / "run2")
    assert json.loads(cli.run(["jobs", "list", "--json", "--store", clean], tmp_path / "j2").out)[0]["damaged"] is None
