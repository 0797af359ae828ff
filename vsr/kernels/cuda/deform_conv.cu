// Modulated deformable convolution (DCNv2: ONNX DeformConv, torchvision deform_conv2d) in two kernels, in NCHW
// (the split plan's arena, the TensorRT path) and in NHWC (the CUDA runtime's channels-last torch segments).
//
//   x (N, C, H, W); weight (Co, C/group, kh, kw); bias (Co,);
//   offset (N, 2*G*kh*kw, Ho, Wo): for offset group g and tap k (row-major over kh x kw) channel 2*(g*kh*kw + k)
//     is the row (y) displacement and the next one the column (x) displacement;
//   mask (N, G*kh*kw, Ho, Wo), a probability, or (mask_logits != 0) its logit, the sigmoid applied here, so that
//   no pass of its own reads and writes it;  out (N, Co, Ho, Wo).
//
// Output pixels are numbered q = n*Ho*Wo + p across the batch; one launch pair covers the chunk q0 <= q < q0+nq
// so that the column buffer (C*kh*kw, nq) stays bounded.
//   1. dcn_im2col_*: cols[c*kh*kw + k, q - q0] = mask * bilinear(x[n, c], sample point of tap k at pixel p),
//      where a bilinear corner outside the frame contributes zero.  One thread per (c, q): 1-D grid over C*nq.
//   2. dcn_gemm_*: out[n, co, p] = leaky(bias[co] + sum_K weight[co, K] * cols[g*Kg + K, q - q0], slope) for the
//      conv group g of co, Kg = C/group*kh*kw.  Block (64, 4) threads, each accumulating 4 output channels x
//      4 pixels in registers (fp32); grid (ceil(nq/256), ceil((Co/group)/16), group).
//
// NHWC forms: x (N, H, W, C); offset: pixel q's 2*G*kh*kw values (the order above) are the first ones of the
// offset_stride values at offset[q * offset_stride] -- an (N, Ho, Wo, offset_stride) tensor, e.g. the whole output
// of DCNv2Pack's conv_offset, whose first 2*G*kh*kw channels are the offsets; mask likewise with mask_stride;
// weight of the GEMM kernel (Co, kh, kw, C/group); out (N, Ho, Wo, Co), i.e. a (N*Ho*Wo, Co) row-major matrix.
//   3. dcn_im2col_nhwc_*: cols[q - q0, k*C + c] = the same masked bilinear sample: (nq, kh*kw*C) row-major, so
//      out = cols . W with W = weight as (kh*kw*C, Co) -- a plain row-major GEMM, no transpose.  One thread per
//      (q, c), c fastest: a warp's bilinear corners and its column writes are contiguous runs of channels.
//      1-D grid over nq*C.
//   4. dcn_gemm_nhwc_*: out[q, co] = leaky(bias[co] + sum_{k,j} weight[co, k, j] * cols[q - q0, k*C + g*C/group + j],
//      slope) for the conv group g of co: the tiling of dcn_gemm (vsr's own GEMM, for grouped convolutions and
//      comparisons).
// No kernel shares memory between threads, so the CPU harness may run a block's threads one after another.
#include "vsr_cuda.h"

#define VSR_GEMM_BX 64
#define VSR_GEMM_BY 4
#define VSR_GEMM_TM 4  // output channels per thread, strided by VSR_GEMM_BY
#define VSR_GEMM_TN 4  // pixels per thread, strided by VSR_GEMM_BX

template <typename T>
__device__ __forceinline__ float dcn_bilinear(const T* __restrict__ plane, int h, int w, long long ps, float py,
                                             float px) {
    // plane: one channel of one image, its pixel (y, x) at plane[(y * w + x) * ps] (ps: 1 in NCHW, C in NHWC).
    // Outside (-1, size) all four corners are out of the frame; this also keeps the float -> int cast in range.
    if (!(py > -1.0f && px > -1.0f && py < (float)h && px < (float)w)) return 0.0f;
    const float fy = floorf(py), fx = floorf(px);
    const int y0 = (int)fy, x0 = (int)fx;
    const float ly = py - fy, lx = px - fx, hy = 1.0f - ly, hx = 1.0f - lx;
    float v = 0.0f;
    if (y0 >= 0 && x0 >= 0) v += hy * hx * vsr_load(plane, ((long long)y0 * w + x0) * ps);
    if (y0 >= 0 && x0 + 1 < w) v += hy * lx * vsr_load(plane, ((long long)y0 * w + x0 + 1) * ps);
    if (y0 + 1 < h && x0 >= 0) v += ly * hx * vsr_load(plane, ((long long)(y0 + 1) * w + x0) * ps);
    if (y0 + 1 < h && x0 + 1 < w) v += ly * lx * vsr_load(plane, ((long long)(y0 + 1) * w + x0 + 1) * ps);
    return v;
}

