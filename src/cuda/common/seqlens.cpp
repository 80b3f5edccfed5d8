#include "cuda/common/seqlens.h"

#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace attnlab::cuda {

DeviceSeqlens place_seqlens(const core::Problem& p, std::int32_t* scratch, cudaStream_t stream, const char* who) {
  DeviceSeqlens out;
  const TensorView* views[2] = {&p.q_seqlens, &p.kv_seqlens};
  const std::int32_t** targets[2] = {&out.q, &out.kv};
  const std::string what = std::string(who) + ": copy seqlens";
  for (int k = 0; k < 2; ++k) {
    const TensorView& t = *views[k];
    if (t.empty()) continue;
    if (t.device == Device::cuda && t.strides[0] == 1) {
      *targets[k] = static_cast<const std::int32_t*>(t.data);
      continue;
    }
    std::int32_t* dst = scratch + k * p.dims.B;
    if (t.device == Device::cuda) {
      check_cuda(cudaMemcpy2DAsync(dst, sizeof(std::int32_t), t.data, t.strides[0] * sizeof(std::int32_t),
                                   sizeof(std::int32_t), p.dims.B, cudaMemcpyDeviceToDevice, stream),
                 what);
    } else {
      std::vector<std::int32_t> host(p.dims.B);
      for (std::int64_t b = 0; b < p.dims.B; ++b) host[b] = static_cast<const std::int32_t*>(t.data)[b * t.strides[0]];
      check_cuda(cudaMemcpy(dst, host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice), what);
    }
    *targets[k] = dst;
  }
  return out;
}

}  // namespace attnlab::cuda
