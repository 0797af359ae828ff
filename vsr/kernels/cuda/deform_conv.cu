// Modulated deformable convolution (DCNv2: ONNX DeformConv, torchvision deform_conv2d) in two kernels, in NCHW
// (the split plan's arena, the TensorRT path) and in NHWC (the CUDA runtime's channels-last torch segments).
//
//   x (N, C, H, W); weight (Co, C/group, kh, kw); bias (Co,);
//   offset (N, 2*G*kh*kw, Ho, Wo): for offset group g and tap k (row-major over kh x kw) channel 2*(g*kh*kw + k)
//     is the row (y) displacement and the next one the column (x) displacement;
//   mask (N, G*kh*kw, Ho, Wo), already a probability;  out (N, Co, Ho, Wo).
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

template <typename T>
__device__ __forceinline__ void dcn_im2col(const T* __restrict__ x, const T* __restrict__ offset,
                                           const T* __restrict__ mask, T* __restrict__ cols, int c, int h, int w,
                                           int ho, int wo, int kh, int kw, int pad_h, int pad_w, int stride_h,
                                           int stride_w, int dil_h, int dil_w, int offset_group, int q0, int nq) {
    const long long idx = vsr_thread_index();
    if (idx >= (long long)c * nq) return;
    const int ch = (int)(idx / nq), q = (int)(idx % nq);
    const long long npix = (long long)ho * wo;
    const long long qq = (long long)q0 + q;
    const long long n = qq / npix, p = qq % npix;
    const int oy = (int)(p / wo), ox = (int)(p % wo);
    const int kk = kh * kw;
    const int g = ch / (c / offset_group);
    const T* plane = x + (n * c + ch) * h * w;
    const T* off = offset + (n * 2 * offset_group * kk + 2 * g * kk) * npix + p;
    const T* msk = mask + (n * offset_group * kk + g * kk) * npix + p;
    T* col = cols + (long long)ch * kk * nq + q;
    for (int k = 0; k < kk; ++k) {
        const float py = (float)(oy * stride_h - pad_h + (k / kw) * dil_h) + vsr_load(off, 2 * k * npix);
        const float px = (float)(ox * stride_w - pad_w + (k % kw) * dil_w) + vsr_load(off, (2 * k + 1) * npix);
        vsr_store(col, (long long)k * nq, vsr_load(msk, k * npix) * dcn_bilinear(plane, h, w, 1, py, px));
    }
}

template <typename T>
__device__ __forceinline__ void dcn_gemm(const T* __restrict__ cols, const T* __restrict__ weight,
                                         const T* __restrict__ bias, T* __restrict__ out, int co, int group,
                                         int kg, int npix, int q0, int nq, float slope) {
    const int cog = co / group, g = blockIdx.z;
    const int co0 = blockIdx.y * (VSR_GEMM_BY * VSR_GEMM_TM) + threadIdx.y;
    const int q_0 = blockIdx.x * (VSR_GEMM_BX * VSR_GEMM_TN) + threadIdx.x;
    const T* wg = weight + (long long)g * cog * kg;
    const T* cg = cols + (long long)g * kg * nq;
    float acc[VSR_GEMM_TM][VSR_GEMM_TN];
    for (int i = 0; i < VSR_GEMM_TM; ++i)
        for (int j = 0; j < VSR_GEMM_TN; ++j) acc[i][j] = 0.0f;
    for (int k = 0; k < kg; ++k) {
        float a[VSR_GEMM_TM], b[VSR_GEMM_TN];
        for (int i = 0; i < VSR_GEMM_TM; ++i) {
            const int o = co0 + i * VSR_GEMM_BY;
            a[i] = o < cog ? vsr_load(wg, (long long)o * kg + k) : 0.0f;
        }
        for (int j = 0; j < VSR_GEMM_TN; ++j) {
            const int q = q_0 + j * VSR_GEMM_BX;
            b[j] = q < nq ? vsr_load(cg, (long long)k * nq + q) : 0.0f;
        }
        for (int i = 0; i < VSR_GEMM_TM; ++i)
            for (int j = 0; j < VSR_GEMM_TN; ++j) acc[i][j] += a[i] * b[j];
    }
    for (int i = 0; i < VSR_GEMM_TM; ++i) {
        const int o = co0 + i * VSR_GEMM_BY;
        if (o >= cog) continue;
        const int oc = g * cog + o;
        const float bv = vsr_load(bias, oc);
        for (int j = 0; j < VSR_GEMM_TN; ++j) {
            const int q = q_0 + j * VSR_GEMM_BX;
            if (q >= nq) continue;
            const long long qq = (long long)q0 + q;
            const long long n = qq / npix, p = qq % npix;
            vsr_store(out, (n * co + oc) * npix + p, vsr_leaky(acc[i][j] + bv, slope));
        }
    }
}

