// Helpers of the C ABI tests (test_capi, test_capi_abi): the C structs of a C++ call, a C context, and a fixture
// with one small case.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "attnlab/attnlab.h"
#include "harness.h"

namespace attnlab_test {

inline attnlab_tensor to_c(const TensorView& t) {
  attnlab_tensor c;
  std::memset(&c, 0, sizeof c);
  c.data = t.data;
  c.dtype = int32_t(t.dtype);
  c.device = int32_t(t.device);
  c.device_index = t.device_index;
  c.rank = t.rank;
  for (int d = 0; d < 4; ++d) {
    c.shape[d] = t.shape[d];
    c.strides[d] = t.strides[d];
  }
  return c;
}

// The sizes of the ABI 1 layouts: everything up to and including the options pointer (8-byte aligned already).
constexpr std::size_t kForwardAbi1 = offsetof(attnlab_forward_args, options) + sizeof(const attnlab_options*);
constexpr std::size_t kBackwardAbi1 = offsetof(attnlab_backward_args, options) + sizeof(const attnlab_options*);
static_assert(kForwardAbi1 % alignof(attnlab_forward_args) == 0 && kBackwardAbi1 % alignof(attnlab_backward_args) == 0,
              "a layout's size includes its tail padding");
// ABI 2: up to and including workspace_bytes.
constexpr std::size_t kForwardAbi2 = offsetof(attnlab_forward_args, workspace_bytes) + sizeof(size_t);
constexpr std::size_t kBackwardAbi2 = offsetof(attnlab_backward_args, workspace_bytes) + sizeof(size_t);
static_assert(kForwardAbi2 % alignof(attnlab_forward_args) == 0 && kBackwardAbi2 % alignof(attnlab_backward_args) == 0,
              "a layout's size includes its tail padding");

// The FP8 scales struct of a C call's args.
template <class CArgs>
using CFp8Scales = std::conditional_t<std::is_same_v<CArgs, attnlab_forward_args>, attnlab_fp8_forward_scales,
                                      attnlab_fp8_backward_scales>;

// One C call's structs: args.options points at `options`, options.path at `path`, args.fp8 (when set) at `fp8`; a
// copy points at its own.
template <class CArgs>
struct CCall {
  attnlab_options options;
  CArgs args;
  std::string path;
  CFp8Scales<CArgs> fp8;

