// Running a serving test batch (serving_batch.h) on the GPU: device copies of its tensors, the call on the default
// or a non-blocking stream, o and lse back into the batch's host tensors for check_outputs. Shared by the serving
// tests of every GPU path (test_gpu_serving.cpp, test_gpu_serving_cudnn.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "attnlab/version.h"  // ATTNLAB_WITH_CUDA
#include "device_mirror.h"
#include "serving_batch.h"

#if ATTNLAB_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnlab_test {

// One case of a varlen table: per-sequence lengths, heads, the page size (0: packed keys), the mask, sinks,
// softcap.
struct GpuVarlenCase {
  const char* name;
  std::vector<std::int64_t> q_lens, kv_lens;
  std::int64_t N, K, page_size;
  int mask;  // 0 none, 1 causal bottom-right, 2 causal top-left, 3 window (left 40, right 3)
  bool sinks;
  float softcap;
};

// The case's options on `path`.
attnlab::Options options_of(const GpuVarlenCase& c, const char* path);

// The case's batch at head dim `head_dim` (Hqk = Hv) and `dtype`, its tensors drawn from `rng`.
Batch batch_of(const GpuVarlenCase& c, std::int64_t head_dim, DType dtype, Rng& rng);

#if ATTNLAB_WITH_CUDA
// A non-blocking stream shared by the tests (created once, never destroyed: the process ends with it).
cudaStream_t nonblocking();

bool is_hopper();

// Batch b's call on device copies of its tensors, in a fresh context (or `ctx`), on the default or a non-blocking
// stream. o and lse come back into the batch also when the call throws (then rethrown).
attnlab::RunInfo run_on_gpu(Batch& b, const attnlab::Options& o, bool other_stream,
                            std::optional<attnlab::DeviceBuffer> workspace = std::nullopt,
                            const attnlab::Tuning* tuning = nullptr, attnlab::Context* ctx = nullptr);

// Batch b's call arguments with options o, every tensor a device copy made through `mirror` (packed or paged keys,
// sinks when the batch has them).
attnlab::VarlenForwardArgs device_args(const Batch& b, const attnlab::Options& o, DeviceMirror& mirror);

// A call through `workspace`, smaller than the call needs: refused as unsupported, its message containing
// `phrase`, before anything is written (O's bytes as they were).
void expect_workspace_refused(Batch& b, const attnlab::Options& o, attnlab::DeviceBuffer workspace,
                              const std::string& phrase, const attnlab::Tuning* tuning = nullptr,
                              attnlab::Context* ctx = nullptr);
#endif

}  // namespace attnlab_test
