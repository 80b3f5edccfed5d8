// The sm_90a flash kernel's shape: tile sizes, warpgroup roles, register split and shared-memory layout. One
// struct per (element type, head dims, version); everything the kernel's parts size themselves by is here.
#pragma once

#include <cstdint>

namespace attnlab::cuda::sm90 {

// Bytes of one swizzled shared-memory row: 128 (64 elements, TMA's and wgmma's 128-byte swizzle) wherever the
// head dims are multiples of 64; 64 (32 elements, the 64-byte swizzle) at head dim 96, whose 192-byte rows split
// into three slices of 64 bytes. Plain C++: the host side encodes the TMA maps with it.
constexpr int swizzle_row_bytes(int head_qk) { return head_qk == 96 ? 64 : 128; }

// Keys per K/V tile at a Q·Kᵀ head dim and kernel version: 128, except
//   at 256, where O takes 128 registers per consumer thread and leaves room for S and P of 64 keys (32 + 16
//     registers); in version s4 80 keys there (FlashAttention-3's tile at 256: 40 + 20 registers beside O's 128),
//     which make Q·Kᵀ's 64 × N wgmma read 4.5 KB of shared memory per 40 cycles instead of 4 KB per 32;
//   at 192 (Hv 192 or 128), 112 keys: two slots each of K and V of 128 keys would not fit in shared memory
//     (48 + 96 + 96 KB), of 112 they do (48 + 84 + 84 KB at Hv 192);
//   in version s4 at 128, 176 keys (FlashAttention-3's choice at head dim 128 without a mask), which give each
//     softmax step 1.375× the MMA work: S, P and O take 88 + 44 + 64 registers (s4 is s2 with FlashAttention-3's
//     key tiles: at other head dims it is s2);
//   in version s29 (s26's kernel, built at 128 alone), 160 keys: the widest tile whose two K and two V slots leave
//     room for O's own staging buffer (Q 32 + K 80 + V 80 + O 32 KB), which s26's persistent walk needs; S, P and O
//     take 80 + 40 + 64 registers. Q·Kᵀ's 64 × 160 wgmma reads 5.6 KB of shared memory per 80 cycles (90 bytes a
//     cycle against 96 at 128 keys), and each tile's fixed costs spread over 1.25× the keys;
//   in version s7 (built at head dim 64 alone), 256 keys, cuDNN's tile there: twice the MMA work per softmax step
//     of a 128-key tile, and no partly empty last tile at the power-of-two lengths 192 keys lost at
//     (docs/perf-notes-flash-sm90.md). S, P and O take 128 + 64 + 32 registers, so s7 lets each P·V finish before
//     the next Q·Kᵀ is issued (Traits::kPvBeforeQk) and S and P are never live together.
// Plain C++: the host side sizes the TMA boxes with it.
constexpr int key_tile_rows(int head_qk, int version) {
  if (head_qk == 256) return version == 4 || version == 13 ? 80 : 64;
  if (head_qk == 192) return 112;
  if (version == 7) return 256;
  if (head_qk == 128 && version == 29) return 160;
  return version == 4 && head_qk == 128 ? 176 : 128;
}

// Versions whose persistent CTAs take their blocks from a counter (scheduler.cuh, DynamicWalk): s5, s7, s11, s15,
// s26, s29, s30 and s31.
// Plain C++: the host side places the counter in the call's scratch for it.
constexpr bool walks_dynamically(int version) {
  return version == 5 || version == 7 || version == 11 || version == 15 || version == 26 || version == 29 ||
         version == 30 || version == 31;
}

// Query rows per consumer warpgroup: wgmma's M. Plain C++: the host side sizes O's TMA box with it.
constexpr int kConsumerRows = 64;

// Query rows per block at a kernel version: 128 (two consumer warpgroups), except s6's and s11's 192 (three; built
// at head dim 64 alone, where the softmax's share of a tile is largest and 64 + 32 + 32 registers of S, P and O leave
// room for a third warpgroup: FlashAttention-3's choice there). Plain C++: the host side sizes the grid and Q's TMA box
// with it.
constexpr int query_block_rows(int version) { return version == 6 || version == 11 ? 192 : 128; }

// The version whose instance a call of `version` runs: s4 differs from s2 only where its key tiles do, so at the
// other head dims it is s2's instance (src/CMakeLists.txt compiles s4 at head dims 128 and 256 alone).
constexpr int compiled_version(int head_dim, int version) {
  return version == 4 && key_tile_rows(head_dim, 4) == key_tile_rows(head_dim, 2) ? 2 : version;
}

// kVersionIndex: 1 = s1 (the next Q·Kᵀ issued with this tile's P·V, and ping-pong between the consumer
// warpgroups), 2 = s2 (s1 with the softmax on raw scores: one FFMA and one MUFU.EX2 per probability; scale > 0
// only), 3 = s3 (s2 in persistent CTAs walking a static list), 4 = s4 (s2 with 176-key tiles at head dim 128, 80
// at 256),
// 5 = s5 (s2 in persistent CTAs that take their next block from a counter, O staged apart from Q where it fits),
// 6 = s6 (s2 with three consumer warpgroups: blocks of 192 query rows, one CTA per block), 7 = s7 (s5 with 256-key
// tiles at head dim 64, each P·V finished before the next Q·Kᵀ), 11 = s11 (s6 in persistent CTAs that take their
// blocks from s5's counter), 13 = s13 (s4 at head dim 256 with O rescaled before P·V), 15 = s15 (s5 at head dim
// 128 with K loaded a tile ahead of V and V waited for inside the turn), 26 = s26 (s15 with lazy row maxima),
// 29 = s29 (s26 with 160-key tiles), 30 = s30 (s26 with Q·Kᵀ's Q from registers), 31 = s31 (s26 with the next
// block taken from the counter as this one starts);
// docs/perf-notes-flash-sm90.md (s0, each GEMM waited for, is retired; s8, s9, s10, s12, s14, s16, s20, s21, s24,
// s25, s27 and s28 were experiments not kept, 17–19, 22 and 23 probes that computed no attention, their numbers not
// reused).
template <class ElementT, int kHeadQKDim, int kHeadVDim, int kVersionIndex>
struct Traits {
  using Element = ElementT;
  static constexpr int kVersion = kVersionIndex;
  static_assert((kVersion >= 1 && kVersion <= 7) || kVersion == 11 ||
                    (kVersion == 13 && kHeadQKDim == 256 && kHeadVDim == 256) ||
                    ((kVersion == 15 || kVersion == 26 || kVersion == 29 || kVersion == 30 || kVersion == 31) &&
                     kHeadQKDim == 128 && kHeadVDim == 128),
                "kernel versions s1 … s7 and s11; s13 at head dim 256 alone, s15, s26, s29, s30 and s31 at 128 alone");
  static_assert(kVersion != 7 || (kHeadQKDim == 64 && kHeadVDim == 64), "s7 is built at head dim 64 alone");
  static constexpr bool kPersistent = kVersion == 3 || walks_dynamically(kVersion);
  // walks_dynamically: a CTA's blocks after its first come from a counter in global memory (scheduler.cuh,
  // DynamicWalk), one at a time as the CTA frees, which deals the longest-first list greedily, as the hardware deals a
  // grid of CTAs.
  static constexpr bool kDynamicWalk = walks_dynamically(kVersion);
  // s7: inside a warpgroup, P·V(j − 1) completes before Q·Kᵀ(j) is issued (mainloop.cuh), instead of the two
  // running together, so that the 256-key S and the P of the tile before never need registers at once (128 + 64
  // beside O's 32 would not fit in 224). The softmax still runs under the other warpgroup's GEMMs (ping-pong).
  static constexpr bool kPvBeforeQk = kVersion == 7;
  // s13 (s4's 80-key tiles at head dim 256): O is rescaled by the tile before's correction right after Q·Kᵀ(j) is
  // issued and before P·V(j − 1), while the tensor cores run the Q·Kᵀ, instead of after P·V(j − 1) has completed,
  // where O's 128 multiplies per thread stand between that wait and the next turn (FlashAttention-3's
  // RescaleOBeforeGemm above head dim 128).
  static constexpr bool kRescaleBeforePv = kVersion == 13;
  // s15 (s5 at head dim 128): FlashAttention-3's order of the K/V loads and waits. The producer loads K of tile
  // j + 1 before V of tile j, so the K slot that Q·Kᵀ(j − 1) freed is refilled without waiting behind V's slot,
  // which frees only when P·V(j − 2) completes; a consumer waits for V(j − 1) inside its turn, after Q·Kᵀ(j) is
  // issued, so the V tile has that GEMM's time more to land (mainloop.cuh). At head dim 256 the same order on s13
  // measured slower (docs/perf-notes-flash-sm90.md, s16).
  static constexpr bool kKeysAheadOfValues =
      kVersion == 15 || kVersion == 26 || kVersion == 29 || kVersion == 30 || kVersion == 31;
  // s26 (s15 with lazy row maxima): after a block's first key tile a warp whose rows all have a maximum computes
  // the tile's probabilities against it, without taking the tile's row maxima (their FMNMX chains and shuffles were
  // measured to cost s15 a seventh of its cycles at head dim 128: docs/perf-notes-flash-sm90.md, "What holds head
  // dim 128"); a tile where some probability would pass 2^8 is computed again and folded exactly
  // (mainloop.cuh, lazy_probabilities). s29 is s26 with 160-key tiles (key_tile_rows), s30 s26 with Q from registers,
  // s31 s26 with the walk's next block fetched ahead (kFetchAhead).
  static constexpr bool kLazyMax = kVersion == 26 || kVersion == 29 || kVersion == 30 || kVersion == 31;
  // s30: Q·Kᵀ takes Q from registers (an RS wgmma, K still from shared memory), loaded once per block with ldmatrix,
  // instead of reading this warpgroup's 16 KB of Q from shared memory in every tile's Q·Kᵀ. s28 measured shared
  // memory near its bandwidth at head dim 128: a Q·Kᵀ of 64 × 128 keys reads 48 KB in its 512 tensor cycles (96
  // bytes a cycle of the SM's 128) while the TMA writes the next K and V; from registers it reads K's 32 KB alone.
  // Q's fragments take 32 registers per consumer thread (wgmma's A layout, head dim / 4).
  static constexpr bool kQFromRegisters = kVersion == 30;
  // s31: the producer asks the counter for the CTA's next block when it starts this block's loads, not after it has
  // issued them all (FlashAttention-3's scheduler fetches its next tile as early). The answer's round trip to L2
  // then runs under the block instead of between its last loads and the next block's Q and first K, which at
  // T = 512 (four key tiles a block) are on the consumers' path: the table's head-dim-128 rows fit a block's time as
  // about 3.1 µs plus 1.6 µs a key tile (docs/perf-notes-flash-sm90.md, s31). The CTA holds one claimed block
  // ahead, as FlashAttention-3's does; the number of claims a call makes is unchanged.
  static constexpr bool kFetchAhead = kVersion == 31;
  static_assert((kHeadQKDim == kHeadVDim && (kHeadQKDim == 64 || kHeadQKDim == 96 || kHeadQKDim == 128 ||
                                             kHeadQKDim == 192 || kHeadQKDim == 256)) ||
                    (kHeadQKDim == 192 && kHeadVDim == 128),
                "head dims 64, 96, 128, 192, 256 and 192/128 (Hqk/Hv)");
  // Hv ≤ Hqk: O is staged in Q's shared memory.
  static constexpr int kHeadQK = kHeadQKDim;
  static constexpr int kHeadV = kHeadVDim;
  // A block owns 128 query rows (192 in s6 and s11): a consumer warpgroup per 64 rows (wgmma's M), one K/V tile of
  // kBlockN keys per step (wgmma's N for Q·Kᵀ), and one producer warpgroup that only issues TMA.
  static constexpr int kBlockM = query_block_rows(kVersion);
  static constexpr int kBlockN = key_tile_rows(kHeadQKDim, kVersion);
  static constexpr int kRowsPerConsumer = kConsumerRows;
  static constexpr int kConsumers = kBlockM / kRowsPerConsumer;
  static_assert(kConsumers == 2 || (kConsumers == 3 && kHeadQKDim == 64 && kHeadVDim == 64),
                "three consumer warpgroups at head dim 64 only (their registers: below)");
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kStages = 2;  // K and V slots each
  // Registers per consumer thread for the S tile, its P operand and the O accumulator (wgmma's 64 × N layout:
  // N / 2 each, P N / 4): 64 + 32 + 64 at head dim 128 (88 + 44 + 64 in s4), 32 + 16 + 128 at 256, 64 + 32 + 32
  // at 64, 64 + 32 + 48 at 96, 56 + 28 + 96 at 192 (56 + 28 + 64 at 192/128).
  static constexpr int kSRegs = kBlockN / 2;
  static constexpr int kPRegs = kBlockN / 4;
  static constexpr int kORegs = kHeadV / 2;
  // setmaxnreg: the producer gives registers back so the consumers can hold S, P and O.
  // 24·128 + 240·256 = 64 512, all of the CTA's registers at launch (below). s5's producer, which also takes and
  // hands over the blocks, keeps 56 and its consumers get 224 (56·128 + 224·256 = 64 512): at 24, 32 and 40 ptxas
  // spilled the producer's walk to local memory (measured while produce()'s tile loop was still unrolled:
  // mainloop.cuh). At head dim 256 no split fits s5: its consumers spill at 224 and 232 beside O's 128 registers,
  // its producer at 24 (36 bytes), and 32 + 240 exceeds the CTA's registers.
  // s6's three consumer warpgroups share what the producer leaves: 24·128 + 160·384 = 64 512 (FlashAttention-3's
  // consumer share with three). In persistent CTAs beside s5's 56-register producer they would get 152: ptxas then
  // spilled 68 bytes and serialized the wgmma chains, so s6 launches one CTA per block, as s2. s11 keeps them at 160
  // in persistent CTAs beside a producer of 32 (32·128 + 160·384 = 65 536, all of the SM's and of a 512-thread
  // CTA's; FlashAttention-3's split with three): it fits there because produce()'s tile loop is not unrolled
  // (mainloop.cuh) and the epilogue's copy offsets are not hoisted into the main loop (epilogue.cuh, ptx::opaque).
  // s29's 160-key tiles (S, P and O 80 + 40 + 64) spilled a register at 224; its producer gives 16 more back
  // (40·128 + 232·256 = 64 512). s30's Q fragments (32 more per consumer thread) fit in s26's 224.
  static constexpr int kProducerRegisters =
      !kDynamicWalk ? 24 : kConsumers == 3 ? 32 : kVersion == 29 ? 40 : 56;
  static constexpr int kConsumerRegisters =
      kConsumers == 3 ? 160 : !kDynamicWalk ? 240 : kVersion == 29 ? 232 : 224;
  // setmaxnreg moves registers within what the CTA was launched with — kThreads × the per-thread count ptxas
  // gives __launch_bounds__(kThreads, 1), a multiple of 8: 168 × 384 = 64 512 with two consumer warpgroups,
  // 128 × 512 = 65 536 with three. A split above it never completes its increase: the consumers wait forever.
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * 128 * kConsumers <= kLaunchRegisters * kThreads,
                "setmaxnreg's split fits the CTA's registers at launch");

