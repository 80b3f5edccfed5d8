// The narrow interface between the cudnn path and cudnn-frontend. Only cudnn_graphs.cpp includes
// cudnn_frontend.h (one translation unit: the header takes most of a minute to compile); everything else sees this
// file, which describes a graph as plain numbers and runs it through an opaque handle.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "attnlab/attention.h"
#include "core/problem.h"

namespace attnlab::cuda::cudnn {

// Everything a cuDNN SDPA graph depends on. Two calls with equal specs share one built graph. Strides are in
// cuDNN's logical order (B, heads, sequence, head dim) and already canonical (see cudnn_plan.cpp).
struct GraphSpec {
  core::Direction direction = core::Direction::forward;
  DType dtype = DType::bf16;
  int device_cc = 0;  // compute capability × 10: plans are built for one architecture
  std::int64_t B = 0, T = 0, S = 0, N = 0, K = 0, Hqk = 0, Hv = 0;
  using Strides = std::array<std::int64_t, 4>;
  Strides q{}, k{}, v{}, o{};
  Strides d_o{}, dq{}, dk{}, dv{};  // backward only
  // Forward: whether cuDNN writes its softmax statistics (always (B, N, T, 1) fp32, packed). Backward reads them.
  bool stats = false;
  // Additive bias (bias_b ∈ {1, B}, bias_n ∈ {1, N}, T, S) in bias_dtype.
  bool bias = false;
  DType bias_dtype = DType::bf16;
  std::int64_t bias_b = 1, bias_n = 1;
  Strides bias_strides{};
  // Padding mask: seq_len_q / seq_len_kv (B, 1, 1, 1) int32 device tensors are inputs of the graph.
  bool padding = false;
  // Diagonal band in cuDNN's own terms (−1 = not set): key j is kept iff
  //   j ≤ d(i) + right_bound   and   j > d(i) − left_bound,
  // with d(i) = i (top-left) or i + kv_len − q_len (bottom-right).
  bool bottom_right = false;
  std::int64_t left_bound = -1;
  std::int64_t right_bound = -1;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: tanh soft-capping as a cuDNN score modifier (forward and backward)
  // FP8 graphs (dtype e4m3 / e5m2, cuDNN's sdpa_fp8 nodes): the dtypes of O (written forward, read backward), of dO
  // and of the gradients, which may differ from the inputs'. Per-tensor scales are (1, 1, 1, 1) f32 device
  // tensors; a scale of a bf16/f16 output is the constant 1. Every amax is an output.
  DType o_dtype = DType::bf16;
  DType d_o_dtype = DType::bf16;
  DType grad_dtype = DType::bf16;
  // The serving calls' layouts (cudnn_varlen.cpp), forward only, always with the padding mask. ragged_q: batch b's
  // rows of Q and O start at the element offsets in (B + 1) int32 device tensors (Slot::ragged_q, ragged_o), T being
  // the graph's maximum query length; ragged_kv: likewise K and V. paged: K and V are caches of `pages` pages of
  // `page_size` rows, (pages, K, page_size, H) in cuDNN's order (the strides in k, v), read through (B, 1,
  // pages_per_sequence, 1) int32 page tables; S is then the graph's maximum key length.
  bool ragged_q = false, ragged_kv = false, paged = false;
  std::int64_t pages = 0, page_size = 0, pages_per_sequence = 0;
  bool fp8() const { return dtype == DType::e4m3 || dtype == DType::e5m2; }

  static constexpr int kKeyWords = 72;
  using Key = std::array<std::int64_t, kKeyWords>;
  Key key() const;
};

struct KeyHash {
  std::size_t operator()(const GraphSpec::Key& key) const noexcept;
};

// Tensor slots of a graph's variant pack (scoped names, plain int values to index Pointers).
struct Slot {
  enum : int {
    q = 0, k, v, o, stats, bias, seq_len_q, seq_len_kv, d_o, dq, dk, dv,
    // FP8 scales and amaxes
    descale_q, descale_k, descale_v, descale_o, descale_do, descale_s, scale_s, descale_dp, scale_dp,
    scale_o, scale_dq, scale_dk, scale_dv, amax_s, amax_o, amax_dp, amax_dq, amax_dk, amax_dv,
    // packed and paged layouts
    ragged_q, ragged_k, ragged_v, ragged_o, page_table_k, page_table_v,
    count
  };
};
using Pointers = std::array<void*, Slot::count>;

class Graph;  // a built cudnn-frontend graph with its execution plan

struct BuildResult {
  std::shared_ptr<const Graph> graph;  // null when the build failed
  std::string error;                   // the frontend's message when it failed
  bool device_failure = false;         // a CUDA / handle failure rather than "cuDNN does not support this"
};

// Validates the spec with cudnn-frontend, builds the operation graph, queries the heuristics and builds the first
// plan that cuDNN supports. Slow (tens to hundreds of milliseconds): callers cache the result.
BuildResult build_graph(cudnnHandle_t handle, const GraphSpec& spec);

// Device scratch bytes one execution needs.
std::size_t workspace_size(const Graph& graph);

// Enqueues the graph on the handle's stream. No allocation, no synchronization. Returns the frontend's message
// when cuDNN refuses to launch.
std::optional<std::string> execute(const Graph& graph, cudnnHandle_t handle, const Pointers& pointers,
                                   void* workspace);

}  // namespace attnlab::cuda::cudnn
