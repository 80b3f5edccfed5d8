// The preconditions of the serving calls (include/attnlab/serving.h, docs/serving.md): shapes, dtypes and devices
// of packed and paged layouts, and, for host tensors, the lengths, offsets and block tables themselves. Each failure
// names the rule it broke, before anything is read or written.
#pragma once

#include <cstdint>
#include <vector>

#include "attnlab/serving.h"

namespace attnlab::core {

// One sequence of a validated batch: its rows in the packed queries, its keys (packed rows, or paged: the pages
// of row b of the block table) and its lengths.
struct SequenceSpan {
  std::int64_t q_begin = 0, q_len = 0;
  std::int64_t k_begin = 0, kv_len = 0;  // k_begin: packed keys only
};

struct VarlenLayout {
  std::int64_t B = 0, N = 0, K = 0, Hqk = 0, Hv = 0, total_q = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  bool paged = false;
  std::int64_t pages = 0, page_size = 0, pages_per_sequence = 0;
  // Per sequence, read from host lengths; empty when the lengths are on the device.
  std::vector<SequenceSpan> sequences;
};

VarlenLayout validate(const VarlenForwardArgs& args);

struct AppendLayout {
  std::int64_t B = 0, K = 0, Hqk = 0, Hv = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  bool packed_new = false, paged = false;
  std::int64_t capacity = 0;  // keys one sequence's cache holds: S_max, or pages per sequence · page_size
  std::int64_t page_size = 0;
  // Per sequence (host lengths): where its new rows start in k_new (packed) and how many, and its cache length.
  std::vector<SequenceSpan> sequences;  // q_begin / q_len: new rows; kv_len: the cache's length before the append
};

AppendLayout validate(const AppendKVArgs& args);

}  // namespace attnlab::core