  // Shared memory, every tile 1024-byte aligned (a swizzle pattern repeats within 8 rows of at most 128 bytes). A
  // tile of R rows × H columns is H / kSliceCols column slices of R rows × kRowBytes, one TMA box each: Q and K
  // have kQKSlices of them, V and O kVSlices (two at head dim 128: 64 columns of 128 bytes each; three of 32
  // columns of 64 bytes at 96).
  static constexpr int kRowBytes = swizzle_row_bytes(kHeadQKDim);
  static constexpr int kSliceCols = kRowBytes / 2;            // elements of 2 bytes in one swizzled row
  static constexpr int kQKSlices = kHeadQK / kSliceCols;
  static constexpr int kVSlices = kHeadV / kSliceCols;
  static_assert(kHeadQK % kSliceCols == 0 && kHeadV % kSliceCols == 0, "head dims are whole slices");
  static constexpr int kQSliceBytes = kBlockM * kRowBytes;
  static constexpr int kKVSliceBytes = kBlockN * kRowBytes;
  static constexpr int kQBytes = kQSliceBytes * kQKSlices;  // 32 KB at head dim 128
  static constexpr int kKBytes = kKVSliceBytes * kQKSlices;  // per slot: 32 KB at 128 and 256 (44 KB in s4)
  static constexpr int kVBytes = kKVSliceBytes * kVSlices;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKBytes;
  // O's staging rows (kBlockM × Hv, the O box's swizzle). In Q's shared memory (Hv ≤ Hqk), where a persistent CTA's
  // next Q can only land once this block's O store has read them; in the dynamic walk's versions (walks_dynamically)
  // in a buffer of their own wherever it fits beside Q and the K/V slots (head dims 64, 96, 128 and 192/128; not 192 and 256), so Q is free
  // after the block's last Q·Kᵀ and the next block's Q load runs under this block's last P·V and epilogue.
  static constexpr int kOStagedBytes = kQSliceBytes * kVSlices;
  static constexpr int kFixedBytes = kVOffset + kStages * kVBytes;
  // Barriers: Q full, then per stage K full, K empty, V full, V empty, then Q empty (persistent CTAs), then the dynamic
  // walk's two item slots' full and empty barriers (walks_dynamically); then those two slots' items (4 bytes each).
  static constexpr int kBarriers = 2 + 4 * kStages + 4;
  static constexpr int kTailBytes = 8 * kBarriers + 16;
  // What an sm_90 block may opt in to: 227 KB of shared memory.
  static constexpr int kMaxSmemAllocation = 232448;
  static constexpr bool kOwnOBuffer =
      kDynamicWalk && kFixedBytes + kOStagedBytes + kTailBytes + 1024 <= kMaxSmemAllocation;
  static constexpr int kOOffset = kOwnOBuffer ? kFixedBytes : kQOffset;
  static constexpr int kBarrierOffset = kFixedBytes + (kOwnOBuffer ? kOStagedBytes : 0);
  static constexpr int kSmemBytes = kBarrierOffset + kTailBytes;
  // The dynamic allocation asks 1 KB more, so the kernel can round its base up to 1024 bytes.
  static constexpr int kSmemAllocation = kSmemBytes + 1024;
  static_assert(kOStagedBytes <= kQBytes, "O's staging rows fit in Q's shared memory (Hv ≤ Hqk)");
  // The dynamic walk's versions are built only where O fits apart (versions.h, version_built): their epilogue and Q
  // release are tested that way.
  static_assert(!kDynamicWalk || kOwnOBuffer, "the dynamic walk stages O in a buffer of its own");
  static_assert(kKVSliceBytes % 1024 == 0 && kQSliceBytes % 1024 == 0, "every tile stays 1024-byte aligned");
  static_assert(kSmemAllocation <= kMaxSmemAllocation, "an sm_90 block may opt in to 227 KB of shared memory");
};

}  // namespace attnlab::cuda::sm90
