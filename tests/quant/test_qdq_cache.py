"""The CUDA runtime's int8 path caches its Q/DQ export (TensorRT's input) beside the fp32 export under a key of what
makes its content: it was ``<fp32 stem>-qdq.onnx`` whatever the quantisation, so a calibration or quantisation
change kept using the stale file, and a damaged file was handed to TensorRT as it was."""

from __future__ import annotations

import os
import shutil
import time
import warnings

import onnx
import pytest

import vsr.files
import vsr.quant.config
import vsr.quant.qdq as qdq
from vsr.backends.cuda.engines import _exporter
from vsr.export.onnx import state_checksum
from vsr.model import load_model
from vsr.quant.config import QuantConfig
from vsr.quant.isa import ISAS


@pytest.fixture
def int8_export(monkeypatch, tmp_path):
    """The CUDA runtime's int8 exporter of a random edvr-tiny, caching under ``tmp_path``."""
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "engines"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (seeded random weights)
        model, cfg = load_model("random", "edvr-tiny")

    def export():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=FutureWarning)
            return _exporter(model, cfg, state_checksum(model), "int8")(16, 20)
    return export


def _qdq_ops(path) -> int:
    return sum(n.op_type == "QuantizeLinear" for n in onnx.load(str(path)).graph.node)


def test_the_qdq_export_is_keyed_by_what_makes_it(int8_export, monkeypatch, tmp_path):
    first = int8_export()
    assert _qdq_ops(first) > 0 and "-qdq-" in first.name
    made = first.stat().st_mtime_ns, first.stat().st_ino
    assert int8_export() == first and (first.stat().st_mtime_ns, first.stat().st_ino) == made  # used, not remade
    monkeypatch.setattr(qdq, "TRT_WEIGHT_QMAX", 63)  # another quantisation of the weights: another file
    second = int8_export()
    assert second != first and second.is_file() and first.is_file()
    monkeypatch.undo()
    key = qdq.qdq_key(QuantConfig())
    assert qdq.qdq_key(QuantConfig()) == key  # deterministic
    assert qdq.qdq_key(QuantConfig(windows=3)) != key  # the calibration
    monkeypatch.setattr(vsr.quant.config, "QUANT_FORMAT", vsr.quant.config.QUANT_FORMAT + 1)
    assert qdq.qdq_key(QuantConfig()) != key
    monkeypatch.undo()
    code = tmp_path / "code"  # the Q/DQ writer's code (vsr's version number does not change with it)
    (code / "vsr" / "quant").mkdir(parents=True)
    for name in qdq.QDQ_CODE:
        shutil.copy(vsr.files.PACKAGE_PARENT / name, code / name)
    with (code / "vsr/quant/qdq.py").open("a") as f:
        f.write("# changed\n")
    monkeypatch.setattr(vsr.files, "PACKAGE_PARENT", code)
    qdq._code_digest.cache_clear()
    try:
        assert qdq.qdq_key(QuantConfig()) != key
    finally:
        qdq._code_digest.cache_clear()


def test_a_damaged_qdq_export_is_made_again_with_one_warning(int8_export):
    path = int8_export()
    path.write_bytes(b"\x08not an onnx model")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again = int8_export()
    said = [str(w.message) for w in seen if "Q/DQ" in str(w.message)]
    assert len(said) == 1 and said[0].startswith(f"the cached Q/DQ export {path} cannot be read (")
    assert said[0].endswith("); exporting it again")
    assert again == path and _qdq_ops(path) > 0


def test_the_qdq_export_is_one_file_whatever_the_cpu_s_int8_isa(int8_export, tmp_path):
    """The Q/DQ form is the same bytes on every int8 ISA (TensorRT's 8-bit weights, an fp32 calibration), yet the
    CPU plan's ISA fields were in its key: an identical file of tens of MB per ISA."""
    fp32 = _fp32_of(int8_export())
    made = [qdq.export_int8_qdq(fp32, tmp_path / f"{isa}.onnx", QuantConfig(isa=isa)).read_bytes()
            for isa in ("avx2", "avx512-vnni")]
    assert made[0] == made[1]
    assert len({qdq.qdq_key(QuantConfig(isa=isa)) for isa in ISAS}) == 1
    assert qdq.qdq_key(QuantConfig(isa="avx2", windows=3)) != qdq.qdq_key(QuantConfig(isa="avx2"))


def _fp32_of(path):
    return path.with_name(path.name.split("-qdq-")[0] + ".onnx")


def _aged(path, days: float):
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def test_a_new_qdq_export_removes_the_model_s_entries_no_run_used_for_a_week(int8_export, monkeypatch, tmp_path):
    """Every key change left the earlier Q/DQ export (tens of MB) in the cache for good.  Writing one now removes
    the model's (config and size) regular files of that form unused for UNUSED_DAYS; nothing else."""
    first = int8_export()
    folder, stem = first.parent, first.name.split("-qdq-")[0]

    def entry(key: str, model: str = stem):
        return folder / f"{model}-qdq-{key * 20}.onnx"

    old = _aged(shutil.copy(first, entry("0")), 8)
    recent = _aged(shutil.copy(first, entry("1")), 6)  # (UNUSED_DAYS is 7)
    other = _aged(shutil.copy(first, entry("0", stem.replace("-16x20-", "-32x32-"))), 8)  # another size
    outside = _aged(shutil.copy(first, tmp_path / "outside.onnx"), 8)
    link = entry("2")
    link.symlink_to(outside)
    _aged(link, 8)
    note = folder / f"{entry('3').name}.notes"  # a name vsr does not write
    note.write_text("x")
    _aged(note, 8)
    _aged(_fp32_of(first), 8)  # the fp32 export it is made from: not a Q/DQ entry
    _aged(first, 8)  # the key the next export leaves
    was = qdq.TRT_WEIGHT_QMAX
    monkeypatch.setattr(qdq, "TRT_WEIGHT_QMAX", 63)  # another key
    second = int8_export()
    assert second != first and second.is_file()
    assert not first.exists() and not old.exists()
    assert recent.is_file() and other.is_file() and outside.is_file() and link.is_symlink() and note.is_file()
    assert _fp32_of(first).is_file()
    _aged(second, 8)
    assert int8_export() == second and time.time() - second.stat().st_mtime < 60  # used: marked so
    monkeypatch.setattr(qdq, "TRT_WEIGHT_QMAX", was)
    again = int8_export()  # the first key again: written, and the entry a run used kept
    assert again == first and second.is_file() and recent.is_file()
