"""Vector helpers of the DCN gather (:mod:`vsr.kernels.deform_conv`): the bilinear blend of 8 channels as one
LLVM vector, stored as float32 columns or as the u8 codes of the int8 kernel (:mod:`vsr.kernels.deform_conv_int8`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload


def _blend(width: int):
    """The :func:`blend8` intrinsic of ``width`` channels (8, or 4: EDVR-S's 32 channels / 8 offset groups)."""

    def typer(typingctx, xf, a00, a01, a10, a11, f00, f01, f10, f11, cf, j, inv, zq):
        sig = types.void(xf, a00, a01, a10, a11, f00, f01, f10, f11, cf, j, inv, zq)
        return sig, _codegen(width, cf.dtype == types.uint8)
    return intrinsic(typer)


def _codegen(width: int, codes: bool):
    def codegen(context, builder, sig, args):
        x_arr, i00, i01, i10, i11, w00, w01, w10, w11, c_arr, dst, v_inv, v_zq = args
        src = context.make_array(sig.args[0])(context, builder, x_arr).data
        out = context.make_array(sig.args[9])(context, builder, c_arr).data
        vec = ir.VectorType(ir.FloatType(), width)
        undef = ir.Constant(vec, ir.Undefined)
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width)

        def load(i):
            return builder.load(builder.bitcast(builder.gep(src, [i]), vec.as_pointer()), align=4)

        def splat(f):
            return builder.shuffle_vector(builder.insert_element(undef, f, ir.Constant(ir.IntType(32), 0)),
                                          undef, zeros)

        def call(name, *vals):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * len(vals)), name)
            return builder.call(fn, vals)

        acc = builder.fmul(load(i00), splat(w00))
        acc = builder.fadd(acc, builder.fmul(load(i01), splat(w01)))
        acc = builder.fadd(acc, builder.fmul(load(i10), splat(w10)))
        acc = builder.fadd(acc, builder.fmul(load(i11), splat(w11)))
        if codes:
            q = call(f"llvm.rint.v{width}f32", builder.fadd(builder.fmul(acc, splat(v_inv)), splat(v_zq)))
            q = call(f"llvm.minnum.v{width}f32", call(f"llvm.maxnum.v{width}f32", q, ir.Constant(vec, [0.0] * width)),
                     ir.Constant(vec, [255.0] * width))
            u8 = ir.VectorType(ir.IntType(8), width)
            builder.store(builder.fptoui(q, u8), builder.bitcast(builder.gep(out, [dst]), u8.as_pointer()), align=1)
        else:
            builder.store(acc, builder.bitcast(builder.gep(out, [dst]), vec.as_pointer()), align=4)
        return context.get_dummy_value()

    return codegen


blend8 = _blend(8)
blend8.__doc__ = """``cf[j:j+8] = f00*xf[a00:a00+8] + f01*xf[a01:a01+8] + f10*xf[a10:a10+8] + f11*xf[a11:a11+8]`` as
8-wide vector loads, multiplies, adds and one store (float32, same operation order as the scalar loop).  A uint8 ``cf``
stores the u8 codes of the blend instead: ``rint(v * inv + zq)`` clamped to [0, 255].

LLVM does not vectorise the scalar loop itself: it cannot prove that the column store does not alias the input
loads, and the 8-channel runs (EDVR: 64 channels / 8 offset groups) are too short for its runtime alias checks.
Measured on one EDVR-M L1 frame: gather 0.134 -> 0.11 CPU-s."""
blend4 = _blend(4)  # the same, 4 channels


def put(cf, i, v, inv, zq):  # pragma: no cover - replaced by its numba overload
    """``cf[i] = v`` (float32 columns), or the u8 code of ``v`` (uint8 columns), as :func:`blend8` stores."""


@overload(put)
def _put_overload(cf, i, v, inv, zq):
    if cf.dtype == types.uint8:
        def put(cf, i, v, inv, zq):
            cf[i] = np.uint8(min(max(np.rint(v * inv + zq), np.float32(0.0)), np.float32(255.0)))
    else:
        def put(cf, i, v, inv, zq):
            cf[i] = v
    return put
