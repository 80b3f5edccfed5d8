// The warpgroup MMAs of the sm_90a kernel, as CuTe's instruction atoms (cute/arch/mma_sm90_gmma*.hpp, the pinned
// CUTLASS): one wgmma.mma_async of shape 64 × N × 16 with f32 accumulators, for every N the kernel's tiles use.
// Only the atoms are taken from CuTe — each is one inline-PTX instruction with its N/2 accumulator registers
// spelled out — not its layout algebra: the operands are the raw shared-memory descriptors of ptx.cuh and the
// accumulators plain float arrays in wgmma's register layout (softmax.cuh describes it).
//   mma_ss: D (64 × N) (+)= A (64 × 16, shared memory, K-major) · B (16 × N, shared memory, K-major)   Q·Kᵀ
//   mma_rs: D (64 × N) (+)= A (64 × 16, registers)              · B (16 × N, shared memory, MN-major)  P·V
//           or B K-major: Q·Kᵀ with Q from registers (s30)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // N = 80, 112, 160 and 176 (key tiles at 192, in s4 and in s29)

namespace attnlab::cuda::sm90::gmma {

namespace GMMA = cute::SM90::GMMA;

// The atom for (element type, N, operand sources, B's major). Q·Kᵀ reads both operands K-major; P·V reads V
// MN-major.
template <class Element, int kN, bool kARegisters, bool kBKMajor = !kARegisters>
struct Atom;

#define ATTNLAB_SM90_GMMA_ATOMS(N)                                                                       \
  template <>                                                                                            \
  struct Atom<__nv_bfloat16, N, false> {                                                                 \
    using type = GMMA::MMA_64x##N##x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>;                   \
  };                                                                                                     \
  template <>                                                                                            \
  struct Atom<__half, N, false> {                                                                        \
    using type = GMMA::MMA_64x##N##x16_F32F16F16_SS<GMMA::Major::K, GMMA::Major::K>;                     \
  };                                                                                                     \
  template <>                                                                                            \
  struct Atom<__nv_bfloat16, N, true> {                                                                  \
    using type = GMMA::MMA_64x##N##x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>;                  \
  };                                                                                                     \
  template <>                                                                                            \
  struct Atom<__half, N, true> {                                                                         \
    using type = GMMA::MMA_64x##N##x16_F32F16F16_RS<GMMA::Major::K, GMMA::Major::MN>;                    \
  };                                                                                                     \
  template <>                                                                                            \
  struct Atom<__nv_bfloat16, N, true, true> {                                                            \
    using type = GMMA::MMA_64x##N##x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>;                   \
  };                                                                                                     \
  template <>                                                                                            \
  struct Atom<__half, N, true, true> {                                                                   \
    using type = GMMA::MMA_64x##N##x16_F32F16F16_RS<GMMA::Major::K, GMMA::Major::K>;                     \
  };
// The N of every tile the traits choose (traits.h): key tiles of 64, 80, 112, 128, 160 and 176 keys, value head dims
// 64, 96, 128, 192 and 256. 80, 112, 160 and 176 are CuTe's "extended" shapes (mma_sm90_gmma_ext.hpp, included directly
// above).
ATTNLAB_SM90_GMMA_ATOMS(64)
ATTNLAB_SM90_GMMA_ATOMS(80)
ATTNLAB_SM90_GMMA_ATOMS(96)
ATTNLAB_SM90_GMMA_ATOMS(112)
ATTNLAB_SM90_GMMA_ATOMS(128)
ATTNLAB_SM90_GMMA_ATOMS(160)
ATTNLAB_SM90_GMMA_ATOMS(176)
ATTNLAB_SM90_GMMA_ATOMS(192)
ATTNLAB_SM90_GMMA_ATOMS(256)
#undef ATTNLAB_SM90_GMMA_ATOMS

template <class AtomT, int kN, std::size_t... I>
__device__ __forceinline__ void ss(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                   GMMA::ScaleOut scale, std::index_sequence<I...>) {
  AtomT::fma(desc_a, desc_b, d[I]..., scale);
}
template <class AtomT, int kN, std::size_t... I>
__device__ __forceinline__ void rs(float (&d)[kN / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                   GMMA::ScaleOut scale, std::index_sequence<I...>) {
  AtomT::fma(a[0], a[1], a[2], a[3], desc_b, d[I]..., scale);
}

// `accumulate` false overwrites D (the first K step of a tile), true adds to it.
template <class Element, int kN>
__device__ __forceinline__ void mma_ss(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                       bool accumulate) {
  ss<typename Atom<Element, kN, false>::type, kN>(d, desc_a, desc_b,
                                                  accumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero,
                                                  std::make_index_sequence<kN / 2>{});
}
// kBKMajor: B K-major (Q·Kᵀ with Q from registers) instead of MN-major (P·V).
template <class Element, int kN, bool kBKMajor = false>
__device__ __forceinline__ void mma_rs(float (&d)[kN / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                       bool accumulate) {
  rs<typename Atom<Element, kN, true, kBKMajor>::type, kN>(d, a, desc_b,
                                                 accumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero,
                                                 std::make_index_sequence<kN / 2>{});
}

}  // namespace attnlab::cuda::sm90::gmma
