#include "cuda/fp8/recipe_kernels.h"

#include <cuda_runtime.h>

#include <cfloat>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda::fp8 {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) init_kernel(float* state, int blocks, int block_floats) {
  float* block = state + static_cast<long long>(blockIdx.x) * block_floats;
  for (int i = static_cast<int>(threadIdx.x); i < block_floats; i += kThreads)
    block[i] = i == kScaleSlot || i == kScaleInvSlot ? 1.0f : 0.0f;
}

// One block per tensor. The order is the host reference's: the amax over the whole history (staging slot included)
// first, then the roll, then the scale from the previous one.
__global__ void __launch_bounds__(kThreads) update_kernel(const RecipeUpdate u) {
  float* block = u.first + static_cast<long long>(blockIdx.x) * u.block_floats;
  float* h = block + kHistorySlot;
  const int L = u.history_len;
  const int tid = static_cast<int>(threadIdx.x);
  const float staging = h[0];  // read by every thread before the barrier below, written only after it

  // Step 2, "max": the reference's max starts at 0 and turns NaN at the first NaN entry. Without NaN that is
  // fmaxf over the entries and 0 (equal up to the sign of a zero, which the scale never sees: it keeps the
  // previous scale for ±0 alike).
  __shared__ float warp_max[kThreads / 32];
  float m = 0.0f;
  int saw_nan = 0;
  if (!u.most_recent) {
    for (int i = tid; i < L; i += kThreads) {
      const float a = h[i];
      if (isnan(a)) saw_nan = 1;
      else m = fmaxf(m, a);
    }
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (tid % 32 == 0) warp_max[tid / 32] = m;
  }
  saw_nan = __syncthreads_or(saw_nan);  // also the barrier between the reads above and the roll's writes

  // Step 3: roll left by one. Slots 1 .. L−2 take their right neighbour, in chunks of one block: each chunk reads
  // slots the earlier chunks did not write, then writes after everyone has read.
  for (int chunk = 1; chunk < L - 1; chunk += kThreads) {
    const int i = chunk + tid;
    const float next = i < L - 1 ? h[i + 1] : 0.0f;
    __syncthreads();
    if (i < L - 1) h[i] = next;
    __syncthreads();
  }

  if (tid == 0) {
    float amax = staging;
    if (!u.most_recent) {
      amax = 0.0f;
      for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
      if (saw_nan) amax = __int_as_float(0x7fc00000);
    }
    // The newest amax to the end, the staging slot cleared for the next step (with L = 1, only the clear).
    if (L > 1) h[L - 1] = staging;
    h[0] = 0.0f;
    // Step 4, with the reference's roundings: (fp8_max / amax) / 2^margin, each division rounded once.
    float scale = block[kScaleSlot];
    if (isfinite(amax) && amax > 0.0f) scale = __fdiv_rn(__fdiv_rn(u.fp8_max[blockIdx.x], amax), u.margin_divisor);
    if (isinf(scale)) scale = FLT_MAX;
    if (scale > u.scale_max[blockIdx.x]) scale = u.scale_max[blockIdx.x];
    block[kScaleSlot] = scale;
    block[kScaleInvSlot] = __fdiv_rn(1.0f, scale);
  }
}

}  // namespace

float* allocate_state(int device, std::size_t floats) {
  device_properties(device);  // no usable GPU: Error(unsupported); a bad index: invalid_argument
  DeviceGuard guard(device);
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, floats * sizeof(float)), "DelayedScaling: cudaMalloc of the recipe state");
  return static_cast<float*>(p);
}

void free_state(int device, float* state) noexcept {
  if (state == nullptr) return;
  on_device_quietly(device, [&] { cudaFree(state); });
}

void init_state(int device, float* state, int blocks, int block_floats, void* stream) {
  DeviceGuard guard(device);
  init_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(state, blocks, block_floats);
  check_launch("DelayedScaling: init kernel launch");
}

void update_state(int device, const RecipeUpdate& update, void* stream) {
  DeviceGuard guard(device);
  update_kernel<<<kTensorsPerPass, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(update);
  check_launch("DelayedScaling::update: kernel launch");
}

void read_state(int device, const float* state, std::size_t floats, float* host, void* stream) {
  DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  check_cuda(cudaMemcpyAsync(host, state, floats * sizeof(float), cudaMemcpyDeviceToHost, s),
             "DelayedScaling::read: cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(s), "DelayedScaling::read: cudaStreamSynchronize");
}

}  // namespace attnlab::cuda::fp8
