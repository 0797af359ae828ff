// Lets the host C++ compiler build vsr's .cu sources unchanged, for the CPU harness (tests, CI without a GPU).
//
// __global__ functions become ordinary functions; vsr_launch() calls one for every thread of every block in
// turn, setting blockIdx/threadIdx first.  Threads therefore run sequentially: __syncthreads is a no-op, which
// is only valid for kernels whose threads share no memory (all of vsr's).  __half is a software binary16 whose
// conversion from float rounds to nearest even, as the GPU's __float2half_rn does.
#ifndef VSR_CPU_SHIM_H
#define VSR_CPU_SHIM_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#define VSR_CPU_SHIM 1
#define __global__
#define __device__ inline
#define __host__
#define __forceinline__
#define __restrict__ __restrict

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
// thread_local: two host threads may launch kernels at the same time (ctypes releases the GIL)
static thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

inline void __syncthreads() {}

struct __half {
    uint16_t bits;
};

inline float __half2float(__half h) {
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    const uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
    uint32_t f;
    if (exp == 0x1f) {
        f = sign | 0x7f800000u | (man << 13);  // inf, nan
    } else if (exp != 0) {
        f = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        f = sign;
    } else {  // subnormal half: exactly representable as a normal float
        float v = std::ldexp((float)man, -24);
        std::memcpy(&f, &v, 4);
        f |= sign;
    }
    float out;
    std::memcpy(&out, &f, 4);
    return out;
}

inline __half __float2half_rn(float v) {
    uint32_t f;
    std::memcpy(&f, &v, 4);
    const uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    const uint32_t exp = (f >> 23) & 0xffu, man = f & 0x7fffffu;
    if (exp == 0xff) return {(uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u))};  // inf, quiet nan
    const int e = (int)exp - 127 + 15;  // rebiased exponent
    if (e >= 0x1f) return {(uint16_t)(sign | 0x7c00u)};  // overflow -> inf
    uint32_t mant;  // 24-bit significand (implicit bit included) ...
    int shift;      // ... and the right shift that brings it to the 10-bit half mantissa (or subnormal)
    if (e <= 0) {
        if (e < -10) return {sign};  // below half the smallest subnormal: rounds to zero
        mant = man | 0x800000u;
        shift = 14 - e;
    } else {
        mant = man | 0x800000u;
        shift = 13;
    }
    uint32_t q = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // nearest, ties to even
    // Normal: drop the implicit bit and add the exponent; a carry out of the mantissa bumps the exponent,
    // which is the correct result (up to inf).  Subnormal: q already is the bit pattern.
    const uint32_t bits = e > 0 ? (((uint32_t)e << 10) + (q - 0x400u)) : q;
    return {(uint16_t)(sign | bits)};
}
inline __half __float2half(float v) { return __float2half_rn(v); }

// Runs kernel(args...) once per thread of a grid x block launch, in order.
template <class... A>
void vsr_launch(void (*kernel)(A...), const unsigned* grid, const unsigned* block, A... args) {
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    for (unsigned bz = 0; bz < grid[2]; ++bz)
        for (unsigned by = 0; by < grid[1]; ++by)
            for (unsigned bx = 0; bx < grid[0]; ++bx) {
                blockIdx = {bx, by, bz};
                for (unsigned tz = 0; tz < block[2]; ++tz)
                    for (unsigned ty = 0; ty < block[1]; ++ty)
                        for (unsigned tx = 0; tx < block[0]; ++tx) {
                            threadIdx = {tx, ty, tz};
                            kernel(args...);
                        }
            }
}

// The entry point the harness exports per kernel: arguments as cuLaunchKernel takes them, an array of pointers
// to each argument's value.
template <class... A, std::size_t... I>
void vsr_launch_packed(void (*kernel)(A...), const unsigned* grid, const unsigned* block, void** args,
                       std::index_sequence<I...>) {
    vsr_launch<A...>(kernel, grid, block, *static_cast<A*>(args[I])...);
}
template <class... A>
void vsr_launch_packed(void (*kernel)(A...), const unsigned* grid, const unsigned* block, void** args) {
    vsr_launch_packed(kernel, grid, block, args, std::index_sequence_for<A...>{});
}

#endif  // VSR_CPU_SHIM_H