template <typename T>
__device__ __forceinline__ void dcn_im2col_nhwc(const T* __restrict__ x, const T* __restrict__ offset,
                                                const T* __restrict__ mask, T* __restrict__ cols, int c, int h, int w,
                                                int ho, int wo, int kh, int kw, int pad_h, int pad_w, int stride_h,
                                                int stride_w, int dil_h, int dil_w, int offset_group,
                                                int offset_stride, int mask_stride, int q0, int nq) {
    const long long idx = vsr_thread_index();
    if (idx >= (long long)nq * c) return;
    const int ch = (int)(idx % c), q = (int)(idx / c);
    const long long npix = (long long)ho * wo;
    const long long qq = (long long)q0 + q;
    const long long n = qq / npix, p = qq % npix;
    const int oy = (int)(p / wo), ox = (int)(p % wo);
    const int kk = kh * kw;
    const int g = ch / (c / offset_group);
    const T* plane = x + n * h * w * c + ch;
    const T* off = offset + qq * offset_stride + 2 * g * kk;
    const T* msk = mask + qq * mask_stride + g * kk;
    T* col = cols + (long long)q * kk * c + ch;
    for (int k = 0; k < kk; ++k) {
        const float py = (float)(oy * stride_h - pad_h + (k / kw) * dil_h) + vsr_load(off, 2 * k);
        const float px = (float)(ox * stride_w - pad_w + (k % kw) * dil_w) + vsr_load(off, 2 * k + 1);
        vsr_store(col, (long long)k * c, vsr_load(msk, k) * dcn_bilinear(plane, h, w, c, py, px));
    }
}

template <typename T>
__device__ __forceinline__ void dcn_gemm_nhwc(const T* __restrict__ cols, const T* __restrict__ weight,
                                              const T* __restrict__ bias, T* __restrict__ out, int c, int co,
                                              int group, int taps, int q0, int nq, float slope) {
    const int cog = co / group, cpg = c / group, kg = taps * cpg, g = blockIdx.z;
    const int co0 = blockIdx.y * (VSR_GEMM_BY * VSR_GEMM_TM) + threadIdx.y;
    const int q_0 = blockIdx.x * (VSR_GEMM_BX * VSR_GEMM_TN) + threadIdx.x;
    const T* wg = weight + (long long)g * cog * kg;
    const long long row = (long long)taps * c;  // one pixel's columns
    float acc[VSR_GEMM_TM][VSR_GEMM_TN];
    for (int i = 0; i < VSR_GEMM_TM; ++i)
        for (int j = 0; j < VSR_GEMM_TN; ++j) acc[i][j] = 0.0f;
    for (int k = 0; k < kg; ++k) {
        const long long col = (long long)(k / cpg) * c + g * cpg + k % cpg;  // tap k / cpg, channel of group g
        float a[VSR_GEMM_TM], b[VSR_GEMM_TN];
        for (int i = 0; i < VSR_GEMM_TM; ++i) {
            const int o = co0 + i * VSR_GEMM_BY;
            a[i] = o < cog ? vsr_load(wg, (long long)o * kg + k) : 0.0f;
        }
        for (int j = 0; j < VSR_GEMM_TN; ++j) {
            const int q = q_0 + j * VSR_GEMM_BX;
            b[j] = q < nq ? vsr_load(cols, q * row + col) : 0.0f;
        }
        for (int i = 0; i < VSR_GEMM_TM; ++i)
            for (int j = 0; j < VSR_GEMM_TN; ++j) acc[i][j] += a[i] * b[j];
    }
    for (int i = 0; i < VSR_GEMM_TM; ++i) {
        const int o = co0 + i * VSR_GEMM_BY;
        if (o >= cog) continue;
        const int oc = g * cog + o;
        const float bv = vsr_load(bias, oc);
        for (int j = 0; j < VSR_GEMM_TN; ++j) {
            const int q = q_0 + j * VSR_GEMM_BX;
            if (q < nq) vsr_store(out, ((long long)q0 + q) * co + oc, vsr_leaky(acc[i][j] + bv, slope));
        }
    }
}

#define VSR_DCN_KERNELS(SUFFIX, T)                                                                             \
    extern "C" __global__ void dcn_im2col_##SUFFIX(const T* x, const T* offset, const T* mask, T* cols, int c,  \
                                                   int h, int w, int ho, int wo, int kh, int kw, int pad_h,      \
                                                   int pad_w, int stride_h, int stride_w, int dil_h, int dil_w,  \
                                                   int offset_group, int q0, int nq) {                           \
        dcn_im2col<T>(x, offset, mask, cols, c, h, w, ho, wo, kh, kw, pad_h, pad_w, stride_h, stride_w, dil_h,  \
                      dil_w, offset_group, q0, nq);                                                              \
    }                                                                                                            \
    extern "C" __global__ void dcn_gemm_##SUFFIX(const T* cols, const T* weight, const T* bias, T* out, int co,  \
                                                 int group, int kg, int npix, int q0, int nq, float slope) {     \
        dcn_gemm<T>(cols, weight, bias, out, co, group, kg, npix, q0, nq, slope);                               \
    }                                                                                                            \
    extern "C" __global__ void dcn_im2col_nhwc_##SUFFIX(const T* x, const T* offset, const T* mask, T* cols,     \
                                                        int c, int h, int w, int ho, int wo, int kh, int kw,     \
                                                        int pad_h, int pad_w, int stride_h, int stride_w,        \
                                                        int dil_h, int dil_w, int offset_group,                  \
                                                        int offset_stride, int mask_stride, int q0, int nq) {    \
        dcn_im2col_nhwc<T>(x, offset, mask, cols, c, h, w, ho, wo, kh, kw, pad_h, pad_w, stride_h, stride_w,    \
                           dil_h, dil_w, offset_group, offset_stride, mask_stride, q0, nq);                      \
    }                                                                                                            \
    extern "C" __global__ void dcn_gemm_nhwc_##SUFFIX(const T* cols, const T* weight, const T* bias, T* out,     \
                                                      int c, int co, int group, int taps, int q0, int nq,        \
                                                      float slope) {                                             \
        dcn_gemm_nhwc<T>(cols, weight, bias, out, c, co, group, taps, q0, nq, slope);                           \
    }

VSR_DCN_KERNELS(f32, float)
VSR_DCN_KERNELS(f16, __half)
