// The Hopper instructions the sm_90a flash kernel is built from, as raw PTX: TMA tensor copies completing on
// mbarriers, the mbarriers themselves, the wgmma fences and shared-memory descriptors, register reallocation
// between warpgroups (setmaxnreg) and named barriers. The MMAs themselves are CuTe's instruction atoms (gmma.cuh).
//
// Why raw PTX and not CuTe's layout algebra: the kernel uses one swizzle (128 B), one TMA box per tensor and the
// canonical layouts written out next to make_descriptor below, so each piece is a few lines here and a reader sees
// the instruction stream the SASS check looks for (HGMMA, UTMALDG, UTMASTG). The descriptor encodings follow the
// PTX ISA (sections "Matrix Descriptor" and "Tensor Map"). The MMA atoms are taken from CuTe because each spells
// out N / 2 accumulator registers, for every N the tiles use: written here they would be copies.
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

// A 32-bit word at a shared address, written and read around the mbarriers that order them (hence "memory").
__device__ __forceinline__ void store_shared(std::uint32_t addr, std::uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ std::uint32_t load_shared(std::uint32_t addr) {
  std::uint32_t value;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(value) : "r"(addr) : "memory");
  return value;
}

// Four 8 × 8 matrices of 16-bit elements from shared memory (ldmatrix .x4): lane l gives the address of row l % 8
// of matrix l / 8 (16 bytes), and receives in r[i] the two elements of matrix i at row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1 — for a 16 × 16 tile read as (rows 0–7, 8–15) × (columns 0–7, 8–15), mma's A fragment.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t addr, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// 16 zero bytes at a 16-byte aligned shared address.
__device__ __forceinline__ void store_zero_16(std::uint32_t addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
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
// Whether `p` holds in every one of the `threads` threads that meet at named barrier `id` (bar.red.and: the
// barrier's wait and a reduction in one).
__device__ __forceinline__ bool named_barrier_all(int id, int threads, bool p) {
  std::uint32_t all;
  asm volatile(
      "{\n .reg .pred in, out;\n setp.ne.u32 in, %1, 0;\n bar.red.and.pred out, %2, %3, in;\n"
      " selp.u32 %0, 1, 0, out;\n}"
      : "=r"(all)
      : "r"(std::uint32_t(p)), "r"(id), "r"(threads)
      : "memory");
  return all != 0;
}
// Arrives at barrier `id` without waiting (the threads that bar.sync on it wait for these arrivals too).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ---------------------------------------------------------------------------------------------------
// A shared-memory matrix descriptor for a swizzled tile of kRowBytes-byte rows: start address, leading and stride
// byte offsets (all in 16-byte units), the layout type in bits 62–63 (1: SWIZZLE_128B, 2: SWIZZLE_64B). The tiles
// are 1024-byte aligned, so the base offset (bits 49–51) is 0. The layouts the MMA reads (PTX ISA, "Matrix
// Descriptor"; a swizzled row is kRowBytes of one row, 8 rows form one swizzle pattern):
//   K-major (a row's K elements contiguous, as Q and K are): a 16-element K step is 32 bytes of each row, 8-row
//     groups `stride` = 8 · kRowBytes apart, leading unused;
//   MN-major (MN contiguous, as V is for P·V): each row of K holds kRowBytes of MN, column slices `leading` bytes
//     apart, 8-row groups of K `stride` = 8 · kRowBytes apart.
template <int kRowBytes>
__device__ __forceinline__ std::uint64_t make_descriptor(std::uint32_t smem, std::uint32_t leading_bytes,
                                                         std::uint32_t stride_bytes) {
  static_assert(kRowBytes == 128 || kRowBytes == 64, "the 128- and 64-byte swizzles");
  constexpr std::uint64_t layout_type = kRowBytes == 128 ? 1 : 2;
  std::uint64_t d = 0;
  d |= std::uint64_t((smem >> 4) & 0x3FFF);
  d |= std::uint64_t((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= std::uint64_t((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= layout_type << 62;
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

// A value the compiler cannot see through: it can neither compute it ahead of this point nor fold it into the
// arithmetic around it. Keeps a cold path's per-thread arithmetic (the epilogue's row copies) where it runs instead
// of hoisted to the kernel's start, where it would hold registers (or local memory) through the main loop (in s11's
// 160-register consumers ptxas spilled such offsets), and a pipeline slot out of loop strength reduction
// (pipeline.cuh, Pipeline::slot).
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// 2^x as one MUFU.EX2 (ex2.approx.ftz: 2 ulp, −inf → +0, results below 2^−126 flushed to 0). exp2f would add the
// denormal range's fix-up (a compare, a select and two multiplies per call) that probabilities do not need.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) = 1 − 2 / (e^(2x) + 1) from one MUFU.EX2 and one MUFU.RCP (ex2.approx and __fdividef: errors of a few
// 2^−23 absolute), against tanhf's polynomial and division (about twenty instructions). tanh.approx.f32 (one
// MUFU.TANH, relative error 2^−11) is cheaper still but was measured too coarse: with softcap 5 its LSE missed
// docs/design.md §2's criterion by 3× (docs/perf-notes-flash-sm90.md). Large |x| saturates to ±1 (e^(2x) = inf or 0).
__device__ __forceinline__ float tanh_fast(float x) {
  const float e = exp2_ftz(x * 2.8853900817779268f);  // e^(2x): 2 · log2(e) · x
  return 1.0f - __fdividef(2.0f, e + 1.0f);
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
