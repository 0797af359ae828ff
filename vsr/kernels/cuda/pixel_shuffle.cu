// PixelShuffle (ONNX DepthToSpace, mode CRD) with the LeakyReLU that follows it fused in; NCHW and NHWC.
//
// NCHW: x (N, C*r*r, H, W) -> out (N, C, H*r, W*r),
//   out[n, c, y*r + i, x*r + j] = leaky(x[n, c*r*r + i*r + j, y, x], slope)   (slope 1.0: no activation).
// NHWC (channels-last): x (N, H, W, C*r*r) -> out (N, H*r, W*r, C), the same values.
// One thread per output element, so writes are coalesced; 1-D grid of ceil(N*C*H*r*W*r / blockDim.x) blocks.
#include "vsr_cuda.h"

template <typename T, bool NHWC>
__device__ __forceinline__ void pixel_shuffle_lrelu(const T* __restrict__ x, T* __restrict__ out, int n, int c,
                                                    int h, int w, int r, float slope) {
    const long long wr = (long long)w * r, hr = (long long)h * r;
    const long long total = (long long)n * c * hr * wr;
    const long long idx = vsr_thread_index();
    if (idx >= total) return;
    long long t = NHWC ? idx / c : idx;  // NHWC: channel fastest, then x, y, image; NCHW: x, y, image * c + channel
    const long long ch = NHWC ? idx % c : 0;
    const long long ox = t % wr;
    t /= wr;
    const long long oy = t % hr;
    t /= hr;
    const long long sub = (oy % r) * r + ox % r;  // which of the r*r input channels of the output channel
    const long long src = NHWC ? ((t * h + oy / r) * w + ox / r) * c * r * r + ch * r * r + sub
                               : ((t * r * r + sub) * h + oy / r) * w + ox / r;
    vsr_store(out, idx, vsr_leaky(vsr_load(x, src), slope));
}

extern "C" __global__ void pixel_shuffle_lrelu_f32(const float* x, float* out, int n, int c, int h, int w, int r,
                                                   float slope) {
    pixel_shuffle_lrelu<float, false>(x, out, n, c, h, w, r, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_f16(const __half* x, __half* out, int n, int c, int h, int w, int r,
                                                   float slope) {
    pixel_shuffle_lrelu<__half, false>(x, out, n, c, h, w, r, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_nhwc_f32(const float* x, float* out, int n, int c, int h, int w, int r,
                                                        float slope) {
    pixel_shuffle_lrelu<float, true>(x, out, n, c, h, w, r, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_nhwc_f16(const __half* x, __half* out, int n, int c, int h, int w,
                                                        int r, float slope) {
    pixel_shuffle_lrelu<__half, true>(x, out, n, c, h, w, r, slope);
}
