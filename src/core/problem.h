// A validated attention problem: the user's arguments after every precondition of docs/design.md §2 was checked, with
// the dimensions named and the defaults (scale) resolved. Paths receive only Problems, never raw arguments.
#pragma once

#include <cstdint>
#include <optional>

#include "attnlab/attention.h"

namespace attnlab::core {

struct Dims {
  std::int64_t B = 0;    // batch
  std::int64_t T = 0;    // query length
  std::int64_t S = 0;    // key/value length
  std::int64_t N = 0;    // query heads
  std::int64_t K = 0;    // key/value heads (N % K == 0)
  std::int64_t Hqk = 0;  // head dim of Q and K
  std::int64_t Hv = 0;   // head dim of V and O
  std::int64_t group() const { return N / K; }  // query heads per KV head
};

enum class Direction : std::uint8_t { forward, backward };

struct Problem {
  Direction direction = Direction::forward;
  Dims dims;
  DType dtype = DType::f32;  // dtype of q, k, v (and of o, d_o, dq, dk, dv unless FP8: see their views)
  Device device = Device::cpu;
  int device_index = 0;

  TensorView q, k, v, o, lse;   // lse may be empty in forward
  TensorView d_o, dq, dk, dv;   // backward only

  float scale = 1.0f;
  float softcap = 0.0f;
  MaskOptions mask;
  TensorView q_seqlens, kv_seqlens;  // empty when absent
  TensorView bias, bool_mask;        // empty when absent

  // Scratch memory the caller lent to this call (validated: 256-byte aligned), or nullopt: the context's serves.
  std::optional<DeviceBuffer> workspace;
  // FP8 calls only (dtype e4m3 / e5m2): the call's scales, validated to hold every pointer the call needs.
  std::optional<Fp8ForwardScales> fp8_forward;
  std::optional<Fp8BackwardScales> fp8_backward;
  // The tuning of the call's context (Tuning::from_environment() for a context-free why_not); never null once
  // dispatch hands the problem to a path.
  const Tuning* tuning = nullptr;

  bool fp8() const { return dtype == DType::e4m3 || dtype == DType::e5m2; }
  bool has_lse() const { return !lse.empty(); }
  bool has_seqlens() const { return !q_seqlens.empty() || !kv_seqlens.empty(); }
  // Length of batch b's queries / keys (T / S without per-batch lengths). Host seqlens only.
  std::int64_t q_len(std::int64_t b) const;
  std::int64_t kv_len(std::int64_t b) const;
};

}  // namespace attnlab::core
