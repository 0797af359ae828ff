"""The explicit Q/DQ form of an int8 model, the form TensorRT 10/11 build INT8 engines from.

Every int8 conv gets ``QuantizeLinear -> DequantizeLinear`` on its input (int8, symmetric, zero point 0, one
scale per tensor from calibration) and int8 weights behind a per-output-channel ``DequantizeLinear``
(``axis=0``).  TensorRT fuses each ``DQ -> Conv`` pair into an int8 convolution; ONNX Runtime runs the same file
in fp32 arithmetic on the quantized values, which is how the tests check it.  TensorRT has no int16 pair sums,
so weights use all 8 bits here (``qmax=127``), unlike the ONNX Runtime CPU plan.

:func:`cached_qdq` keeps the CUDA runtime's int8 export beside the fp32 export it is made from, under a key of
everything that makes its content (:func:`qdq_key`): a calibration or quantisation change is a new file, never a
stale one used.  Writing one removes those of the same model (config and size) that no run used for
:data:`UNUSED_DAYS` (a run marks the entry it uses): each key change left its tens of MB behind for good, and a
run that may still read an older one has marked it in the last day.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vsr.quant.calibrate import ConvStats
from vsr.quant.segment_graph import quantize_weights
from vsr.unused import UNUSED_DAYS, mark_used, remove_unused

TRT_WEIGHT_QMAX = 127
# vsr's files whose code decides the Q/DQ form beyond the int8 plan's own (vsr.plan.plan.INT8_CODE: calibration)
QDQ_CODE = ("vsr/quant/qdq.py",)
# the QuantConfig fields of the CPU plan's int8 ISA: its weight bits.  The Q/DQ form's weights are
# TRT_WEIGHT_QMAX's and its calibration is fp32 on every ISA (the same bytes: tests/quant/test_qdq_cache.py)
CPU_FIELDS = ("isa", "weight_qmax")


def qdq_model(model: onnx.ModelProto, stats: list[ConvStats], int8_convs: set[str]) -> onnx.ModelProto:
    """``model`` with the convs named in ``int8_convs`` in explicit Q/DQ (see the module docstring)."""
    m = copy.deepcopy(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    by_node = {s.node: s for s in stats}
    nodes, done = [], {}
    for n in g.node:
        s = by_node.get(n.name)
        if n.op_type == "Conv" and n.name in int8_convs and s is not None and n.input[1] in inits:
            x = n.input[0]
            if x not in done:
                amax = max(abs(s.x_range[0]), abs(s.x_range[1]), 1e-8)
                sc = numpy_helper.from_array(np.array(amax / 127.0, np.float32), f"{x}/qdq_s")
                zp = numpy_helper.from_array(np.zeros((), np.int8), f"{x}/qdq_z")
                g.initializer.extend([sc, zp])
                nodes += [helper.make_node("QuantizeLinear", [x, sc.name, zp.name], [f"{x}/q"], name=f"{x}/Q"),
                          helper.make_node("DequantizeLinear", [f"{x}/q", sc.name, zp.name], [f"{x}/dq"],
                                           name=f"{x}/DQ")]
                done[x] = f"{x}/dq"
            w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            wq, ws = quantize_weights(w, TRT_WEIGHT_QMAX)
            g.initializer.extend([numpy_helper.from_array(wq, f"{n.name}/w_q"),
                                  numpy_helper.from_array(ws, f"{n.name}/w_s"),
                                  numpy_helper.from_array(np.zeros(len(ws), np.int8), f"{n.name}/w_z")])
            nodes.append(helper.make_node("DequantizeLinear", [f"{n.name}/w_q", f"{n.name}/w_s", f"{n.name}/w_z"],
                                          [f"{n.name}/w_dq"], axis=0, name=f"{n.name}/w_DQ"))
            n.input[0], n.input[1] = done[x], f"{n.name}/w_dq"
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    used = {t for nd in g.node for t in nd.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    return m


def export_qdq(onnx_path, out_path, stats: list[ConvStats], int8_convs: set[str], mode: int = 0o666):
    """Write the Q/DQ form of the ONNX file at ``onnx_path`` to ``out_path`` (temporary name, then renamed; with
    the user's usual permissions, as every export: mkstemp's 0600 made a ``--qdq`` model unreadable to others;
    ``mode``: less the umask)."""
    from vsr.export.onnx import save_atomic

    out = Path(out_path)
    m = qdq_model(onnx.load(str(onnx_path)), stats, int8_convs)
    onnx.checker.check_model(m)
    save_atomic(m, out, mode)  # (nothing published after a stop: vsr.interrupt)
    return out


def export_int8_qdq(onnx_path, out_path, cfg=None, threads: int | None = None, mode: int = 0o666):
    """Calibrate the fp32 ONNX file at ``onnx_path`` (through its split plan, as the int8 plan is) and write
    its Q/DQ form to ``out_path``; the convs of lowest SQNR stay fp32 as in the plan (``cfg.keep_fp32``)."""
    import shutil

    from vsr.leftovers import temp_folder
    from vsr.plan.plan import write_plan
    from vsr.quant.calibrate import calibrate_plan
    from vsr.quant.config import QuantConfig, calibration_windows
    from vsr.quant.int8_plan import input_hw, choose_fp32

    cfg = cfg or QuantConfig()
    tmp = temp_folder("vsr-qdq-")  # (a killed run's is removed by the next one)
    try:
        plan = write_plan(onnx_path, tmp)
        t, h, w = input_hw(onnx.load(str(onnx_path), load_external_data=False))
        stats = calibrate_plan(plan, calibration_windows(cfg, t, h, w), threads, sqnr=cfg.keep_fp32 > 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    int8 = {s.node for s in stats} - choose_fp32(stats, cfg.keep_fp32)
    return export_qdq(onnx_path, out_path, stats, int8, mode)


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    from vsr.files import code_digest

    return code_digest(QDQ_CODE)


def qdq_key(cfg) -> str:
    """The key of the Q/DQ form made with the :class:`~vsr.quant.config.QuantConfig` ``cfg`` from a given fp32
    export (whose own key is in its name): ``cfg`` (its calibration frames' digest, ``QUANT_FORMAT``; not the
    CPU's int8 ISA, :data:`CPU_FIELDS`, which does not change the file), the weights' bits, the versions of onnx
    and ONNX Runtime (which calibrates), and a digest of vsr's code that partitions, calibrates and writes the
    form (:data:`vsr.plan.plan.PLAN_CODE`, ``INT8_CODE``, :data:`QDQ_CODE`: vsr's version number does not change
    with it)."""
    import onnxruntime

    from vsr.plan.plan import plan_tools

    quant = {k: v for k, v in cfg.fields().items() if k not in CPU_FIELDS}
    fields = {"quant": quant, "trt_weight_qmax": TRT_WEIGHT_QMAX, "tools": plan_tools(True),
              "onnxruntime": onnxruntime.__version__, "code": _code_digest()}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def cached_qdq(fp32: Path, weights_sha: str, config, height: int, width: int, cfg=None) -> Path:
    """The Q/DQ form of the cached fp32 export ``fp32`` (:func:`vsr.export.cache.cached_export` of ``config``'s
    model with weights ``weights_sha`` at ``height x width``), beside it as ``<its stem>-qdq-<key>.onnx``
    (:func:`qdq_key`), made on first use and again, with one warning, where the file there cannot be used
    (:func:`vsr.export.cache.unusable`: damaged, cut short, not this user's alone).  One used is marked so;
    one written removes the model's entries unused for :data:`UNUSED_DAYS`."""
    from vsr.export.cache import ENTRY_MODE, exporting, unusable
    from vsr.quant.config import QuantConfig

    cfg = cfg or QuantConfig()
    path = fp32.with_name(f"{fp32.stem}-qdq-{qdq_key(cfg)}.onnx")
    mark_used(path)  # first: a run that removes entries meanwhile sees this one used
    why = unusable(path, weights_sha, config, height, width)  # (the Q/DQ form keeps the fp32 export's metadata)
    if why is None:
        return path
    if why:
        warnings.warn(f"the cached Q/DQ export {path} {why}; exporting it again", stacklevel=2)
    exporting()
    out = export_int8_qdq(fp32, path, cfg, mode=ENTRY_MODE)
    # the model's entries: those of its config and size (any weights, fp32 export key or Q/DQ key)
    model = re.compile(rf"{re.escape(config.name)}-{height}x{width}-[0-9a-f]{{20}}-qdq-[0-9a-f]{{20}}\.onnx")
    remove_unused(path.parent, model.fullmatch, UNUSED_DAYS, keep=path.name)
    return out
