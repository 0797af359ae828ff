"""Job files: the documented example parses, paths are relative to the file, and a typo or a wrong type is one
line naming the key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from vsr.cli.settings import add_upscale_options
from vsr.errors import InputError
from vsr.jobs.jobfile import UPSCALE_KEYS, read_job_file

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "batch.toml"
    path.write_text(text)
    return path


def test_the_example_documents_every_key():
    f = read_job_file(REPO / "jobs" / "example.toml")
    assert f.out_dir == REPO / "upscaled" and f.inputs[0] == REPO / "videos" / "holiday.mp4"
    assert (f.ext, f.chunk_frames, f.overwrite) == ("mkv", 300, False)
    # tile: automatic unless set; int8-calibration: a folder of your frames; frames, start, end: all unless set;
    # frame-rate: a folder of frames' (the example's inputs are videos); each shown commented out
    unset = ("int8_calibration", "frames", "start", "end", "frame_rate")
    assert set(f.upscale) == set(UPSCALE_KEYS) - {"tile", *unset}
    text = (REPO / "jobs" / "example.toml").read_text()
    assert all(f"# {k.replace('_', '-')} = " in text for k in unset)
    assert f.upscale["memory_budget"] == 3072 and f.upscale["encoder_options"] == ["tune=film"]


def test_the_keys_are_those_of_vsr_upscale():
    p = argparse.ArgumentParser()
    add_upscale_options(p)
    assert {a.dest for a in p._actions if a.dest != "help"} == set(UPSCALE_KEYS)


def test_paths_are_relative_to_the_file(tmp_path):
    f = read_job_file(write(tmp_path, 'inputs = "in/a.mp4"\nout_dir = "out"\n[upscale]\nweights = "w.pth"\n'
                                      'config = "edvr-m"\n'))
    assert f.inputs == (tmp_path / "in" / "a.mp4",) and f.out_dir == tmp_path / "out"
    assert f.upscale == {"weights": str(tmp_path / "w.pth"), "config": "edvr-m"}
    assert f.ext is None and f.chunk_frames is None and f.overwrite is None


@pytest.mark.parametrize("text, message", [
    ('inputs = ["a.mp4"]\nouput_dir = "x"\n', "unknown key 'ouput_dir' (did you mean 'out_dir'?)"),
    ('inputs = ["a.mp4"]\n[upscale]\ncodex = "ffv1"\n', "[upscale]: unknown key 'codex' (did you mean 'codec'?)"),
    ('inputs = ["a.mp4"]\n[upscale]\nbatch = "two"\n', "[upscale]: batch must be an integer, not 'two'"),
    ('inputs = ["a.mp4"]\nchunk_frames = true\n', "chunk_frames must be an integer, not True"),
    ('inputs = ["a.mp4"]\nchunk_frames = 0\n', "chunk_frames must be >= 1"),
    ('inputs = []\n', "inputs must be a path or a list of paths (at least one)"),
    ('out_dir = "x"\n', "inputs must be"),
    ('inputs = ["a.mp4"\n', "is not valid TOML"),
])
def test_a_bad_job_file_is_one_line_naming_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as e:
        read_job_file(path)
    assert message in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_missing_job_file(tmp_path):
    with pytest.raises(InputError, match="cannot read job file .*nope.toml"):
        read_job_file(tmp_path / "nope.toml")


@pytest.mark.parametrize("name", ["auto", "default", "real", "clean", "random"])
def test_bundled_weights_names_are_not_paths(tmp_path, name):
    f = read_job_file(write(tmp_path, f'inputs = "a.mp4"\n[upscale]\nweights = "{name}"\n'))
    assert f.upscale == {"weights": name}


def test_a_key_is_renamed_where_the_message_names_it_not_in_an_output_or_escaped_path(tmp_path):
    """Outputs (``out_dir`` and an input's stem) and a path as :func:`vsr.errors.printable` prints it keep the
    option's spelling; the option the message is about is named as the file's key."""
    from vsr.errors import printable
    from vsr.jobs.jobfile import in_its_words

    job = read_job_file(write(tmp_path, 'inputs = ["x --tile y.mp4", "a\\n--tile.mp4"]\nout_dir = "o"\n'
                                        '[upscale]\ntile = 33\n'))
    out, odd = tmp_path / "o" / "x --tile y.mkv", printable(tmp_path / "a\n--tile.mp4")
    assert in_its_words(job, f"--tile 33: {out} and {odd}; --tile") == (
        f"job file {job.path}: [upscale]: tile 33: {out} and {odd}; tile")
    elsewhere = tmp_path / "cli-out"  # the command line's --out-dir, where the file names none
    assert in_its_words(job, f"--tile 33: {elsewhere}/x --tile y.mkv", elsewhere).endswith(
        f": tile 33: {elsewhere}/x --tile y.mkv")
    assert in_its_words(job, f"--batch 3: {out}") is None  # an option of the command line's: as it is
