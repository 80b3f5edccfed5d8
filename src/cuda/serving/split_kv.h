// The serving calls' GPU path: packed and paged batches through the split-KV kernel (split_kv_kernel.cuh). What
// it runs, how it cuts the work, and the call itself; core/serving.cpp routes VarlenForwardArgs here.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <optional>
#include <string>

#include "attnlab/serving.h"
#include "core/validate_serving.h"
#include "cuda/serving/split_kv_params.h"

namespace attnlab::cuda::serving {

// How one call is cut: warps of rows per block (1, 2 or 4: the rows a block holds, 16 each), query tiles per
// sequence, and splits of every block's keys.
struct SplitKvPlan {
  int device = 0;
  int row_warps = 1;
  int q_tiles = 0;
  int splits = 1;
  bool dependent_launch = false;    // programmatic dependent launch of both kernels (sm_90 and later)
  bool cluster_merge = false;       // the splits merged in thread-block clusters, no combine (split_kv_cluster.cuh)
  std::size_t workspace_bytes = 0;  // the splits' partial results (0 with one split or a cluster merge)
  std::size_t part_lse_offset = 0;  // where part_lse starts in the workspace
};

// Why the kernel cannot run the call (f16/bf16, Hqk = Hv of a built head dim, 16-byte aligned rows, cc ≥ 8.0, grid
// limits), or nullopt.
std::optional<std::string> split_kv_refusal(const VarlenForwardArgs& a, const core::VarlenLayout& l,
                                            const Tuning& tuning);

// The plan on the call's device: splits that fill its SMs when the batch alone does not (or
// Tuning::split_kv_splits), merged in clusters where Tuning::split_kv_cluster_merge allows it, split_kv_splits.h's
// rule says so, the head dim is at most 128 and the device holds the clusters.
SplitKvPlan plan_split_kv(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning);

// Runs the call on the context's stream (after split_kv_refusal said yes); the lengths, offsets and block tables
// are read on the device, in the stream's order.
void run_split_kv(Context& ctx, const VarlenForwardArgs& a, const core::VarlenLayout& l);

// Scratch bytes run_split_kv needs (the plan's).
std::size_t split_kv_workspace_bytes(const VarlenForwardArgs& a, const core::VarlenLayout& l, const Tuning& tuning);

// One (dtype, head dim) instance: split_kv_launch.cuh, instantiated by the generated split_kv_*.cu.
template <class Element, int kHeadDim>
void launch_split_kv(const SplitKvParams& p, const SplitKvPlan& plan, cudaStream_t stream);

// Whether `device` runs that instance's cluster kernel (sm_90 code) and holds a cluster of `splits` of its blocks
// at `row_warps` warps of rows; asked once per device and count (split_kv_launch.cuh).
template <class Element, int kHeadDim>
bool split_kv_clusters_fit(int device, int row_warps, int splits);

}  // namespace attnlab::cuda::serving
