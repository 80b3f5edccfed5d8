// Where an element sits in the kernel's swizzled shared-memory tiles: the epilogue stages O there (epilogue.cuh) and
// s28 stages P there for its P·V (mainloop.cuh, probabilities_to_p), in the layout the TMA boxes and the wgmma
// descriptors use.
#pragma once

#include <cstdint>

namespace attnlab::cuda::sm90 {

// Byte offset of element (row, col) in a swizzled tile of kRowBytes-byte rows split in column slices, as TMA's
// SWIZZLE_128B and SWIZZLE_64B lay them out: the 16-byte chunk index within a row is XORed with bits 7 and up of
// the row's offset (row % 8 for 128-byte rows, (row / 2) % 4 for 64-byte rows).
template <class Traits>
__device__ __forceinline__ std::uint32_t swizzled_offset(int row, int col) {
  constexpr int kChunkMask = Traits::kRowBytes / 16 - 1;
  const int slice = col / Traits::kSliceCols, byte = (col % Traits::kSliceCols) * 2;
  const int row_offset = row * Traits::kRowBytes;
  return std::uint32_t(slice * Traits::kQSliceBytes + row_offset +
                       ((((byte >> 4) ^ ((row_offset >> 7) & kChunkMask))) << 4) + (byte & 15));
}

}  // namespace attnlab::cuda::sm90
