// The Hopper instructions the sm_90a flash kernel is built from, as raw PTX: TMA tensor copies completing on
// mbarriers, the mbarriers themselves, warpgroup MMA (wgmma) with shared-memory descriptors, register
// reallocation between warpgroups (setmaxnreg) and named barriers.
//
// Why raw PTX and not CuTe: the kernel uses one MMA shape (m64n128k16, bf16/f16 in, f32 out), one swizzle (128 B)
// and one TMA box per tensor, so each piece is a few lines here, and a reader sees the instruction stream the
// SASS check looks for (HGMMA, UTMALDG, UTMASTG) without CuTe's layout algebra in between. The descriptor
// encodings follow the PTX ISA (sections "Matrix Descriptor" and "Tensor Map"); the canonical layouts they
// describe are written out next to make_descriptor below.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace attnlab::cuda::sm90::ptx {

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers -----------------------------------------------------------------------------------------------
__device__ __forceinline__ void barrier_init(std::uint32_t bar, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialized barriers visible to the async proxy (TMA) and to the other threads after a __syncthreads.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// One arrival that also tells the barrier how many bytes of TMA writes complete its phase.
__device__ __forceinline__ void arrive_expect_bytes(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` has completed. A fresh barrier counts its (nonexistent) previous
// phase, parity 1, as complete: a producer waiting for free slots starts at parity 1 and passes at once.
__device__ __forceinline__ void wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA -----------------------------------------------------------------------------------------------------
// Loads the box at coordinates (c0 innermost … c3) of `map` into shared memory at `dst`; its bytes count towards
// the transaction of `bar`'s current phase. Rows outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load(std::uint32_t dst, const CUtensorMap* map, std::uint32_t bar, int c0, int c1,
                                         int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Stores the box at `src` to (c0 … c3) of `map`; elements outside the tensor are not written.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, std::uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   reinterpret_cast<std::uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until the committed stores have read their shared memory (it may then be reused or the block may end).
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads of them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// ---- warpgroups ----------------------------------------------------------------------------------------------
template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
// A barrier among `threads` threads (a multiple of 32) on hardware barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting (the threads that bar.sync on it wait for these arrivals too).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ---------------------------------------------------------------------------------------------------
// A shared-memory matrix descriptor for the 128-byte swizzle: start address, leading and stride byte offsets (all
// in 16-byte units), layout type 1 (SWIZZLE_128B) in bits 62–63. The tiles are 1024-byte aligned, so the base
// offset (bits 49–51) is 0. In 16-byte units, the layouts the MMA reads are
//   K-major (rows of a 16-element K slice contiguous):  ((8 rows, m), 2) : ((8, stride), 1), leading unused;
//   MN-major (MN contiguous, as V is for P·V):          ((8, n), (8 rows of K, k)) : ((1, leading), (8, stride)),
// where 8 units = 128 bytes = one swizzled row of 64 bf16/f16 elements.
__device__ __forceinline__ std::uint64_t make_descriptor(std::uint32_t smem, std::uint32_t leading_bytes,
                                                         std::uint32_t stride_bytes) {
  std::uint64_t d = 0;
  d |= std::uint64_t((smem >> 4) & 0x3FFF);
  d |= std::uint64_t((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= std::uint64_t((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= std::uint64_t(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma fence or wait: the
// hardware writes them asynchronously, which the compiler cannot see.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for a register A operand: written before the wgmma fence that precedes its MMAs.
template <int kCount>
__device__ __forceinline__ void fence_registers(std::uint32_t (&a)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// The 64 f32 accumulators of a 64 × 128 wgmma tile as inline-asm operands %0 … %63, and their list in the
// instruction; the element type is spliced into the mnemonic, so bf16 and f16 share one instruction text.
#define ATTNLAB_SM90_ACC64_OPERANDS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define ATTNLAB_SM90_ACC64_LIST \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define ATTNLAB_SM90_WGMMA_SS(TYPE)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" ATTNLAB_SM90_ACC64_LIST \
               "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                     \
               : ATTNLAB_SM90_ACC64_OPERANDS                                                          \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define ATTNLAB_SM90_WGMMA_RS(TYPE)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" ATTNLAB_SM90_ACC64_LIST \
               "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                      \
               : ATTNLAB_SM90_ACC64_OPERANDS                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))

// D (64 × 128, f32) (+)= A (64 × 16, shared memory, K-major) · B (16 × 128, shared memory, K-major): Q·Kᵀ.
template <class Element>
__device__ __forceinline__ void mma_ss(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b, int accumulate) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>)
    ATTNLAB_SM90_WGMMA_SS("bf16");
  else
    ATTNLAB_SM90_WGMMA_SS("f16");
}

// D (64 × 128, f32) (+)= A (64 × 16, registers) · B (16 × 128, shared memory, MN-major): P·V.
template <class Element>
__device__ __forceinline__ void mma_rs(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                       int accumulate) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>)
    ATTNLAB_SM90_WGMMA_RS("bf16");
  else
    ATTNLAB_SM90_WGMMA_RS("f16");
}
#undef ATTNLAB_SM90_WGMMA_SS
#undef ATTNLAB_SM90_WGMMA_RS
#undef ATTNLAB_SM90_ACC64_LIST
#undef ATTNLAB_SM90_ACC64_OPERANDS

// 2^x as one MUFU.EX2 (ex2.approx.ftz: 2 ulp, −inf → +0, results below 2^−126 flushed to 0). exp2f would add the
// denormal range's fix-up (a compare, a select and two multiplies per call) that probabilities do not need.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two f32 values as one register of two 16-bit elements (the first in the low half).
template <class Element>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
}

}  // namespace attnlab::cuda::sm90::ptx
