// The handful of sm_80 instructions the flash kernel is built from, each wrapped once so the kernel code reads as
// what it does: asynchronous global→shared copies (cp.async), shared→register fragment loads (ldmatrix), the
// tensor-core multiply-accumulate (mma.sync m16n8k16 for f16/bf16, m16n8k8 TF32 for f32), and the fast
// exponential (ex2.approx).
// Fragment layouts follow the PTX ISA ("Matrix Fragments for mma.m16n8k16"); with g = lane / 4 and t = lane % 4:
//   A (16×16, row-major):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 8+2t..)  a3 = (g+8, 8+2t..)
//   B (16×8,  col-major):  b0 = (k 2t..2t+1, n g)               b1 = (k 8+2t.., n g)
//   C (16×8,  f32):        c0,c1 = (g, 2t..2t+1)                c2,c3 = (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attnlab::cuda::flash::ptx {

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, bypassing L1. `valid == false` writes 16 zero bytes instead (rows past the sequence's
// end must read as zeros: a NaN there times a zero probability would still be NaN).
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same copy for a source known to be in bounds: no source size, so no register holds one.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// mbarriers in shared memory (sm_80): a phase completes when `count` arrivals have happened; waiters name the
// phase by its parity. cp_async_arrive arrives once the calling thread's earlier cp.async copies have landed
// (.noinc: the arrival is one of the `count` the barrier was initialized with).
__device__ __forceinline__ void mbarrier_init(std::uint32_t barrier, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count));
}
__device__ __forceinline__ void mbarrier_cp_async_arrive(std::uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t barrier) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(barrier) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(std::uint32_t barrier, int parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT:\n mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

// Four 8×8 b16 matrices; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// The same, each matrix transposed on the way (V is stored keys × head dim but is the k × n operand of P·V).
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// D = A·B + D for one 16×8×16 tile, f32 accumulation. Element is __half or __nv_bfloat16.
template <class Element>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const std::uint32_t (&a)[4],
                                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                  std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// f32 inputs run on the TF32 tensor cores three times over ("3xTF32"): x = big + small with big = tf32(x) and
// small = tf32(x − big), and a·b ≈ big_a·big_b + big_a·small_b + small_a·big_b, about fp32 accuracy (the
// dropped small·small term is ~2^-22 relative). Fragment layouts of m16n8k8 (g = lane / 4, t = lane % 4):
//   A (16×8): a0 = (g, t)  a1 = (g+8, t)  a2 = (g, t+4)  a3 = (g+8, t+4)     B (8×8): b0 = (k t, n g)  b1 = (k t+4, n g)
// ldmatrix of 32-bit data (an 8×8 b16 matrix = 8 rows × 4 floats) hands out exactly these A and B fragments.
__device__ __forceinline__ std::uint32_t to_tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
struct SplitTf32 {
  std::uint32_t big, small;
};
__device__ __forceinline__ SplitTf32 split_tf32(float x) {
  const std::uint32_t big = to_tf32(x);
  return {big, to_tf32(x - __uint_as_float(big))};
}
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                              std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// D += A·B in 3xTF32 from f32 fragments (bit patterns of floats, as ldmatrix delivers them).
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                           std::uint32_t b1) {
  std::uint32_t a_big[4], a_small[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const SplitTf32 x = split_tf32(__uint_as_float(a[i]));
    a_big[i] = x.big, a_small[i] = x.small;
  }
  const SplitTf32 x0 = split_tf32(__uint_as_float(b0)), x1 = split_tf32(__uint_as_float(b1));
  mma_1688_tf32(d, a_small, x0.big, x1.big);
  mma_1688_tf32(d, a_big, x0.small, x1.small);
  mma_1688_tf32(d, a_big, x0.big, x1.big);
}

// Two floats → one register of two 16-bit values (lo in the low half), rounded to nearest.
template <class Element>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ std::uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<std::uint32_t*>(&v);
}
template <>
__device__ __forceinline__ std::uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<std::uint32_t*>(&v);
}

// 2^x, one MUFU instruction (ex2.approx.ftz: 2 ulp, −inf → +0).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace attnlab::cuda::flash::ptx
