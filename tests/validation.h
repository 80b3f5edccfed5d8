// Shared fixture for the validation tests: a valid small problem (every optional tensor present), a way to break
// one rule at a time, and the check that a rejected call names the rule and touches no buffer.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"

namespace attnlab_test {

class ValidationTest : public ::testing::Test {
 protected:
  ValidationTest() : rng_(fresh_seed()) {
    c_.path = "auto";
    c_.B = 2, c_.T = 3, c_.S = 5, c_.N = 4, c_.K = 2, c_.Hqk = 8, c_.Hv = 6;
    c_.q_lens = {3, 2};
    c_.kv_lens = {5, 4};
    c_.bias = BiasKind::f32;
    t_ = make_inputs(c_, rng_);
    g_ = make_grads(c_, rng_);
    mask_ = HostTensor(DType::u8, {2, 4, 3, 5});
    for (std::int64_t i = 0; i < mask_.numel(); ++i) mask_.set(i, 1);
    const std::pair<HostTensor*, const char*> own[] = {
        {&t_.q, "q"},       {&t_.k, "k"},         {&t_.v, "v"},       {&t_.o, "o"},         {&t_.lse, "lse"},
        {&t_.q_lens, "q_seqlens"}, {&t_.kv_lens, "kv_seqlens"}, {&t_.bias, "bias"}, {&mask_, "bool_mask"},
        {&g_.d_o, "d_o"},   {&g_.dq, "dq"},       {&g_.dk, "dk"},     {&g_.dv, "dv"}};
    for (auto [t, name] : own) watch(*t, name);
  }

  // A valid forward call (bias, seqlens and lse present) and a valid backward call.
  attnlab::ForwardArgs forward_args_() const { return forward_args(c_, t_); }
  attnlab::BackwardArgs backward_args_() const { return backward_args(c_, t_, g_); }

  // Buffers whose bytes must survive a rejected call unchanged (the fixture's own are watched already).
  void watch(HostTensor& t, std::string name = "a test buffer") {
    watched_.push_back(&t);
    names_.push_back(std::move(name));
  }
  void unwatch_last() {
    watched_.pop_back();
    names_.pop_back();
  }

  // Runs `call`, expecting attnlab::Error with `code` and a message containing `rule`; then checks that no
  // watched buffer changed (outputs stay poisoned, inputs intact).
  void expect_rejected(const std::function<void()>& call, attnlab::ErrorCode code, const std::string& rule) {
    std::vector<std::vector<std::uint8_t>> before;
    for (HostTensor* t : watched_) before.push_back(t->snapshot());
    try {
      call();
      ADD_FAILURE() << "the call was accepted; expected a failure naming \"" << rule << "\"";
    } catch (const attnlab::Error& e) {
      EXPECT_EQ(int(e.code()), int(code)) << "message: " << e.what();
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos)
          << "the message should name the rule \"" << rule << "\"; got: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw something other than attnlab::Error: " << e.what();
    }
    for (std::size_t i = 0; i < watched_.size(); ++i)
      EXPECT_TRUE(watched_[i]->same_bytes(before[i])) << names_[i] << " was modified by a rejected call";
  }

  void reject_forward(const std::function<void(attnlab::ForwardArgs&)>& mutate, const std::string& rule,
                      attnlab::ErrorCode code = attnlab::ErrorCode::invalid_argument) {
    attnlab::ForwardArgs a = forward_args_();
    mutate(a);
    expect_rejected([&] { attnlab::forward(ctx_, a); }, code, rule);
  }

  void reject_backward(const std::function<void(attnlab::BackwardArgs&)>& mutate, const std::string& rule,
                       attnlab::ErrorCode code = attnlab::ErrorCode::invalid_argument) {
    attnlab::BackwardArgs a = backward_args_();
    mutate(a);
    expect_rejected([&] { attnlab::backward(ctx_, a); }, code, rule);
  }

  Case c_;
  Rng rng_;
  Tensors t_;
  GradTensors g_;
  HostTensor mask_;  // a valid (B, N, T, S) u8 mask, to swap in for the bias
  attnlab::Context ctx_;
  std::vector<HostTensor*> watched_;
  std::vector<std::string> names_;
};

// A view shifted by `bytes` (misaligned when bytes is not a multiple of the element size).
inline TensorView shifted(TensorView t, std::ptrdiff_t bytes) {
  t.data = static_cast<char*>(t.data) + bytes;
  return t;
}

}  // namespace attnlab_test
