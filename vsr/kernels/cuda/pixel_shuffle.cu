// PixelShuffle (ONNX DepthToSpace, mode CRD) with the LeakyReLU that follows it fused in; NCHW and NHWC.
//
// NCHW: x (N, C*r*r, H, W) -> out (N, C, H*r, W*r),
//   out[n, c, y*r + i, x*r + j] = leaky(x[n, c*r*r + i*r + j, y, x], slope)   (slope 1.0: no activation).
// NHWC (channels-last): x (N, H, W, C*r*r) -> out (N, H*r, W*r, C), the same values; or, with subpixel_major,
//   x's channels ordered (i*r + j)*C + c (the conv before it has its output channels so ordered, once, at load):
//   then output pixels x*r + j, j < r, of row y*r + i are the r*C contiguous values at x's pixel (y, x) from
//   channel i*r*C on -- every thread's read and write runs along contiguous memory.
// One thread per output element of one output row: grid (ceil(row / blockDim.x), H*r, images), row = W*r (NCHW,
// images = N*C) or W*r*C (NHWC, images = N); 32-bit indices inside an image (ops.py checks they fit), each row's
// base widened to 64 bits by a multiply: no 64-bit division or modulo.
#include "vsr_cuda.h"

template <typename T, bool NHWC>
__device__ __forceinline__ void pixel_shuffle_lrelu(const T* __restrict__ x, T* __restrict__ out, int n, int c,
                                                    int h, int w, int r, int subpixel_major, float slope) {
    const int row = NHWC ? w * r * c : w * r;
    const unsigned e_ = blockIdx.x * blockDim.x + threadIdx.x;
    if (e_ >= (unsigned)row || blockIdx.y >= (unsigned)(h * r) || blockIdx.z >= (unsigned)(NHWC ? n : n * c)) return;
    const int e = (int)e_, oy = (int)blockIdx.y, img = (int)blockIdx.z;  // img: n (NHWC) or n*C + channel (NCHW)
    const int y = oy / r, i = oy - y * r;
    long long src;
    if (NHWC) {
        const long long pixels = ((long long)img * h + y) * w * (c * r * r);  // x's pixel (n, y, 0)
        if (subpixel_major) {
            const int xx = e / (r * c), rest = e - xx * (r * c);
            src = pixels + xx * (r * r * c) + i * (r * c) + rest;
        } else {
            const int ox = e / c, ch = e - ox * c, xx = ox / r, j = ox - xx * r;
            src = pixels + xx * (r * r * c) + ch * r * r + i * r + j;
        }
    } else {
        const int xx = e / r, j = e - xx * r;
        src = (((long long)img * r * r + i * r + j) * h + y) * w + xx;
    }
    vsr_store(out, ((long long)img * h * r + oy) * row + e, vsr_leaky(vsr_load(x, src), slope));
}

extern "C" __global__ void pixel_shuffle_lrelu_f32(const float* x, float* out, int n, int c, int h, int w, int r,
                                                   float slope) {
    pixel_shuffle_lrelu<float, false>(x, out, n, c, h, w, r, 0, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_f16(const __half* x, __half* out, int n, int c, int h, int w, int r,
                                                   float slope) {
    pixel_shuffle_lrelu<__half, false>(x, out, n, c, h, w, r, 0, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_nhwc_f32(const float* x, float* out, int n, int c, int h, int w, int r,
                                                        int subpixel_major, float slope) {
    pixel_shuffle_lrelu<float, true>(x, out, n, c, h, w, r, subpixel_major, slope);
}

extern "C" __global__ void pixel_shuffle_lrelu_nhwc_f16(const __half* x, __half* out, int n, int c, int h, int w,
                                                        int r, int subpixel_major, float slope) {
    pixel_shuffle_lrelu<__half, true>(x, out, n, c, h, w, r, subpixel_major, slope);
}