// The sampling of both layouts (offset_stride, mask_stride: NHWC only).  KH, KW: the kernel's size when known at
// compile time (3 x 3: every tap's row and column are constants of the unrolled loop), 0: kh, kw at run time.
// Index arithmetic is 32-bit -- ops.py refuses shapes where a batch's pixel count, one image's tensor or a chunk's
// columns reach 2^31 -- and each thread widens only its per-image (per-pixel) base to 64 bits: a multiply, never
// a division.
template <typename T, bool NHWC, int KH, int KW>
__device__ __forceinline__ void dcn_im2col(const T* __restrict__ x, const T* __restrict__ offset,
                                           const T* __restrict__ mask, T* __restrict__ cols, int c, int h, int w,
                                           int ho, int wo, int kh_, int kw_, int pad_h, int pad_w, int stride_h,
                                           int stride_w, int dil_h, int dil_w, int offset_group, int offset_stride,
                                           int mask_stride, int mask_logits, int q0, int nq) {
    const int kh = KH > 0 ? KH : kh_, kw = KW > 0 ? KW : kw_;
    const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid >= (unsigned)c * (unsigned)nq) return;
    const int idx = (int)tid;
    const int ch = NHWC ? idx % c : idx / nq, q = NHWC ? idx / c : idx % nq;
    const int npix = ho * wo;
    const int qq = q0 + q;
    const int n = qq / npix, p = qq - n * npix;
    const int oy = p / wo, ox = p - oy * wo;
    const int kk = kh * kw;
    const int g = ch / (c / offset_group);
    // x's pixel stride; the step between one pixel's offset (mask) values; between a column's taps
    const int ps = NHWC ? c : 1, vs = NHWC ? 1 : npix, cs = NHWC ? c : nq;
    const T* plane = x + (NHWC ? (long long)n * (h * w * c) + ch : (long long)(n * c + ch) * (h * w));
    const T* off = offset + (NHWC ? (long long)qq * offset_stride : (long long)n * (2 * offset_group * kk * npix) + p) +
                   2 * g * kk * vs;
    const T* msk = mask + (NHWC ? (long long)qq * mask_stride : (long long)n * (offset_group * kk * npix) + p) +
                   g * kk * vs;
    T* col = cols + (NHWC ? q * kk * c + ch : ch * kk * nq + q);
    const int y0 = oy * stride_h - pad_h, x0 = ox * stride_w - pad_w;
    VSR_UNROLL
    for (int i = 0; i < kh; ++i) {
        VSR_UNROLL
        for (int j = 0; j < kw; ++j) {
            const int k = i * kw + j;
            const float py = (float)(y0 + i * dil_h) + vsr_load(off, 2 * k * vs);
            const float px = (float)(x0 + j * dil_w) + vsr_load(off, (2 * k + 1) * vs);
            const float m = vsr_load(msk, k * vs);
            vsr_store(col, k * cs, (mask_logits ? vsr_sigmoid(m) : m) * dcn_bilinear(plane, h, w, ps, py, px));
        }
    }
}

// The 3 x 3 kernels of EDVR unrolled, any other size by the general loop.
template <typename T, bool NHWC>
__device__ __forceinline__ void dcn_im2col_any(const T* __restrict__ x, const T* __restrict__ offset,
                                               const T* __restrict__ mask, T* __restrict__ cols, int c, int h,
                                               int w, int ho, int wo, int kh, int kw, int pad_h, int pad_w,
                                               int stride_h, int stride_w, int dil_h, int dil_w, int offset_group,
                                               int offset_stride, int mask_stride, int mask_logits, int q0, int nq) {
    if (kh == 3 && kw == 3)
        dcn_im2col<T, NHWC, 3, 3>(x, offset, mask, cols, c, h, w, ho, wo, kh, kw, pad_h, pad_w, stride_h, stride_w,
                                  dil_h, dil_w, offset_group, offset_stride, mask_stride, mask_logits, q0, nq);
    else
        dcn_im2col<T, NHWC, 0, 0>(x, offset, mask, cols, c, h, w, ho, wo, kh, kw, pad_h, pad_w, stride_h, stride_w,
                                  dil_h, dil_w, offset_group, offset_stride, mask_stride, mask_logits, q0, nq);
}

