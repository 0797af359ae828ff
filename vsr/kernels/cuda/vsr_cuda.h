// Shared by every vsr kernel source: storage types and their conversions.
//
// Kernels store tensors as float or __half and compute in float.  Under the CPU harness (VSR_CPU_SHIM, see
// cpu_shim.h) __half and its conversions come from the shim instead of cuda_fp16.h.
#ifndef VSR_CUDA_H
#define VSR_CUDA_H

#ifndef VSR_CPU_SHIM
#include <cuda_fp16.h>
#endif

__device__ __forceinline__ float vsr_load(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float vsr_load(const __half* p, long long i) { return __half2float(p[i]); }
__device__ __forceinline__ void vsr_store(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void vsr_store(__half* p, long long i, float v) { p[i] = __float2half_rn(v); }

// LeakyReLU with the CPU kernels' convention: slope 1.0 is no activation, 0.0 is ReLU.
__device__ __forceinline__ float vsr_leaky(float v, float slope) { return v >= 0.0f ? v : v * slope; }

// The logistic function, in float (expf: no fast-math approximation); 0 and 1 at the extremes, never NaN.
__device__ __forceinline__ float vsr_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// Fully unroll the loop that follows (a compile-time trip count); nothing under the CPU harness.
#ifdef VSR_CPU_SHIM
#define VSR_UNROLL
#else
#define VSR_UNROLL _Pragma("unroll")
#endif

#endif  // VSR_CUDA_H
