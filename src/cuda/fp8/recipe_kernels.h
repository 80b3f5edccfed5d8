// The GPU side of attnlab::DelayedScaling (include/attnlab/fp8.h): the state's one allocation, its initialization,
// the update step of one pass (one kernel for its five tensors) and the copy read() makes. The update is the host
// reference's step (src/core/delayed_scaling.h, DelayedScalingUpdate::reference) bit for bit.
//
// The state is kFp8TensorCount blocks of L + 2 floats, one per Fp8Tensor in its order (the CPU recipe keeps the same
// layout in host memory): [kScaleSlot] scale, [kScaleInvSlot] scale_inv, [kHistorySlot + i] amax history slot i, slot 0
// being the staging slot that quantize() and attention calls write.
#pragma once

#include <cfloat>
#include <cstddef>

namespace attnlab::cuda::fp8 {

inline constexpr int kScaleSlot = 0;
inline constexpr int kScaleInvSlot = 1;
inline constexpr int kHistorySlot = 2;
inline constexpr int kTensorsPerPass = 5;

struct RecipeUpdate {
  float* first = nullptr;           // the block of the pass's first tensor; the other four follow it
  int block_floats = 0;             // L + 2
  int history_len = 0;              // L ≥ 1
  float fp8_max[kTensorsPerPass]{};  // per tensor: 448 (e4m3) or 57344 (e5m2)
  float margin_divisor = 1.0f;      // 2^margin, exact
  // Per tensor: the largest scale the step may set (FLT_MAX for none; fp8_max / 2^margin for P, see fp8.h).
  float scale_max[kTensorsPerPass]{FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
  bool most_recent = false;         // AmaxAlgorithm::most_recent: the staging slot; else the max of the history
};

// cudaMalloc of `floats` floats on `device`; Error(out_of_memory / device_error) when it fails.
float* allocate_state(int device, std::size_t floats);
// cudaFree on `device`; every error ignored (destructors call it).
void free_state(int device, float* state) noexcept;
// Scales and scale_invs 1, histories 0, for `blocks` blocks: one kernel on `stream` (a cudaStream_t).
void init_state(int device, float* state, int blocks, int block_floats, void* stream);
// One recipe step of a pass's five tensors: one kernel on `stream`.
void update_state(int device, const RecipeUpdate& update, void* stream);
// cudaMemcpyAsync of `floats` floats to host memory on `stream`, then cudaStreamSynchronize(stream).
void read_state(int device, const float* state, std::size_t floats, float* host, void* stream);

}  // namespace attnlab::cuda::fp8
