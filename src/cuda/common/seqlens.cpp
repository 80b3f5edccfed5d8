#include "cuda/common/seqlens.h"

#include <algorithm>
#include <array>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/staging.h"

namespace attnlab::cuda {
namespace {

bool used_in_place(const TensorView& t) { return t.empty() || (t.device == Device::cuda && t.strides[0] == 1); }

}  // namespace

std::size_t seqlens_scratch_bytes(const core::Problem& p) {
  if (used_in_place(p.q_seqlens) && used_in_place(p.kv_seqlens)) return 0;
  return 2 * std::size_t(p.dims.B) * sizeof(std::int32_t);
}

DeviceSeqlens place_seqlens(const core::Problem& p, std::int32_t* scratch, cudaStream_t stream, const char* who) {
  DeviceSeqlens out;
  const std::int64_t B = p.dims.B;
  const TensorView* views[2] = {&p.q_seqlens, &p.kv_seqlens};
  const std::int32_t** targets[2] = {&out.q, &out.kv};
  bool host[2] = {false, false};
  for (int k = 0; k < 2; ++k) {
    const TensorView& t = *views[k];
    if (t.empty()) continue;
    if (used_in_place(t)) {
      *targets[k] = static_cast<const std::int32_t*>(t.data);
      continue;
    }
    std::int32_t* dst = scratch + k * B;
    *targets[k] = dst;
    host[k] = t.device == Device::cpu;
    if (!host[k])
      check_cuda(cudaMemcpy2DAsync(dst, sizeof(std::int32_t), t.data, t.strides[0] * sizeof(std::int32_t),
                                   sizeof(std::int32_t), B, cudaMemcpyDeviceToDevice, stream),
                 std::string(who) + ": gather strided seqlens");
  }
  // Host lengths: both sides in one staging launch when they fit one (the common case), else side by side in
  // chunks. The chunk lives on the stack: no host allocation either.
  std::array<std::int32_t, kStagedWordsPerLaunch> chunk;
  auto gather = [&](int k, std::int64_t b0, std::int64_t n, std::int32_t* into) {
    const TensorView& t = *views[k];
    const auto* src = static_cast<const std::int32_t*>(t.data);
    for (std::int64_t b = 0; b < n; ++b) into[b] = src[(b0 + b) * t.strides[0]];
  };
  if (host[0] && host[1] && 2 * B <= std::int64_t(chunk.size())) {
    gather(0, 0, B, chunk.data());
    gather(1, 0, B, chunk.data() + B);
    stage_words(chunk.data(), std::size_t(2 * B), scratch, stream, who);
    return out;
  }
  for (int k = 0; k < 2; ++k) {
    if (!host[k]) continue;
    for (std::int64_t b0 = 0; b0 < B; b0 += std::int64_t(chunk.size())) {
      const std::int64_t n = std::min<std::int64_t>(std::int64_t(chunk.size()), B - b0);
      gather(k, b0, n, chunk.data());
      stage_words(chunk.data(), std::size_t(n), scratch + k * B + b0, stream, who);
    }
  }
  return out;
}

}  // namespace attnlab::cuda
