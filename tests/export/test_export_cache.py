"""The export cache trusts what it reads back only from a folder of the user's alone, and a damaged entry is
exported again with one warning line (it was used as it was: a traceback from deep inside onnx or ONNX Runtime,
or another user's planted model computing the output)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import resource
import signal
import subprocess
import sys
import time
import warnings

import onnx
import pytest

from vsr.errors import InputError, OutputError
from vsr.export import cache
from vsr.export.cache import cached_export, export_key
from vsr.export.onnx import state_checksum
from vsr.model.weights import load_model


@pytest.fixture(scope="module")
def tiny():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model("random", "edvr-tiny")


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """One export of EDVR-tiny at 16x16 (~20 s), kept; each test gets its own engine folder holding a copy."""
    root = tmp_path_factory.mktemp("first")
    mp = pytest.MonkeyPatch()
    mp.setenv("VSR_ENGINE_DIR", str(root))
    try:
        path = cached_export(*tiny, 16, 16)
    finally:
        mp.undo()
    return path.name, path.read_bytes()


@pytest.fixture
def engines(tmp_path, monkeypatch, exported):
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "engines"))
    folder = tmp_path / "engines" / "onnx"
    folder.mkdir(parents=True, mode=0o700)
    name, data = exported
    (folder / name).write_bytes(data)
    return folder / name


def _export(tiny):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path = cached_export(*tiny, 16, 16)
    return path, [str(w.message) for w in seen]


def test_a_valid_entry_is_used_as_it_is(tiny, engines):
    stamp = engines.stat().st_mtime_ns
    path, said = _export(tiny)
    assert path == engines and said == [] and engines.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("damage", ["cut", "garbage"])
def test_a_damaged_entry_is_exported_again_with_one_warning(tiny, engines, damage):
    """Cut short at a field boundary the file still parsed, its last nodes and its metadata gone; garbage was
    protobuf's DecodeError as a traceback (split plan) or one error line naming the file, run after run."""
    data = engines.read_bytes()
    engines.write_bytes(data[: len(data) // 2] if damage == "cut" else b"\x08\x01" + os.urandom(999))
    path, said = _export(tiny)
    assert path == engines and len(said) == 1 and "exporting it again" in said[0] and str(engines) in said[0]
    assert cache.unusable(engines, state_checksum(tiny[0]), tiny[1], 16, 16) is None  # a whole export again


def test_an_entry_of_other_weights_or_size_under_the_name_is_not_used(tiny, engines, tmp_path):
    """The name is the key; a file renamed to it (another key's export) was used as it was."""
    model = onnx.load(str(engines))
    for e in model.metadata_props:
        if e.key == "vsr.weights_sha256":
            e.value = "0" * 64
    onnx.save(model, str(engines))
    os.chmod(engines, 0o644)
    path, said = _export(tiny)
    assert len(said) == 1 and "not the export asked for" in said[0]
    meta = {e.key: e.value for e in onnx.load(str(path)).metadata_props}
    assert meta["vsr.weights_sha256"] != "0" * 64


def test_an_entry_others_can_write_is_exported_again_and_entries_are_made_without_group_write(tiny, engines):
    os.chmod(engines, 0o666)
    old = os.umask(0o002)  # the default umask of many distributions' users: 0664 entries were never trusted
    try:
        path, said = _export(tiny)
    finally:
        os.umask(old)
    assert len(said) == 1 and "is not yours alone (other users can write to it (mode 666))" in said[0]
    assert not path.stat().st_mode & 0o022
    assert _export(tiny)[1] == []  # and it is reused from then on


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["777", "775"])
def test_a_folder_others_can_write_is_refused_in_one_line(tiny, engines, mode, shared_group):
    """A shared VSR_ENGINE_DIR: whoever can write there decides the output of everyone who uses it (775: its
    group has other users in it)."""
    os.chown(engines.parent, -1, shared_group)
    os.chmod(engines.parent, mode)
    with pytest.raises(InputError, match=rf"will not keep cached ONNX exports in .*onnx: other users can write to "
                                         rf"it \(mode {mode:o}\); .* set VSR_ENGINE_DIR to a folder of yours alone"):
        cached_export(*tiny, 16, 16)


def test_a_folder_that_cannot_be_made_is_one_line_naming_it(tiny, tmp_path, monkeypatch):
    """A VSR_ENGINE_DIR under a file (or a read-only home's cache) said only "FileNotFoundError: [Errno 2] No
    such file or directory: PATH", not what the folder was for or what moves it."""
    (tmp_path / "x.txt").write_text("")
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "x.txt" / "engines"))
    with pytest.raises(InputError) as refused:
        cached_export(*tiny, 16, 16)
    assert str(refused.value) == (f"cannot make the folder for cached ONNX exports {tmp_path}/x.txt/engines/onnx: "
                                  "Not a directory; set VSR_ENGINE_DIR to a folder you can write")