  CCall() = default;
  CCall(const CCall& other) { *this = other; }
  CCall& operator=(const CCall& other) {
    options = other.options, args = other.args, path = other.path, fp8 = other.fp8;
    if (other.args.options == &other.options) args.options = &options;
    if (other.options.path == other.path.c_str()) options.path = path.c_str();
    if (other.args.fp8 == &other.fp8) args.fp8 = &fp8;
    return *this;
  }
};
using CForward = CCall<attnlab_forward_args>;
using CBackward = CCall<attnlab_backward_args>;

// Fills C options from C++ options.
template <class CArgs>
inline void to_c(const attnlab::Options& o, CCall<CArgs>& c) {
  EXPECT_EQ(attnlab_options_init(&c.options), ATTNLAB_OK) << attnlab_last_error();
  c.options.has_scale = o.scale.has_value();
  c.options.scale = o.scale.value_or(0.0f);
  c.options.softcap = o.softcap;
  c.options.causal = o.mask.causal;
  c.options.mask_align = o.mask.align == attnlab::MaskAlign::bottom_right ? ATTNLAB_BOTTOM_RIGHT : ATTNLAB_TOP_LEFT;
  c.options.window_left = o.mask.window_left;
  c.options.window_right = o.mask.window_right;
  c.options.q_seqlens = to_c(o.q_seqlens);
  c.options.kv_seqlens = to_c(o.kv_seqlens);
  c.options.bias = to_c(o.bias);
  c.options.bool_mask = to_c(o.bool_mask);
  c.path = o.path;
  c.options.path = c.path.c_str();
  c.args.options = &c.options;
}

template <class CArgs>
inline void workspace_to_c(const std::optional<attnlab::DeviceBuffer>& w, CArgs& c) {
  c.has_workspace = w.has_value();
  c.workspace = w ? w->data : nullptr;
  c.workspace_bytes = w ? w->bytes : 0;
}

inline void fp8_to_c(const attnlab::Fp8ForwardScales& f, attnlab_fp8_forward_scales& c) {
  EXPECT_EQ(attnlab_fp8_forward_scales_init(&c), ATTNLAB_OK) << attnlab_last_error();
  c.descale_q = f.descale_q, c.descale_k = f.descale_k, c.descale_v = f.descale_v;
  c.scale_s = f.scale_s, c.descale_s = f.descale_s, c.amax_s = f.amax_s, c.scale_o = f.scale_o, c.amax_o = f.amax_o;
}

inline void fp8_to_c(const attnlab::Fp8BackwardScales& f, attnlab_fp8_backward_scales& c) {
  EXPECT_EQ(attnlab_fp8_backward_scales_init(&c), ATTNLAB_OK) << attnlab_last_error();
  c.descale_q = f.descale_q, c.descale_k = f.descale_k, c.descale_v = f.descale_v, c.descale_o = f.descale_o;
  c.descale_do = f.descale_do, c.scale_s = f.scale_s, c.descale_s = f.descale_s;
  c.scale_dp = f.scale_dp, c.descale_dp = f.descale_dp;
  c.scale_dq = f.scale_dq, c.scale_dk = f.scale_dk, c.scale_dv = f.scale_dv;
  c.amax_dp = f.amax_dp, c.amax_dq = f.amax_dq, c.amax_dk = f.amax_dk, c.amax_dv = f.amax_dv;
}

template <class CArgs, class Scales>
inline void fp8_to_c(const std::optional<Scales>& f, CCall<CArgs>& c) {
  if (!f) return;
  fp8_to_c(*f, c.fp8);
  c.args.fp8 = &c.fp8;
}

inline CForward to_c(const attnlab::ForwardArgs& a) {
  CForward c;
  EXPECT_EQ(attnlab_forward_args_init(&c.args), ATTNLAB_OK) << attnlab_last_error();
  c.args.q = to_c(a.q), c.args.k = to_c(a.k), c.args.v = to_c(a.v), c.args.o = to_c(a.o), c.args.lse = to_c(a.lse);
  to_c(a.options, c);
  workspace_to_c(a.workspace, c.args);
  fp8_to_c(a.fp8, c);
  return c;
}

inline CBackward to_c(const attnlab::BackwardArgs& a) {
  CBackward c;
  EXPECT_EQ(attnlab_backward_args_init(&c.args), ATTNLAB_OK) << attnlab_last_error();
  c.args.q = to_c(a.q), c.args.k = to_c(a.k), c.args.v = to_c(a.v), c.args.o = to_c(a.o);
  c.args.d_o = to_c(a.d_o), c.args.lse = to_c(a.lse);
  c.args.dq = to_c(a.dq), c.args.dk = to_c(a.dk), c.args.dv = to_c(a.dv);
  to_c(a.options, c);
  workspace_to_c(a.workspace, c.args);
  fp8_to_c(a.fp8, c);
  return c;
}

inline bool is_absent(const attnlab_tensor& t) { return t.data == nullptr && t.rank == 0; }

struct CContext {
  attnlab_context* ctx = nullptr;
  CContext() { EXPECT_EQ(attnlab_context_create(&ctx), ATTNLAB_OK) << attnlab_last_error(); }
  ~CContext() { attnlab_context_destroy(ctx); }
};

// One small case (B = 1, T = 5, S = 7, GQA 2:1) and a C context to call it in.
class CApiCalls : public ::testing::Test {
 protected:
  CApiCalls() : rng_(fresh_seed()) {
    c_.T = 5, c_.S = 7, c_.N = 2, c_.K = 1, c_.Hqk = 8, c_.Hv = 4;
    t_ = make_inputs(c_, rng_);
  }
  attnlab_status run(const attnlab_forward_args& a, char* ran = nullptr, size_t size = 0) {
    return attnlab_forward(cc_.ctx, &a, ran, size);
  }
  attnlab_status run(const CForward& a, char* ran = nullptr, size_t size = 0) { return run(a.args, ran, size); }
  attnlab_status run_backward(const attnlab_backward_args& b) { return attnlab_backward(cc_.ctx, &b, nullptr, 0); }
  // The last error contains `fragment`.
  static ::testing::AssertionResult error_has(const std::string& fragment) {
    const std::string e = attnlab_last_error();
    if (e.find(fragment) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the last error\n  " << e << "\ndoes not contain\n  " << fragment;
  }
  Case c_;
  Rng rng_;
  Tensors t_;
  CContext cc_;
};

}  // namespace attnlab_test
