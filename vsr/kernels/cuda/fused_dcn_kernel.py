"""The Triton kernel of :mod:`vsr.kernels.cuda.fused_dcn` (see there), undecorated: that module makes it
Triton's compiled kernel on a GPU or its interpreter's on the CPU.  Imported on first use only (it imports
Triton).  It calls Triton's builtins only, none of its library's own jit functions (``tl.zeros``,
``tl.sigmoid``): those are compiled or interpreted as ``TRITON_INTERPRET`` said when Triton was imported, and
the interpreter runs this kernel in any process."""

import triton.language as tl


def dcn_fused_nhwc(x_ptr, rec_ptr, mask_ptr, w_ptr, b_ptr, out_ptr, total, H, W, HO, WO, rec_stride,
                   mask_stride, mask_base, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, slope,
                   C: tl.constexpr, CO: tl.constexpr, G: tl.constexpr, CPG: tl.constexpr, G_P: tl.constexpr,
                   CPG_P: tl.constexpr, CO_P: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                   MASK_LOGITS: tl.constexpr, LEAKY: tl.constexpr, IEEE: tl.constexpr,
                   BLOCK_P: tl.constexpr):
    KK: tl.constexpr = KH * KW
    CP: tl.constexpr = G_P * CPG_P
    q = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    q_ok = q < total
    npix = HO * WO
    n = q // npix
    p = q - n * npix
    oy = p // WO
    ox = p - oy * WO
    gi = tl.arange(0, G_P)
    cc = tl.arange(0, CPG_P)
    g_ok = gi < G
    chan = gi[:, None] * CPG + cc[None, :]  # (G', c'): the input channel of each padded slot
    chan_ok = g_ok[:, None] & (cc < CPG)[None, :]
    pg_ok = q_ok[:, None] & g_ok[None, :]  # (P, G')
    x_img = n.to(tl.int64) * H * W * C  # (P,)
    rec_row = q.to(tl.int64) * rec_stride
    mask_row = q.to(tl.int64) * mask_stride + mask_base
    co = tl.arange(0, CO_P)
    r = tl.arange(0, CP)
    acc = tl.full((BLOCK_P, CO_P), 0.0, tl.float32)
    for k in tl.static_range(KK):
        dy = tl.load(rec_ptr + rec_row[:, None] + (gi * (2 * KK) + 2 * k)[None, :], mask=pg_ok, other=0.0)
        dx = tl.load(rec_ptr + rec_row[:, None] + (gi * (2 * KK) + 2 * k + 1)[None, :], mask=pg_ok, other=0.0)
        m = tl.load(mask_ptr + mask_row[:, None] + (gi * KK + k)[None, :], mask=pg_ok, other=0.0)
        m = m.to(tl.float32)
        if MASK_LOGITS:
            m = 1.0 / (1.0 + tl.exp(-m))
        py = (oy * stride_h - pad_h + (k // KW) * dil_h).to(tl.float32)[:, None] + dy.to(tl.float32)
        px = (ox * stride_w - pad_w + (k % KW) * dil_w).to(tl.float32)[:, None] + dx.to(tl.float32)
        inside = pg_ok & (py > -1.0) & (px > -1.0) & (py < H) & (px < W)
        py = tl.where(inside, py, 0.0)  # keeps the float -> int conversion in range
        px = tl.where(inside, px, 0.0)
        fy = tl.floor(py)
        fx = tl.floor(px)
        y0 = fy.to(tl.int32)
        x0 = fx.to(tl.int32)
        ly = py - fy
        lx = px - fx
        hy = 1.0 - ly
        hx = 1.0 - lx
        top = inside & (y0 >= 0)
        bottom = inside & (y0 + 1 < H)
        left = x0 >= 0
        right = x0 + 1 < W
        base = (x_img[:, None] + (y0 * W + x0) * C)[:, :, None] + chan[None, :, :]  # (P, G', c')
        ok3 = chan_ok[None, :, :]
        v00 = tl.load(x_ptr + base, mask=(top & left)[:, :, None] & ok3, other=0.0).to(tl.float32)
        v01 = tl.load(x_ptr + base + C, mask=(top & right)[:, :, None] & ok3, other=0.0).to(tl.float32)
        v10 = tl.load(x_ptr + base + W * C, mask=(bottom & left)[:, :, None] & ok3, other=0.0).to(tl.float32)
        v11 = tl.load(x_ptr + base + W * C + C, mask=(bottom & right)[:, :, None] & ok3,
                      other=0.0).to(tl.float32)
        v = ((hy * hx)[:, :, None] * v00 + (hy * lx)[:, :, None] * v01 + (ly * hx)[:, :, None] * v10
             + (ly * lx)[:, :, None] * v11)
        a = tl.reshape(m[:, :, None] * v, (BLOCK_P, CP)).to(x_ptr.dtype.element_ty)
        wk = tl.load(w_ptr + (k * CP + r)[:, None] * CO_P + co[None, :])  # (CP, Co'): zeros in the padding
        if IEEE:
            acc += tl.dot(a, wk, input_precision="ieee")
        else:
            acc += tl.dot(a, wk)
    co_ok = co < CO
    acc += tl.load(b_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[None, :]
    if LEAKY:
        acc = tl.where(acc >= 0, acc, acc * slope)
    dst = out_ptr + q.to(tl.int64)[:, None] * CO + co[None, :]
    tl.store(dst, acc.to(out_ptr.dtype.element_ty), mask=q_ok[:, None] & co_ok[None, :])
