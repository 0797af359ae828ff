"""The deformable convolution as one kernel (Triton): sampling and matrix product fused, channels-last.

The two-kernel form (:mod:`vsr.backends.cuda.dcn`) writes every output pixel's ``kh*kw*C`` sampled values to a
column buffer and reads them back in a GEMM: for EDVR-M's L1 alignment at 540x960 (5 frames) 3 GB of columns a
call, written and read once each through L2.  Here a program takes ``BLOCK_P`` output pixels and every output
channel; per tap it samples the ``(BLOCK_P, C)`` masked bilinear values into registers -- the mask's logits
through the sigmoid, the four corners' channels contiguous in NHWC -- and multiplies them by the tap's
``(C, Co)`` weights on the tensor cores (``tl.dot``, fp32 accumulation); the bias and an optional LeakyReLU end
it.  Nothing but the output goes back to memory.

Layout and numbers are those of ``dcn_im2col_nhwc`` + the GEMM (deform_conv.cu): x ``(N, H, W, C)``; the
offsets of pixel ``q``, group ``g``, tap ``k`` at ``record[q, 2*(g*kk + k)]`` (dy) and ``+ 1`` (dx), the mask at
``mask[q, g*kk + k]`` (None: the record's values after the offsets); a sample outside ``(-1, size)`` is 0; each
sample is rounded to the storage dtype before the product, as a column value is.  fp32 products follow torch's
``allow_tf32`` for matmuls (TF32 where it is on, IEEE otherwise), as the two-kernel form's ``addmm`` does.

Channels and groups need not be powers of two (EDVR-S-wide: 40 channels, 8 groups of 5): the kernel works on
``G'`` groups of ``c'`` channels (each rounded up to a power of two) and the weights are laid out once for it
(:func:`fused_weight`: ``(kh*kw, G'*c', Co')``, zeros in the padding), so no load of a weight is masked.

On a GPU the kernel is Triton's compiled one, its tile chosen by Triton's autotuner per shape (on the first
call: a run's warm-up, before any CUDA graph is captured); on CPU tensors (the CPU emulation of CI) Triton's
interpreter runs the same kernel code with numpy.  Triton is imported on first use only.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
import time

import torch

from vsr.kernels.deform_conv import DeformConvGeometry

# (BLOCK_P, num_warps, num_stages) the autotuner tries on a GPU.  Compiled here for sm_90 (Triton 3.6, wgmma;
# EDVR-M's 64 channels in fp16) with no spill to the stack: 64/8/3, 64/8/2, 32/4/2; 64/4/2 spills 48 bytes and
# 128/8/2 48.  Left out: 128 pixels on 4 warps (3,000 bytes), 256 on 8 (2,984), 128 on 16 (128 registers: 992).
GPU_TILES = ((64, 8, 3), (64, 8, 2), (32, 4, 2), (64, 4, 2), (128, 8, 2))
CPU_TILE = (64, 1, 1)  # the interpreter's cost is per program and op: few large programs
# The kernel's integer arguments, which Triton would otherwise specialise on (a value of 1, or a multiple of 16,
# each another compilation of every tile): a run's shapes differ in them from level to level and bucket to
# bucket (540 rows: not a multiple of 16; 544: one; its quarter, 136: not), and nothing in the kernel gains from
# knowing them -- its addresses are multiples of the constexpr channel counts. Compiled once per dtype and
# channel layout instead (a tile's compilation: 7-11 s on this project's 2-core CI machine).
INT_ARGS = ("total", "H", "W", "HO", "WO", "rec_stride", "mask_stride", "mask_base", "pad_h", "pad_w", "stride_h",
            "stride_w", "dil_h", "dil_w")
log = logging.getLogger(__name__)
# Seconds spent compiling the tiles side by side, per kernel variant (dtype, constexprs): gpu_check reports it.
compile_seconds: dict[str, float] = {}
_labels: dict[tuple, str] = {}  # a variant's cheap key (every eager call looks one up) -> its label there


def available() -> str | None:
    """None where Triton is installed, else why not (one line); not imported here (first use only)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return "dcn_gemm 'fused' needs Triton (pip install triton; CUDA builds of torch bring it)"
    return None


def cache_in(folder: str) -> None:
    """Triton's compiled kernels go to ``folder`` (vsr's kernel cache of the device), not ``~/.triton``, unless
    the user set ``TRITON_CACHE_DIR``."""
    import os

    if available() is None and "TRITON_CACHE_DIR" not in os.environ:
        import triton

        triton.knobs.cache.dir = folder


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def padded_sizes(geom: DeformConvGeometry) -> tuple[int, int, int]:
    """(groups, channels per group, output channels) as the kernel works on them: powers of two, at least 16
    for the product's dimensions (``tl.dot``'s smallest)."""
    g = geom.offset_group
    cpg = geom.c // g
    gp, cp = _pow2(g), _pow2(cpg)
    while gp * cp < 16:
        cp *= 2
    return gp, cp, max(_pow2(geom.co), 16)


