// PixelShuffle (ONNX DepthToSpace, mode CRD) with the LeakyReLU that follows it fused in; NCHW and NHWC.
//
// NCHW: x (N, C*r*r, H, W) -> out (N, C, H*r, W*r),
//   out[n, c, y*r + i, x*r + j] = leaky(x[n, c*r*r + i*r + j, y, x], slope)   (slope 1.0: no activation).
// NHWC (channels-last): x (N, H, W, C*r*r) -> out (N, H*r, W*r, C), the same values.
// One thread per output element, so writes are coalesced; 1-D grid of ceil(N*C*H*r*W*r / blockDim.x) blocks.
#include "vsr_cuda.h"

template <typename T>
__device__ __forceinline__ void pixel_shuffle_lrelu(const T* __restrict__ x, T* __restrict__ out, int n, int c,
                                                    int h, int w, int r, float slope) {
    const long long wr = (long long)w * r, hr = (long long)h * r;
    const long long total = (long long)n * c * hr * wr;
    const long long idx = vsr_thread_index();
    if (idx >= total) return;
    const long long ox = idx % wr;
    long long t = idx / wr;
    const long long oy = t % hr;
    t /= hr;  // n * c + channel
    const long long src = ((t * r * r + (oy % r) * r + ox % r) * h + oy / r) * w + ox / r;
    vsr_store(out, idx, vsr_leaky(vsr_load(x, src), slope));
}

template <typename T>
__device__ __forceinline__ void pixel_shuffle_lrelu_nhwc(const T* __restrict__ x, T* __restrict__ out, int n, int c,
                                                         int h, int w, int r, float slope) {
    const long long wr = (long long)w * r, hr = (long long)h * r;
    const long long total = (long long)n * hr * wr * c;
    const long long idx = vsr_thread_index();
    if (idx >= total) return;
    const long long ch = idx % c;
    long long t = idx / c;
    const long long ox = t % wr;
    t /= wr;
    const long long oy = t % hr;
    t /= hr;  // image
    const long long src = ((t * h + oy / r) * w + ox / r) * c * r * r + ch * r * r + (oy % r) * r + ox % r;
    vsr_store(out, idx, vsr_leaky(vsr_load(x, src), slope));
}

extern "C" __global__ void pixel_shuffle_lrelu_f32(const float* x, float* out, int n, int c, int h, int w, int r,
                                                   float slope) {
    pixel_shuffle_lrelu<float>(x, out, n, c, h, w, r, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_f16(const __half* x, __half* out, int n, int c, int h, int w, int r,
                                                   float slope) {
    pixel_shuffle_lrelu<__half>(x, out, n, c, h, w, r, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_nhwc_f32(const float* x, float* out, int n, int c, int h, int w, int r,
                                                        float slope) {
    pixel_shuffle_lrelu_nhwc<float>(x, out, n, c, h, w, r, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_nhwc_f16(const __half* x, __half* out, int n, int c, int h, int w,
                                                        int r, float slope) {
    pixel_shuffle_lrelu_nhwc<__half>(x, out, n, c, h, w, r, slope);
}