def test_a_folder_or_entry_of_another_user_is_not_trusted(tiny, engines, monkeypatch):
    """No chown here: the check is given another user id as this process's own."""
    me = os.geteuid()
    monkeypatch.setattr("vsr.files.os.geteuid", lambda: me + 1)
    with pytest.raises(InputError, match=rf"will not keep cached ONNX exports in .*: it belongs to user {me};"):
        cached_export(*tiny, 16, 16)
    monkeypatch.setattr("vsr.export.cache.private_folder", lambda path, *a, **k: path)
    assert cache.unusable(engines, "x", tiny[1], 16, 16) == f"is not yours alone (it belongs to user {me})"


def test_a_new_folder_is_made_mode_0700(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "new"))
    assert cache.export_folder().stat().st_mode & 0o777 == 0o700


def test_the_key_covers_the_exporters_versions_and_vsrs_graph_code(tiny, monkeypatch):
    model, cfg = tiny
    base = export_key("w", cfg, 16, 16)
    installed = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.1" if name == "onnxscript" else installed(name))
    assert export_key("w", cfg, 16, 16) != base
    monkeypatch.undo()
    monkeypatch.setattr(onnx, "__version__", "0.0.1")
    assert export_key("w", cfg, 16, 16) != base
    monkeypatch.undo()
    monkeypatch.setattr(cache, "graph_code_digest", lambda: "other")
    assert export_key("w", cfg, 16, 16) != base
    monkeypatch.undo()
    assert export_key("w", cfg, 16, 16) == base and export_key("w", cfg, 16, 16, precision="fp16") != base


def test_the_key_is_known_without_importing_the_exporter():
    """Importing onnxscript for its version was ~2 s of every run's lookup of a cached export (build:export on the
    2-core machine); the key is the one its __version__ gave, so the exports cached before stay valid."""
    code = ("import importlib.metadata, sys\n"
            "from vsr.export.cache import export_key\n"
            "from vsr.model.config import load_config\n"
            "export_key('w', load_config('edvr-tiny'), 16, 16)\n"
            "print('onnxscript' in sys.modules)\n"
            "import onnxscript\n"
            "print(importlib.metadata.version('onnxscript') == onnxscript.__version__)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "True"]


def _aged(path, days: float):
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def test_a_new_export_removes_the_model_s_exports_no_run_used_for_a_week(tiny, engines, monkeypatch, tmp_path):
    """Every key change (a torch or onnx upgrade, vsr's graph code, new weights) left the earlier export (tens of
    MB) in the cache for good.  Writing one now removes the exports of its config and size that no run used for
    UNUSED_DAYS (a run marks the one it uses); nothing else."""
    folder, data = engines.parent, engines.read_bytes()
    stem = engines.name.rsplit("-", 1)[0]  # edvr-tiny-16x16

    def entry(name: str, days: float):
        (folder / name).write_bytes(data)
        return _aged(folder / name, days)

    old = entry(f"{stem}-{'0' * 20}.onnx", 8)
    old16 = entry(f"{stem}-fp16-{'1' * 20}.onnx", 8)  # the model's fp16 export
    recent = entry(f"{stem}-{'2' * 20}.onnx", 6)  # (UNUSED_DAYS is 7)
    size = entry(f"{stem.replace('16x16', '16x20')}-{'0' * 20}.onnx", 8)  # another size
    qdq = entry(f"{stem}-{'0' * 20}-qdq-{'0' * 20}.onnx", 8)  # the Q/DQ cache's own
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(data)
    _aged(outside, 8)
    (folder / f"{stem}-{'3' * 20}.onnx").symlink_to(outside)
    _aged(folder / f"{stem}-{'3' * 20}.onnx", 8)
    _aged(engines, 8)
    assert _export(tiny) == (engines, []) and time.time() - engines.stat().st_mtime < 60  # used: marked so
    assert old.is_file()  # (a use writes nothing: nothing removed)
    _aged(engines, 8)
    monkeypatch.setattr(cache, "graph_code_digest", lambda: "other")  # another key: written
    path, said = _export(tiny)
    assert path != engines and path.is_file() and said == []
    assert not engines.exists() and not old.exists() and not old16.exists()
    assert recent.is_file() and size.is_file() and qdq.is_file() and outside.is_file()
    assert (folder / f"{stem}-{'3' * 20}.onnx").is_symlink()
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


@contextlib.contextmanager
def _file_size_limit(size: int):
    """Writes past ``size`` bytes of a file fail with EFBIG in this process (a full disk, with no mount)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    was = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (else the limit kills the process)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, was)


def test_a_full_engine_disk_is_one_line_naming_the_engine_folder(tiny, engines):
    """An export that filled VSR_ENGINE_DIR's disk said only "vsr: error: OSError: [Errno 28] No space left on
    device": the user looked at their output's disk, which had room.  The fp16 form: an export without torch's."""
    with _file_size_limit(100_000), pytest.raises(OutputError) as refused:
        cached_export(*tiny, 16, 16, precision="fp16")
    assert str(refused.value) == (f"cannot write an ONNX export into vsr's engine cache {engines.parent}: File too "
                                  "large; make room there or set VSR_ENGINE_DIR to a folder on another disk")
    assert sorted(p.name for p in engines.parent.iterdir()) == [engines.name]  # no temporary left