def fused_weight(weight: torch.Tensor, geom: DeformConvGeometry) -> torch.Tensor:
    """The module's weight ``(Co, C, kh, kw)`` as the kernel reads it: ``(kh*kw, G'*c', Co')``, row ``g*c' + j``
    of tap ``k`` holding input channel ``g*(C/G) + j``'s weights, zeros in the padding."""
    if geom.group != 1:
        raise ValueError("the fused DCN takes ungrouped convolutions (group 1)")
    gp, cp, cop = padded_sizes(geom)
    g, cpg, kk = geom.offset_group, geom.c // geom.offset_group, geom.taps
    w = weight.detach().reshape(geom.co, g, cpg, kk).permute(3, 1, 2, 0)  # (kk, G, C/G, Co)
    out = torch.zeros((kk, gp, cp, cop), dtype=weight.dtype, device=weight.device)
    out[:, :g, :cpg, :geom.co] = w
    return out.reshape(kk, gp * cp, cop).contiguous()


def deform_conv_fused(geom: DeformConvGeometry, x: torch.Tensor, weight: torch.Tensor, record: torch.Tensor,
                      mask: torch.Tensor | None, bias: torch.Tensor, *, out: torch.Tensor | None = None,
                      negative_slope: float | None = None, mask_logits: bool = False,
                      tile: tuple[int, int, int] | None = None) -> torch.Tensor:
    """``DeformConv`` channels-last in one kernel: x ``(N, H, W, C)`` -> ``(N, Ho, Wo, Co)``.

    ``weight``: :func:`fused_weight`'s layout; ``record`` ``(N, Ho, Wo, S)`` with the offsets first (and, mask
    None, the mask's values after them); ``mask`` ``(N, Ho, Wo, S')`` or None; ``bias`` ``(Co,)``; all one dtype
    (float16 or float32) on one device.  ``mask_logits``: the mask holds logits (the sigmoid is applied here).
    ``tile``: (BLOCK_P, num_warps, num_stages), None: the autotuner's choice on a GPU, :data:`CPU_TILE` on the
    CPU."""
    g = geom
    gp, cp, cop = padded_sizes(g)
    n_offsets, n_mask = 2 * g.offset_group * g.taps, g.offset_group * g.taps
    checks = [("x", tuple(x.shape) == (g.n, g.h, g.w, g.c)),
              ("weight", tuple(weight.shape) == (g.taps, gp * cp, cop)),
              ("record", tuple(record.shape[:3]) == (g.n, g.ho, g.wo)
               and record.shape[3] >= n_offsets + (n_mask if mask is None else 0)),
              ("bias", tuple(bias.shape) == (g.co,))]
    if mask is not None:
        checks.append(("mask", tuple(mask.shape[:3]) == (g.n, g.ho, g.wo) and mask.shape[3] >= n_mask))
    for label, ok in checks:
        if not ok:
            raise ValueError(f"fused DeformConv: {label} does not fit {g} (channels-last, fused weights)")
    tensors = [x, weight, record, bias] + ([mask] if mask is not None else [])
    if len({t.dtype for t in tensors}) != 1 or x.dtype not in (torch.float16, torch.float32):
        raise ValueError(f"fused DeformConv takes float16 or float32 tensors of one dtype, got "
                         f"{sorted({str(t.dtype) for t in tensors})}")
    if not all(t.is_contiguous() and t.device == x.device for t in tensors):
        raise ValueError(f"fused DeformConv: tensors must be contiguous on {x.device}")
    from vsr.kernels.cuda.ops import check_int32

    total = g.n * g.ho * g.wo
    check_int32("fused DeformConv", batch_pixels=total, image_elements=g.h * g.w * g.c,
                record_elements=total * int(record.shape[3]))
    if out is None:
        out = torch.empty((g.n, g.ho, g.wo, g.co), dtype=x.dtype, device=x.device)
    elif (tuple(out.shape) != (g.n, g.ho, g.wo, g.co) or out.dtype != x.dtype or out.device != x.device
          or not out.is_contiguous()):
        raise ValueError(f"fused DeformConv: out must be contiguous {(g.n, g.ho, g.wo, g.co)} {x.dtype} on "
                         f"{x.device}")
    if mask is None:
        mask_t, mask_stride, mask_base = record, int(record.shape[3]), n_offsets
    else:
        mask_t, mask_stride, mask_base = mask, int(mask.shape[3]), 0
    gpu = x.device.type == "cuda"
    ieee = x.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32
    args = (x, record, mask_t, weight, bias, out, total, g.h, g.w, g.ho, g.wo, int(record.shape[3]), mask_stride,
            mask_base, g.pad_top, g.pad_left, g.stride_h, g.stride_w, g.dilation_h, g.dilation_w,
            1.0 if negative_slope is None else float(negative_slope))
    consts = dict(C=g.c, CO=g.co, G=g.offset_group, CPG=g.c // g.offset_group, G_P=gp, CPG_P=cp, CO_P=cop,
                  KH=g.kh, KW=g.kw, MASK_LOGITS=bool(mask_logits), LEAKY=negative_slope is not None, IEEE=ieee)
    if gpu and tile is None:
        with torch.cuda.device(x.device):
            _compile_tiles(args, consts)
            _tuned()[lambda meta: (-(-total // meta["BLOCK_P"]),)](*args, **consts)
        return out
    block_p, warps, stages = tile or CPU_TILE
    kernel = _compiled() if gpu else _interpreted()
    grid = (-(-total // block_p),)
    if gpu:
        with torch.cuda.device(x.device):
            kernel[grid](*args, **consts, BLOCK_P=block_p, num_warps=warps, num_stages=stages)
    else:
        kernel[grid](*args, **consts, BLOCK_P=block_p)
    return out


@functools.cache
def _compiled():
    import triton

    from vsr.kernels.cuda.fused_dcn_kernel import dcn_fused_nhwc

    return triton.jit(dcn_fused_nhwc, do_not_specialize=INT_ARGS)


def _compile_tiles(args: tuple, consts: dict) -> None:
    """Every tile of :data:`GPU_TILES` compiled for this call's variant at once, in threads (Triton's compiler
    releases the GIL in its passes and ptxas is a process of its own), before the autotuner times them: it would
    compile them one by one. Once per variant and process; where this fails (Triton's ``AsyncCompileMode`` is
    recent), the autotuner compiles them as it would have."""
    key = (args[0].dtype, args[0].device, *consts.values())  # consts: always built in one order
    variant = _labels.get(key)
    if variant is None:
        variant = _labels[key] = (f"{args[0].dtype} {args[0].device} "
                                  + " ".join(f"{k}={v}" for k, v in sorted(consts.items())))
    if variant in compile_seconds:
        return
    t0 = time.perf_counter()
    try:
        # in a context of its own: Triton marks the mode active in a context variable and, where a tile's
        # compilation raises, leaves it so -- every later side-by-side compilation in the thread would be refused
        contextvars.copy_context().run(_compile_side_by_side, args, consts)
    except Exception as e:  # noqa: BLE001 - the autotuner compiles what is missing
        log.info("fused DCN: the tiles were not compiled side by side (%s: %s)", type(e).__name__, str(e)[:200])
    compile_seconds[variant] = time.perf_counter() - t0


def _compile_side_by_side(args: tuple, consts: dict) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from triton import AsyncCompileMode

    with _one_parse_at_a_time(), ThreadPoolExecutor(len(GPU_TILES)) as pool, AsyncCompileMode(pool):
        _tuned().warmup(*args, grid=(1,), **consts)


@contextlib.contextmanager
def _one_parse_at_a_time():
    """``ast.parse`` held to one thread at a time while the tiles compile side by side: CPython (3.11, 3.12)
    keeps the AST constructor's recursion depth per interpreter, not per thread, and two threads parsing at once
    can fail (``SystemError: AST constructor recursion depth mismatch``, CPython gh-106905); Triton parses the
    kernel's source in each tile's thread.  The compilation proper (MLIR, ptxas) stays side by side."""
    import ast

    parse, lock = ast.parse, threading.Lock()

    def one_at_a_time(*args, **kwargs):
        with lock:
            return parse(*args, **kwargs)

    ast.parse = one_at_a_time
    try:
        yield
    finally:
        ast.parse = parse


@functools.cache
def _interpreted():
    from triton.runtime.interpreter import InterpretedFunction

    from vsr.kernels.cuda.fused_dcn_kernel import dcn_fused_nhwc

    return InterpretedFunction(dcn_fused_nhwc)


@functools.cache
def _tuned():
    import triton

    configs = [triton.Config({"BLOCK_P": p}, num_warps=w, num_stages=s) for p, w, s in GPU_TILES]
    return triton.autotune(configs, key=["C", "CO", "G", "KH", "KW", "IEEE", "total"],
                           do_bench=_bench)(_compiled())


def cuda_ms(fn, repeats: int = 5) -> float:
    """GPU ms per call of ``fn`` on the current stream: CUDA events around ``repeats`` calls after an untimed one
    (its compilation, its autotuning)."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def _bench(kernel_call, quantiles=None) -> list[float]:
    """The autotuner's timing of one tile (:func:`cuda_ms`).  Triton's own ``do_bench`` allocates a 256 MB
    buffer to flush L2 between calls -- device memory the run's memory plan does not count, in the middle of its
    warm-up."""
    ms = cuda_ms(kernel_call)
    return [ms, ms, ms]
