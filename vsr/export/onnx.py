"""EDVR -> ONNX (opset >= 19) with real ``DeformConv`` and ``DepthToSpace`` (CRD) nodes.

torch 2.13's TorchScript exporter crashes on an ``autograd.Function`` with a ``symbolic``; the dynamo
exporter with a ``torch.library`` custom op for the DCN and a custom translation to onnxscript's
``opset19.DeformConv`` works, so that is what is used here.

Graph I/O: input ``lr`` float32 ``(N, T, 3, H, W)`` in [0, 1]; output ``hr`` float32 ``(N, 3, 4H, 4W)``.
N is dynamic; H and W are fixed at export (a shape bucket); the backends pad frames to the bucket.  Values the
exporter computes from the input's shape are folded into constants (:mod:`vsr.export.fold`): no ``Shape`` node,
so no segment of a split plan takes an int64 shape tensor.
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from pathlib import Path

import torch

from vsr import interrupt
from vsr.errors import InputError
from vsr.files import create_new, torch_cache_dir
from vsr.leftovers import MKDTEMP, PARTIAL, remove_old_partials, remove_partials
from vsr.export.fold import fold_shape_values
from vsr.model.config import ModelConfig

log = logging.getLogger(__name__)

INPUT_NAME = "lr"
OUTPUT_NAME = "hr"
OPSET = 19


def _dcn_translation():
    from onnxscript import opset19 as op

    def deform_conv(x, offset, mask, weight, bias, padding: int, stride: int, dilation: int, offset_group: int):
        return op.DeformConv(x, weight, offset, bias, mask, pads=[padding] * 4, strides=[stride, stride],
                             dilations=[dilation, dilation], offset_group=offset_group, group=1)

    return deform_conv


def state_checksum(model: torch.nn.Module) -> str:
    """sha256 over the state dict (names, shapes, bytes): identifies the weights for cache keys."""
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        t = v.detach().cpu().contiguous().float()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _pixel_shuffle_to_crd(model_proto) -> int:
    """Make sure PixelShuffle became ``DepthToSpace(mode=CRD)``; return how many such nodes exist."""
    n = 0
    for node in model_proto.graph.node:
        if node.op_type == "DepthToSpace":
            modes = [a for a in node.attribute if a.name == "mode"]
            if modes and modes[0].s.decode() != "CRD":
                raise RuntimeError("exporter produced DepthToSpace in DCR mode; PixelShuffle needs CRD")
            n += 1
    return n


def export_onnx(model: torch.nn.Module, config: ModelConfig, path: str | os.PathLike, height: int, width: int,
                batch: int = 1, dynamic_batch: bool = True, opset: int = OPSET, mode: int = 0o666) -> Path:
    """Export ``model`` for LR frames of ``height x width`` (multiples of 4) to ``path``; returns the path.

    The file is written to a temporary name beside ``path`` and renamed when complete (``mode``: its
    permissions, less the umask).
    """
    import onnx

    if height % 4 or width % 4 or height < 4 or width < 4:
        raise InputError(f"export size must be positive multiples of 4, got {height}x{width}")
    if opset < 19:
        raise InputError("DeformConv needs opset >= 19")
    torch_cache_dir()  # before torch.export imports dynamo, which makes it
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval().float()
    x = torch.rand(batch, config.num_frame, 3, height, width)
    dyn = {"x": {0: torch.export.Dim("N", min=1, max=64)}} if dynamic_batch else None
    table = {torch.ops.vsr.deform_conv2d.default: _dcn_translation()}
    # a stop inside the exporter's tracing (Python under torch's C++) aborted the process ("terminate called after
    # throwing an instance of 'python_error'", 1 of 100 stopped runs of the hostile sweep): taken after it
    with warnings.catch_warnings(), interrupt.deferred("the ONNX export"):
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        prog = torch.onnx.export(model, (x,), dynamo=True, opset_version=opset, input_names=[INPUT_NAME],
                                 output_names=[OUTPUT_NAME], dynamic_shapes=dyn, custom_translation_table=table,
                                 optimize=True, verbose=False, report=False)
    proto = fold_shape_values(prog.model_proto)
    n_dcn = sum(1 for nd in proto.graph.node if nd.op_type == "DeformConv")
    n_d2s = _pixel_shuffle_to_crd(proto)
    if n_dcn == 0 or n_d2s != 2:
        raise RuntimeError(f"unexpected export: {n_dcn} DeformConv, {n_d2s} DepthToSpace nodes")
    meta = {"vsr.config": config.name, "vsr.num_frame": str(config.num_frame), "vsr.scale": "4",
            "vsr.height": str(height), "vsr.width": str(width), "vsr.weights_sha256": state_checksum(model)}
    for k, v in meta.items():
        e = proto.metadata_props.add()
        e.key, e.value = k, v
    save_atomic(proto, out, mode)
    log.info("exported %s: %d DeformConv, %d DepthToSpace nodes", out, n_dcn, n_d2s)
    return out


def save_atomic(proto, out: Path, mode: int = 0o666) -> None:
    """Write ``proto`` to ``out`` under a temporary name beside it, renamed when complete; the file gets
    ``mode`` less the umask (the user's usual permissions by default, not mkstemp's 0600)."""
    remove_partials(out, tail="-[0-9a-f]{8}")  # (what runs killed outright left)
    # (and older vsr's: .O.PID.HEX.part, and before them mkstemp's .O.XXXXXXXX.part)
    remove_old_partials(out, ".part", tail=r"\.[0-9a-f]{8}", unnumbered=MKDTEMP)
    tmp = out.with_name(f".{out.name}{PARTIAL}{os.getpid()}-{os.urandom(4).hex()}")
    try:
        # into the file vsr created (O_EXCL|O_NOFOLLOW), not reopened by name: a name swapped for a link meanwhile
        # in a folder others can write would be followed
        with open(create_new(tmp, mode), "wb") as f:
            f.write(proto.SerializeToString())  # (what onnx.save writes of a model under 2 GB, no external data)
        interrupt.check()  # nothing published after a stop, also one whose KeyboardInterrupt a callback dropped
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
