// attnlab for inference engines: packed variable-length batches and paged KV caches, in the conventions
// FlashAttention's varlen and kvcache calls use (docs/serving.md has the semantics and the plan).
//
// A batch of B sequences, sequence b with q_len(b) queries and kv_len(b) keys, each attended to on its own with
// the call's Options (scale, softcap, mask; a causal mask's diagonal is measured from that sequence's lengths):
//   packed queries   q (total_q, N, Hqk), o (total_q, N, Hv): sequence b's rows are cu_seqlens_q[b] …
//                    cu_seqlens_q[b + 1] − 1; lse (N, total_q) f32. Rows past cu_seqlens_q[B] are not written.
//   packed keys      k (total_k, K, Hqk), v (total_k, K, Hv), likewise with cu_seqlens_k;
//   paged keys       a cache of pages: k_cache (pages, page_size, K, Hqk), v_cache (pages, page_size, K, Hv);
//                    sequence b's key j is row j % page_size of page block_table[b][j / page_size], and it has
//                    seqlens[b] keys (FlashAttention's cache_seqlens / seqused_k).
// cu_seqlens are int32 (B + 1), cu_seqlens[0] = 0, non-decreasing, cu_seqlens[B] ≤ the packed tensor's rows;
// max_seqlen_q / max_seqlen_k bound every sequence's length (GPU kernels size their grids with them without
// reading device lengths). Host lengths and block tables are checked before any work; device ones are the
// caller's to keep in range (as Options::q_seqlens are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "attnlab/attention.h"

namespace attnlab {

struct PagedKV {
  TensorView k_cache;      // (pages, page_size, K, Hqk)
  TensorView v_cache;      // (pages, page_size, K, Hv), same pages and page size
  TensorView block_table;  // (B, pages per sequence) int32: the pages of sequence b in order
  TensorView seqlens;      // (B) int32: keys of sequence b in the cache, ≤ pages per sequence · page_size
};

struct VarlenForwardArgs {
  TensorView q;                   // (total_q, N, Hqk)
  TensorView cu_seqlens_q;        // (B + 1) int32
  std::int64_t max_seqlen_q = 0;  // ≥ every q_len(b)
  // Keys: packed (k, v, cu_seqlens_k, max_seqlen_k) or paged (then k, v and cu_seqlens_k stay empty).
  TensorView k, v;                // (total_k, K, Hqk), (total_k, K, Hv)
  TensorView cu_seqlens_k;        // (B + 1) int32
  std::int64_t max_seqlen_k = 0;  // ≥ every kv_len(b); with a paged cache, ≥ every seqlens[b]
  std::optional<PagedKV> paged;
  TensorView o;    // (total_q, N, Hv): written only when the call succeeds
  TensorView lse;  // optional (N, total_q) f32
  // Optional attention sinks (gpt-oss): (N) f32, one logit per query head that joins every row's softmax as a
  // key with no value: p_j = exp(s_j − LSE) with LSE = log(exp(sink) + Σ_j exp(s_j)), O = Σ_j p_j v_j. The LSE
  // written includes the sink. A row that sees no key then has O = 0 and LSE = sink.
  TensorView sinks;
  // Scale, softcap, mask and path as for ForwardArgs; q_seqlens, kv_seqlens, bias and bool_mask must stay empty
  // (the lengths are the layout's).
  Options options;
  std::optional<DeviceBuffer> workspace;  // as in ForwardArgs
};

// Which paths run it (docs/serving.md): on the CPU, cpu-naive and cpu-flash one sequence at a time; on the GPU,
// flash-sm80 (the split-KV kernel: f16/bf16, Hqk = Hv ∈ {64, 128, 256}, packed or paged keys, any GPU from
// sm_80), flash-sm90 (the Hopper kernel: f16/bf16, its head dims, packed keys, compute capability 9.0) and cudnn
// (cuDNN's ragged and paged SDPA: f16/bf16, no sinks or softcap); flash runs prefill-shaped packed batches on
// flash-sm90 and the rest on flash-sm80, auto likewise but paged prefill on cudnn (RunInfo::path says which).
// Other paths refuse it by name.
ATTNLAB_API RunInfo forward(Context& ctx, const VarlenForwardArgs& args);
ATTNLAB_API std::optional<std::string> why_not(Context& ctx, const std::string& path, const VarlenForwardArgs& args);
// Device scratch bytes forward(ctx, args) needs on its path (the splits' partial results when the keys are split
// across blocks; 0 on the CPU), for a caller workspace (args.workspace).
ATTNLAB_API std::size_t workspace_size(Context& ctx, const VarlenForwardArgs& args);

// New tokens' keys and values written into a cache, at each sequence's current end: sequence b's new rows
// t = 0 … new_len(b) − 1 go to cache position seqlens[b] + t. The call only writes the cache: the caller advances
// seqlens (as FlashAttention's callers do). A cache is contiguous, k_cache (B, S_max, K, Hqk), or paged (PagedKV).
struct AppendKVArgs {
  // New rows, padded (B, T_new, K, H) with every sequence taking T_new, or packed (total_new, K, H) with
  // cu_seqlens_new (B + 1) int32.
  TensorView k_new, v_new;
  TensorView cu_seqlens_new;
  // The cache: contiguous (k_cache, v_cache as (B, S_max, K, H), seqlens (B) int32) or paged.
  TensorView k_cache, v_cache;
  TensorView seqlens;
  std::optional<PagedKV> paged;  // when set, k_cache, v_cache and seqlens above stay empty
};

// Runs on the tensors' device (CPU, or the context's stream). Host lengths are checked first: a sequence whose
// new rows would pass its cache's capacity (S_max, or pages per sequence · page_size) is an error naming it, and
// nothing is written.
ATTNLAB_API void append_kv(Context& ctx, const AppendKVArgs& args);

}  // namespace attnlab
