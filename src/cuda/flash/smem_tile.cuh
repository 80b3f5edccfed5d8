// A tile of 16-bit or 32-bit elements in shared memory, rows × cols, stored row-major with the 16-byte chunks of each row
// XOR-swizzled so that both the cp.async writes and the ldmatrix reads (8 rows × 16 bytes per phase) hit 8
// different bank groups: chunk c of row r lives at chunk c ^ (r mod 8) when rows hold a multiple of 8 chunks, and
// at c ^ ((r / 2) mod 4) otherwise (4 chunks at head dim 32, 12 at 96): the XOR then stays inside groups of 4
// chunks, and rows r and r + 1 start 4 bank groups apart, so 8 consecutive rows still cover all 8.
#pragma once

#include <cstdint>

#include "cuda/flash/ptx.cuh"

namespace attnlab::cuda::flash {

template <int kRows, int kCols, int kElementBytes = 2>
struct SmemTile {
  static constexpr int kRowBytes = kCols * kElementBytes;
  static_assert(kRowBytes % 64 == 0, "rows of a whole number of 64-byte halves");
  static constexpr int kChunkElements = 16 / kElementBytes;
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks per row
  static constexpr int kBytes = kRows * kRowBytes;

  // Byte offset of chunk `chunk` of row `row`.
  __device__ __forceinline__ static std::uint32_t offset(int row, int chunk) {
    const int swizzle = kChunks % 8 == 0 ? (row & 7) : ((row >> 1) & 3);
    return std::uint32_t(row * kRowBytes + ((chunk ^ swizzle) << 4));
  }
  // Byte offset of element `col` of row `row` (a pair col, col + 1 with col even stays in one chunk).
  __device__ __forceinline__ static std::uint32_t element_offset(int row, int col) {
    return offset(row, col / kChunkElements) + (col % kChunkElements) * kElementBytes;
  }

  // Copies rows [0, kRows) from `src` (row r at src + r·stride elements) with cp.async; rows ≥ valid_rows become
  // zeros. All kThreads threads of the block call this. Thread t always copies chunk t % kChunks of rows
  // t / kChunks + i·kRowStep, so one base pointer and one 32-bit step serve every copy (64-bit addresses per copy
  // would cost the main loop registers it needs for accumulators); flash_path.cpp keeps row strides below 2^24.
  // kOpaqueThread: rebuild every per-thread quantity at each call (see below), for kernels short of registers.
  template <int kThreads, bool kOpaqueThread = false, class Element>
  __device__ __forceinline__ static void load_async(std::uint32_t tile, const Element* src, std::int64_t stride,
                                                    int valid_rows, int thread) {
    static_assert(sizeof(Element) == kElementBytes, "the tile's element size");
    if constexpr (kThreads % kChunks != 0) {  // rows of 12 chunks (head dim 96): the plain loop
      for (int id = thread; id < kRows * kChunks; id += kThreads) {
        const int row = id / kChunks, chunk = id % kChunks;
        const bool valid = row < valid_rows;
        ptx::cp_async_16(tile + offset(row, chunk), valid ? src + row * stride + chunk * kChunkElements : src,
                         valid);
      }
      return;
    }
    static_assert((kRows * kChunks) % kThreads == 0 || kThreads % kChunks != 0, "a whole number of rows per pass");
    constexpr int kRowStep = kThreads / kChunks;
    // With kOpaqueThread every per-thread quantity below is rebuilt at each call from an opaque copy of the
    // thread index. Left visible, the compiler hoists row0 + i·kRowStep (one value per copy row) out of the
    // kernel's main loop and holds them through it; where the accumulators take every register (4 warps × 32 rows
    // at Hqk 128) they were spilled. Rebuilding costs a few integer instructions per tile.
    if constexpr (kOpaqueThread) asm volatile("" : "+r"(thread));
    const int row0 = thread / kChunks;
    const int chunk = thread % kChunks;
    const Element* base = src + row0 * stride + chunk * kChunkElements;
    const int step = kRowStep * int(stride);
    const std::uint32_t dst = tile + offset(row0, chunk);
    // Every row in bounds (each tile but a sequence's last): no per-row bound, no fallback address, and one
    // pointer stepped kRowStep rows at a time. The general loop below spends ~9 integer instructions per copy
    // on its 64-bit address and predicate (~200 per warp and step in the kernels that rebuild them per tile).
    if (valid_rows >= kRows) {
      const char* from = reinterpret_cast<const char*>(base);
      const std::int64_t step_bytes = std::int64_t(step) * kElementBytes;
#pragma unroll
      for (int i = 0; i < kRows / kRowStep; ++i, from += step_bytes) {
        const std::uint32_t to = kRowStep % 8 == 0 ? dst + i * kRowStep * kRowBytes
                                                   : tile + offset(row0 + i * kRowStep, chunk);
        ptx::cp_async_16(to, from);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      const bool valid = row0 + i * kRowStep < valid_rows;
      // An invalid row still needs a readable address; the copy reads 0 bytes from it.
      // The swizzle repeats every 8 rows: with a step of 8 rows the destination is one base plus a constant.
      const std::uint32_t to = kRowStep % 8 == 0 ? dst + i * kRowStep * kRowBytes
                                                 : tile + offset(row0 + i * kRowStep, chunk);
      ptx::cp_async_16(to, valid ? base + i * step : src, valid);
    }
  }
};

}  // namespace attnlab::cuda::flash
