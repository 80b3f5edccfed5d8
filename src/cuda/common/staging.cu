#include "cuda/common/staging.h"

#include <algorithm>
#include <string>

#include "cuda/common/cuda_check.h"

namespace attnlab::cuda {
namespace {

// The parameter block of one launch. Calls stage a few words (2·B lengths) far more often than many, and the
// driver copies the whole block per launch, so a small block serves those.
template <std::size_t Words>
struct StagedWords {
  std::int32_t count;
  std::int32_t words[Words];
};
constexpr std::size_t kSmallBlock = 64;
static_assert(sizeof(StagedWords<kStagedWordsPerLaunch>) + sizeof(std::int32_t*) <= 4096,
              "kernel parameters are limited to 4 KB");

template <std::size_t Words>
__global__ void write_staged_words(const StagedWords<Words> staged, std::int32_t* dst) {
  for (int i = int(threadIdx.x); i < staged.count; i += int(blockDim.x)) dst[i] = staged.words[i];
}

template <std::size_t Words>
void launch_staged(const std::int32_t* host_words, std::size_t n, std::int32_t* dst, cudaStream_t stream) {
  StagedWords<Words> staged;
  staged.count = std::int32_t(n);
  std::copy(host_words, host_words + n, staged.words);
  write_staged_words<Words><<<1, 128, 0, stream>>>(staged, dst);
}

}  // namespace

void stage_words(const std::int32_t* host_words, std::size_t count, std::int32_t* device_dst, cudaStream_t stream,
                 const char* who) {
  for (std::size_t at = 0; at < count; at += kStagedWordsPerLaunch) {
    const std::size_t n = std::min(kStagedWordsPerLaunch, count - at);
    if (n <= kSmallBlock)
      launch_staged<kSmallBlock>(host_words + at, n, device_dst + at, stream);
    else
      launch_staged<kStagedWordsPerLaunch>(host_words + at, n, device_dst + at, stream);
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess)
      check_cuda(status, std::string(who) + ": stage host data");
  }
}

}  // namespace attnlab::cuda