// The GEMM of both layouts: cols holds the columns of conv group g's K = taps * C/group rows -- NCHW: row
// g*K + k, (K_total, nq) row-major; NHWC: column t*C + g*cpg + j (tap t, channel j of the group) of pixel q's row
// of taps*C.  32-bit indices as dcn_im2col's; the output's per-image base widened.
template <typename T, bool NHWC>
__device__ __forceinline__ void dcn_gemm(const T* __restrict__ cols, const T* __restrict__ weight,
                                         const T* __restrict__ bias, T* __restrict__ out, int c, int co, int group,
                                         int taps, int npix, int q0, int nq, float slope) {
    const int cog = co / group, cpg = c / group, kg = taps * cpg, g = blockIdx.z;
    const int co0 = blockIdx.y * (VSR_GEMM_BY * VSR_GEMM_TM) + threadIdx.y;
    const int q_0 = blockIdx.x * (VSR_GEMM_BX * VSR_GEMM_TN) + threadIdx.x;
    const T* wg = weight + g * cog * kg;
    float acc[VSR_GEMM_TM][VSR_GEMM_TN];
    for (int i = 0; i < VSR_GEMM_TM; ++i)
        for (int j = 0; j < VSR_GEMM_TN; ++j) acc[i][j] = 0.0f;
    for (int t = 0, k = 0; t < taps; ++t) {
        for (int jc = 0; jc < cpg; ++jc, ++k) {
            float a[VSR_GEMM_TM], b[VSR_GEMM_TN];
            for (int i = 0; i < VSR_GEMM_TM; ++i) {
                const int o = co0 + i * VSR_GEMM_BY;
                a[i] = o < cog ? vsr_load(wg, o * kg + k) : 0.0f;
            }
            const int col = NHWC ? t * c + g * cpg + jc : (g * kg + k) * nq;
            for (int j = 0; j < VSR_GEMM_TN; ++j) {
                const int q = q_0 + j * VSR_GEMM_BX;
                b[j] = q < nq ? vsr_load(cols, NHWC ? q * taps * c + col : col + q) : 0.0f;
            }
            for (int i = 0; i < VSR_GEMM_TM; ++i)
                for (int j = 0; j < VSR_GEMM_TN; ++j) acc[i][j] += a[i] * b[j];
        }
    }
    for (int i = 0; i < VSR_GEMM_TM; ++i) {
        const int o = co0 + i * VSR_GEMM_BY;
        if (o >= cog) continue;
        const int oc = g * cog + o;
        const float bv = vsr_load(bias, oc);
        for (int j = 0; j < VSR_GEMM_TN; ++j) {
            const int q = q_0 + j * VSR_GEMM_BX;
            if (q >= nq) continue;
            const int qq = q0 + q;
            long long at;
            if (NHWC) {
                at = (long long)qq * co + oc;
            } else {
                const int n = qq / npix;
                at = (long long)(n * co + oc) * npix + (qq - n * npix);
            }
            vsr_store(out, at, vsr_leaky(acc[i][j] + bv, slope));
        }
    }
}

#define VSR_DCN_KERNELS(SUFFIX, T)                                                                              \
    extern "C" __global__ void dcn_im2col_##SUFFIX(const T* x, const T* offset, const T* mask, T* cols, int c,   \
                                                   int h, int w, int ho, int wo, int kh, int kw, int pad_h,       \
                                                   int pad_w, int stride_h, int stride_w, int dil_h, int dil_w,   \
                                                   int offset_group, int mask_logits, int q0, int nq) {          \
        dcn_im2col_any<T, false>(x, offset, mask, cols, c, h, w, ho, wo, kh, kw, pad_h, pad_w, stride_h,        \
                                 stride_w, dil_h, dil_w, offset_group, 0, 0, mask_logits, q0, nq);               \
    }                                                                                                             \
    extern "C" __global__ void dcn_gemm_##SUFFIX(const T* cols, const T* weight, const T* bias, T* out, int co,   \
                                                 int group, int kg, int npix, int q0, int nq, float slope) {      \
        dcn_gemm<T, false>(cols, weight, bias, out, kg * group, co, group, 1, npix, q0, nq, slope);              \
    }                                                                                                             \
    extern "C" __global__ void dcn_im2col_nhwc_##SUFFIX(const T* x, const T* offset, const T* mask, T* cols,      \
                                                        int c, int h, int w, int ho, int wo, int kh, int kw,      \
                                                        int pad_h, int pad_w, int stride_h, int stride_w,         \
                                                        int dil_h, int dil_w, int offset_group,                   \
                                                        int offset_stride, int mask_stride, int mask_logits,      \
                                                        int q0, int nq) {                                         \
        dcn_im2col_any<T, true>(x, offset, mask, cols, c, h, w, ho, wo, kh, kw, pad_h, pad_w, stride_h,         \
                                stride_w, dil_h, dil_w, offset_group, offset_stride, mask_stride, mask_logits,   \
                                q0, nq);                                                                          \
    }                                                                                                             \
    extern "C" __global__ void dcn_gemm_nhwc_##SUFFIX(const T* cols, const T* weight, const T* bias, T* out,      \
                                                      int c, int co, int group, int taps, int q0, int nq,         \
                                                      float slope) {                                              \
        dcn_gemm<T, true>(cols, weight, bias, out, c, co, group, taps, 0, q0, nq, slope);                        \
    }

VSR_DCN_KERNELS(f32, float)
VSR_DCN_KERNELS(f16, __half)
