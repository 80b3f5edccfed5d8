// The tensors of one decode call through the serving API (include/attnlab/serving.h), for `attnlab decode`:
// packed queries (B·q_len rows) over keys packed end to end (contiguous) or in a paged cache whose pages come in
// a shuffled order, on the host or the GPU. The same (shape, seed) gives the same values on either device, so a
// GPU call can be checked against a CPU path on a host copy made the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <attnlab/attention.h>
#include <attnlab/serving.h>

#include "gpu.h"

namespace lab {

// Random values are drawn for at most this many elements of a tensor and repeated over the rest: drawing the
// billions of elements of a 128k-token cache would take minutes, and the call does the same work on any values.
// A checked call's reference (a host copy made the same way) sees the same repeats. prefill.cpp draws so too.
inline constexpr std::int64_t kPatternElements = std::int64_t(1) << 20;

// One tensor's memory on the host or the GPU, filled from host bytes; prefill.cpp's tensors live in it too.
class TensorBuffer {
 public:
  TensorBuffer(attnlab::Device device, std::size_t bytes);
  void* data() { return gpu_ ? gpu_->data() : static_cast<void*>(host_.data()); }
  // `pattern` at the start, repeated to the end (one pattern upload fills any size).
  void fill(const std::vector<std::byte>& pattern);
  std::vector<std::byte> read() const;

 private:
  attnlab::Device device_;
  std::size_t bytes_;
  std::unique_ptr<gpu::DeviceBuffer> gpu_;
  std::vector<std::byte> host_;
};

enum class KvLayout { contiguous, paged };
std::string_view to_string(KvLayout layout);

struct DecodeShape {
  std::int64_t B = 1, S = 1, N = 1, K = 1, H = 1;
  std::int64_t q_len = 1;      // queries per sequence (1: plain decode; more: speculative tokens)
  std::int64_t page_size = 64; // keys per page (paged only)
  attnlab::DType dtype = attnlab::DType::f32;
  KvLayout layout = KvLayout::contiguous;

  std::int64_t pages_per_sequence() const { return (S + page_size - 1) / page_size; }
  // What one call must read of K and V: B·S·K·H elements of each, once.
  double kv_read_bytes() const;
  // Everything the call's tensors take on their device: Q, O, K and V (a paged cache rounds each sequence up to
  // whole pages), the new rows of DecodeInputs::append_args, lengths and block table.
  double footprint_bytes() const;
};

class DecodeInputs {
 public:
  // Allocates and fills one call's tensors on `device`. Throws attnlab::Error (out_of_memory) when the GPU has
  // no room, like any lab allocation.
  DecodeInputs(const DecodeShape& shape, attnlab::Device device, std::uint64_t seed);
  ~DecodeInputs();
  DecodeInputs(const DecodeInputs&) = delete;
  DecodeInputs& operator=(const DecodeInputs&) = delete;

  // The call's arguments with options.path = `path`; with q_len > 1, the decode convention's bottom-right causal
  // mask (the last query sees every key; with one query the mask hides nothing).
  attnlab::VarlenForwardArgs args(const std::string& path) const;
  // O as f32, read back from the GPU when it lives there (waits for the device).
  std::vector<float> output() const;
  // The decode loop's other call: append_kv of q_len new rows per sequence (padded (B, q_len, K, H) K and V) into
  // the same cache, at positions S − q_len … S − 1 (the cache the attention call reads holds S keys). Only when
  // q_len ≤ S. The contiguous cache is the packed keys seen as (B, S, K, H).
  attnlab::AppendKVArgs append_args() const;
  // Bytes of the new rows, K and V together.
  double new_row_bytes() const;

 private:
  attnlab::TensorView make(attnlab::DType dtype, std::initializer_list<std::int64_t> shape);
  DecodeShape shape_;
  attnlab::Device device_;
  std::vector<std::unique_ptr<TensorBuffer>> buffers_;
  attnlab::VarlenForwardArgs args_;
  attnlab::AppendKVArgs append_;
};

// Bytes free on the GPU now (cudaMemGetInfo), nullopt in a build without CUDA.
std::optional<std::size_t> free_gpu_bytes();

}  // namespace lab
