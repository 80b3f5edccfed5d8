// Small host data (sequence lengths today; FP8 scales and paged-KV tables later) written to device memory in the
// order of a stream, without a pinned buffer, a pageable copy or a host wait: the words travel inside the
// parameters of a tiny kernel, which the driver copies when the launch is enqueued. So the host buffer may be
// reused as soon as stage_words() returns, the write is ordered after every earlier kernel on the stream (none of
// which can still be reading the destination), and a graph captured around it replays the values it was
// captured with.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {

// Words per launch: kernel parameters are limited to 4 KB (with the pointer and the count beside them).
inline constexpr std::size_t kStagedWordsPerLaunch = 1000;

// Writes host_words[0, count) to device_dst[0, count) on `stream`: ceil(count / kStagedWordsPerLaunch) launches of
// one small block each. Throws Error(device_error) naming `who` when a launch fails.
void stage_words(const std::int32_t* host_words, std::size_t count, std::int32_t* device_dst, cudaStream_t stream,
                 const char* who);

}  // namespace attnlab::cuda
