"""The compiled pass of :func:`vsr.video.planes.convert_tile`: RGB rows -> a sink's integer planes (numba).

Written so that the compiler vectorises every inner loop: no branch inside one (each flag picks a whole loop),
constant strides, float32 throughout; the arithmetic, and its order, is :class:`vsr.video.planes.PlaneFormat`'s
formula (no fast-math: no reassociation, no fused multiply-add), so the codes are the same wherever it runs.
Plane 0 runs a few rows ahead of the chroma filter, so that each input row comes from memory once, in order, and
the filter finds it in the cache.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _clip(v, lo, hi):  # pragma: no cover - compiled
    return min(max(v, lo), hi)  # NaN stays NaN; with lo, hi = -inf, inf: v itself


BANDS_PER_TASK = 16  # chroma rows per parallel task: its scratch allocated once, tasks enough to share out


@numba.njit(parallel=True, cache=True, nogil=True)
def convert_pass(rgb, y0, y1, x0, x1, p0, p1, p2, m, off, lo, hi, top, sx, sy, ox, wx, oy, wy, limits,
                 counts):  # pragma: no cover - compiled
    """RGB ``(3, H, W)`` rows ``y0:y1``, columns ``x0:x1`` -> planes ``p0, p1, p2`` (the arguments of
    :meth:`~vsr.video.planes.PlaneFormat.arrays`, in its order), ``counts (y1 - y0, 3)`` per row.

    One parallel pass in bands of ``2**sy`` rows (a chroma row), ``BANDS_PER_TASK`` bands a task: plane 0 of each
    row (and 1, 2 when not subsampled), the counts beside it; a subsampled chroma row is the band's RGB filtered
    down its rows (``v``: the columns it reads, split by their phase ``column % 2**sx`` so that the filter along
    the row reads each phase contiguously), then along them (``c``), then through the matrix."""
    full = sx == 0 and sy == 0
    check = limits[0] < np.inf or limits[1] > -np.inf or limits[2] < np.inf
    usual = max(limits[1], -limits[0]), min(limits[2], limits[0])  # a row all inside counts (0, n, n)
    fx, fy = 1 << sx, 1 << sy
    bands = (y1 - y0 + fy - 1) >> sy
    first = max(0, -(ox.min() // fx))  # the samples before a row's first, for taps to its left
    ns = p1.shape[1] + first + max(0, ox.max() // fx)
    ahead = max(oy.max(), fy - 1)  # a band's last row (from its first) that its chroma or its plane 0 reads
    for task in numba.prange((bands + BANDS_PER_TASK - 1) // BANDS_PER_TASK):
        v = np.empty((3, fx, ns), np.float32)  # each first tap assigns: no zeroing pass
        c = np.empty((3, p1.shape[1]), np.float32)
        k0, k1 = task * BANDS_PER_TASK, min((task + 1) * BANDS_PER_TASK, bands)
        done = k0 * fy  # plane 0 runs ahead of the chroma: each row read from memory once, in order
        for k in range(k0, k1):
            end = min(k * fy + ahead + 1, k1 * fy, y1 - y0)
            for i in range(done, end):
                red, grn, blu = rgb[0, y0 + i, x0:x1], rgb[1, y0 + i, x0:x1], rgb[2, y0 + i, x0:x1]
                if full:
                    inside = _full_row(red, grn, blu, p0[i], p1[i], p2[i], m, off, lo, hi, top, *usual)
                else:
                    inside = _luma_row(red, grn, blu, p0[i], m, off, lo, hi, top, *usual)
                if check:
                    _count_rows(red, grn, blu, inside, limits, counts[i])
            done = max(done, end)
            if not full:
                _down_rows(rgb, y0 + k * fy, x0 - fx * first, oy, wy, lo, hi, v)
                _along_row(v, ox, wx, first, c)
                _chroma_row(c, p1[k], p2[k], m, off, top)


@numba.njit(cache=True, nogil=True)
def _luma_row(red, grn, blu, q0, m, off, lo, hi, top, low, high):  # pragma: no cover - compiled
    """Plane 0 of a row; the number of its pixels with R, G and B all in ``[low, high]``."""
    z = np.float32(0)
    inside = 0
    for j in range(red.size):
        vr, vg, vb = np.float32(red[j]), np.float32(grn[j]), np.float32(blu[j])
        inside += (vr >= low) & (vr <= high) & (vg >= low) & (vg <= high) & (vb >= low) & (vb <= high)
        r, g, b = _clip(vr, lo, hi), _clip(vg, lo, hi), _clip(vb, lo, hi)
        q0[j] = _clip(m[0, 0] * r + m[0, 1] * g + m[0, 2] * b + off[0], z, top)
    return inside


@numba.njit(cache=True, nogil=True)
def _full_row(red, grn, blu, q0, q1, q2, m, off, lo, hi, top, low, high):  # pragma: no cover - compiled
    """:func:`_luma_row` with planes 1 and 2 at every pixel: a loop of its own, as LLVM vectorises only a loop
    without branches (a flag for the 4:4:4 stores inside one loop kept it scalar: 23 ms per 4K frame, not 12)."""
    z = np.float32(0)
    inside = 0
    for j in range(red.size):
        vr, vg, vb = np.float32(red[j]), np.float32(grn[j]), np.float32(blu[j])
        inside += (vr >= low) & (vr <= high) & (vg >= low) & (vg <= high) & (vb >= low) & (vb <= high)
        r, g, b = _clip(vr, lo, hi), _clip(vg, lo, hi), _clip(vb, lo, hi)
        q0[j] = _clip(m[0, 0] * r + m[0, 1] * g + m[0, 2] * b + off[0], z, top)
        q1[j] = _clip(m[1, 0] * r + m[1, 1] * g + m[1, 2] * b + off[1], z, top)
        q2[j] = _clip(m[2, 0] * r + m[2, 1] * g + m[2, 2] * b + off[2], z, top)
    return inside


@numba.njit(cache=True, nogil=True)
def _count_rows(red, grn, blu, inside, limits, counts):  # pragma: no cover - compiled
    """``counts += (NaN or beyond +-sane, >= low, <= high)`` over a row's three channels: ``(0, n, n)`` where
    every pixel was inside (:func:`_luma_row`'s number: the usual row, nothing to count), else counted."""
    if inside == red.size:
        counts[1] += 3 * inside
        counts[2] += 3 * inside
        return
    for src in (red, grn, blu):
        sane, low, high = limits[0], limits[1], limits[2]
        bad = at_least = at_most = 0
        for j in range(src.size):
            v = np.float32(src[j])
            bad += (v != v) | (abs(v) > sane)
            at_least += v >= low
            at_most += v <= high
        counts[0] += bad
        counts[1] += at_least
        counts[2] += at_most


@numba.njit(cache=True, nogil=True)
def _down_rows(rgb, row, col, oy, wy, lo, hi, v):  # pragma: no cover - compiled
    """``v[ch, r, s]``: column ``col + fx * s + r`` of channel ``ch`` filtered down the rows ``row + oy`` (taps
    ``wy``, added in their order), rows and columns outside the picture read at its nearest edge."""
    h = rgb.shape[1]
    for ch in range(3):
        for t in range(0, oy.size, 2):
            two = t + 1 < oy.size
            a = rgb[ch, min(max(row + oy[t], 0), h - 1)]
            b = rgb[ch, min(max(row + oy[t + two], 0), h - 1)]
            _tap_columns(a, b, wy[t], wy[t + two], two, t > 0, col, v[ch], lo, hi)


@numba.njit(cache=True, nogil=True)
def _tap_columns(a, b, wa, wb, two, add, col, v, lo, hi):  # pragma: no cover - compiled
    """:func:`_taps` of rows ``a``, ``b`` into ``v[r, s]`` (column ``col + fx * s + r``): the columns inside
    the rows in one vectorised loop (both phases at once for ``fx`` 2), those outside one by one at the edge."""
    fx, ns = v.shape
    w = a.size
    s0, s1 = 0, ns  # the samples whose columns are inside the row, in every phase
    for r in range(fx):
        s0 = max(s0, min(max(-((col + r) // fx), 0), ns))
        s1 = min(s1, min(max((w - 1 - col - r) // fx + 1, 0), ns))
    s1 = max(s0, s1)
    for r in range(fx):
        for e in range(ns - (s1 - s0)):  # the samples outside: before s0, from s1
            s = e if e < s0 else e + s1 - s0
            x = min(max(col + fx * s + r, 0), w - 1)
            _taps(a[x:x + 1], b[x:x + 1], wa, wb, two, add, v[r, s:s + 1], lo, hi)
    start = col + fx * s0
    if fx == 1:
        _taps(a[start:start + s1 - s0], b[start:start + s1 - s0], wa, wb, two, add, v[0, s0:s1], lo, hi)
    elif fx == 2:
        _taps_pairs(a[start:start + 2 * (s1 - s0)], b[start:start + 2 * (s1 - s0)], wa, wb, two, add, v[0, s0:s1],
                    v[1, s0:s1], lo, hi)
    else:
        for r in range(fx):
            end = start + fx * (s1 - s0)
            _taps(a[start + r:end:fx], b[start + r:end:fx], wa, wb, two, add, v[r, s0:s1], lo, hi)


@numba.njit(cache=True, nogil=True)
def _taps(a, b, wa, wb, two, add, d, lo, hi):  # pragma: no cover - compiled
    """``d[s] (+)= wa * clip(a[s]) (+ wb * clip(b[s]))``: one or two taps of a filter, added to ``d`` (``add``)
    in their order, or assigned."""
    if two and add:
        for s in range(d.size):
            d[s] = (d[s] + wa * _clip(np.float32(a[s]), lo, hi)) + wb * _clip(np.float32(b[s]), lo, hi)
    elif two:
        for s in range(d.size):
            d[s] = wa * _clip(np.float32(a[s]), lo, hi) + wb * _clip(np.float32(b[s]), lo, hi)
    elif add:
        for s in range(d.size):
            d[s] = d[s] + wa * _clip(np.float32(a[s]), lo, hi)
    else:
        for s in range(d.size):
            d[s] = wa * _clip(np.float32(a[s]), lo, hi)


@numba.njit(cache=True, nogil=True)
def _taps_pairs(a, b, wa, wb, two, add, d0, d1, lo, hi):  # pragma: no cover - compiled
    """:func:`_taps` into ``d0`` from the even columns and ``d1`` from the odd ones: a constant stride, so the
    compiler loads pairs and splits them (no gather)."""
    if two and add:
        for s in range(d0.size):
            d0[s] = (d0[s] + wa * _clip(np.float32(a[2 * s]), lo, hi)) + wb * _clip(np.float32(b[2 * s]), lo, hi)
            d1[s] = (d1[s] + wa * _clip(np.float32(a[2 * s + 1]), lo, hi)) + wb * _clip(np.float32(b[2 * s + 1]),
                                                                                       lo, hi)
    elif two:
        for s in range(d0.size):
            d0[s] = wa * _clip(np.float32(a[2 * s]), lo, hi) + wb * _clip(np.float32(b[2 * s]), lo, hi)
            d1[s] = wa * _clip(np.float32(a[2 * s + 1]), lo, hi) + wb * _clip(np.float32(b[2 * s + 1]), lo, hi)
    elif add:
        for s in range(d0.size):
            d0[s] = d0[s] + wa * _clip(np.float32(a[2 * s]), lo, hi)
            d1[s] = d1[s] + wa * _clip(np.float32(a[2 * s + 1]), lo, hi)
    else:
        for s in range(d0.size):
            d0[s] = wa * _clip(np.float32(a[2 * s]), lo, hi)
            d1[s] = wa * _clip(np.float32(a[2 * s + 1]), lo, hi)


@numba.njit(cache=True, nogil=True)
def _along_row(v, ox, wx, first, c):  # pragma: no cover - compiled
    """``c[ch, q]``: ``v`` filtered along the row, taps ``wx`` at ``ox`` columns from sample ``q``'s first, added
    in their order; every tap reads one phase of ``v`` contiguously."""
    fx = v.shape[1]
    inf = np.float32(np.inf)
    n = c.shape[1]
    for ch in range(3):
        for t in range(0, ox.size, 2):
            two = t + 1 < ox.size
            ua, ub = ox[t], ox[t + two]
            a = v[ch, ua % fx, ua // fx + first: ua // fx + first + n]
            b = v[ch, ub % fx, ub // fx + first: ub // fx + first + n]
            _taps(a, b, wx[t], wx[t + two], two, t > 0, c[ch], -inf, inf)


@numba.njit(cache=True, nogil=True)
def _chroma_row(c, q1, q2, m, off, top):  # pragma: no cover - compiled
    z = np.float32(0)
    for q in range(q1.size):
        r, g, b = c[0, q], c[1, q], c[2, q]
        q1[q] = _clip(m[1, 0] * r + m[1, 1] * g + m[1, 2] * b + off[1], z, top)
        q2[q] = _clip(m[2, 0] * r + m[2, 1] * g + m[2, 2] * b + off[2], z, top)


__all__ = ["convert_pass"]
