// The C ABI's versioned structs: struct_size set by the init functions (which write only the size they are given),
// every known layout accepted with the fields it lacks at their defaults (an ABI 2 caller gets no FP8 scales), a
// size of no known layout (0, larger than the library's, anything else) refused with the reason, options NULL as the
// defaults, the workspace fields, and the FP8 structs' versioning.
#include "attnlab/attnlab.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "capi_util.h"
#include "harness.h"

namespace attnlab_test {
namespace {

// An older caller's struct is smaller: init writes exactly the size it is given, and refuses a size of no layout.
// The struct lives in a larger buffer of 0xab bytes, read back with memcpy.
struct InitBuffer {
  alignas(attnlab_backward_args) unsigned char bytes[sizeof(attnlab_backward_args) + 32];
  InitBuffer() { std::memset(bytes, 0xab, sizeof bytes); }
  template <class S>
  S* as() { return reinterpret_cast<S*>(bytes); }
  template <class S>
  S read(std::size_t size) const {
    S s;
    std::memset(&s, 0, sizeof s);
    std::memcpy(&s, bytes, size);
    return s;
  }
  // The first byte past `size` that is no longer 0xab, or sizeof bytes.
  std::size_t written_past(std::size_t size) const {
    for (std::size_t i = size; i < sizeof bytes; ++i)
      if (bytes[i] != 0xab) return i;
    return sizeof bytes;
  }
};

TEST(CApiAbi, InitWritesOnlyTheGivenSize) {
  for (std::size_t size : {kForwardAbi1, kForwardAbi2, sizeof(attnlab_forward_args)}) {
    InitBuffer buf;
    ASSERT_EQ(attnlab_forward_args_init_sized(buf.as<attnlab_forward_args>(), size), ATTNLAB_OK)
        << attnlab_last_error();
    const auto a = buf.read<attnlab_forward_args>(size);
    EXPECT_EQ(a.struct_size, size);
    EXPECT_TRUE(is_absent(a.q) && is_absent(a.lse));
    EXPECT_EQ(a.options, nullptr);
    EXPECT_EQ(buf.written_past(size), sizeof buf.bytes) << "init of " << size << " bytes wrote past them";
  }
  for (std::size_t size : {kBackwardAbi1, kBackwardAbi2, sizeof(attnlab_backward_args)}) {
    InitBuffer buf;
    ASSERT_EQ(attnlab_backward_args_init_sized(buf.as<attnlab_backward_args>(), size), ATTNLAB_OK)
        << attnlab_last_error();
    const auto a = buf.read<attnlab_backward_args>(size);
    EXPECT_EQ(a.struct_size, size);
    EXPECT_TRUE(is_absent(a.q) && is_absent(a.dv));
    EXPECT_EQ(a.options, nullptr);
    EXPECT_EQ(buf.written_past(size), sizeof buf.bytes) << "init of " << size << " bytes wrote past them";
  }

  InitBuffer buf;
  EXPECT_EQ(attnlab_forward_args_init_sized(buf.as<attnlab_forward_args>(), kForwardAbi1 + 8),
            ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error())
                .find("attnlab_forward_args_init_sized: struct_size = " + std::to_string(kForwardAbi1 + 8) +
                      " is the size of no attnlab_forward_args layout this library knows (ABI 1: " +
                      std::to_string(kForwardAbi1) + ", ABI 2: " + std::to_string(kForwardAbi2) +
                      ", ABI 3: " + std::to_string(sizeof(attnlab_forward_args)) + ")"),
            std::string::npos)
      << attnlab_last_error();
  EXPECT_EQ(buf.read<attnlab_forward_args>(sizeof(std::size_t)).struct_size, kForwardAbi1 + 8)
      << "a refused size is still recorded, so that a call with the struct is refused too";
  EXPECT_EQ(buf.written_past(sizeof(std::size_t)), sizeof buf.bytes) << "a refused init wrote past struct_size";

  EXPECT_EQ(attnlab_options_init_sized(buf.as<attnlab_options>(), sizeof(attnlab_options) + 8),
            ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error())
                .find("struct_size = " + std::to_string(sizeof(attnlab_options) + 8) + " is larger than this library's " +
                      std::to_string(sizeof(attnlab_options))),
            std::string::npos)
      << attnlab_last_error();
  InitBuffer small;
  EXPECT_EQ(attnlab_options_init_sized(small.as<attnlab_options>(), 4), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_EQ(small.written_past(0), sizeof small.bytes) << "a size below struct_size's own must write nothing";
}

TEST(CApiAbi, AbiVersion) {
  EXPECT_EQ(attnlab_abi_version(), ATTNLAB_ABI_VERSION);
  EXPECT_GE(ATTNLAB_ABI_VERSION, 3);
}

// ---------------------------------------------------------------------------------------------------------------
// struct_size: every known layout accepted with the missing fields defaulted, anything else refused
// ---------------------------------------------------------------------------------------------------------------
class CApiAbiCalls : public CApiCalls {};

TEST_F(CApiAbiCalls, StructSizeNotSetRefused) {
  const auto o_before = t_.o.snapshot();
  CForward a = to_c(forward_args(c_, t_));
  a.args.struct_size = 0;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_forward: attnlab_forward_args.struct_size was not set (it is 0): initialise the "
                        "struct with attnlab_forward_args_init"));
  size_t bytes = 0;
  EXPECT_EQ(attnlab_forward_workspace_size(cc_.ctx, &a.args, &bytes), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_forward_workspace_size: attnlab_forward_args.struct_size was not set"));
  a = to_c(forward_args(c_, t_));
  a.options.struct_size = 0;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_forward: args->options: attnlab_options.struct_size was not set (it is 0): "
                        "initialise the struct with attnlab_options_init"));
  GradTensors g = make_grads(c_, rng_);
  CBackward b = to_c(backward_args(c_, t_, g));
  b.args.struct_size = 0;
  EXPECT_EQ(run_backward(b.args), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_backward: attnlab_backward_args.struct_size was not set (it is 0): initialise the "
                        "struct with attnlab_backward_args_init"));
  EXPECT_TRUE(t_.o.same_bytes(o_before)) << "a refused call wrote O";
}

// A caller compiled against a newer header: its struct is larger (the bytes past ours exist, so nothing here reads
// out of bounds even if the library did read them).
TEST_F(CApiAbiCalls, LargerStructSizeRefused) {
  const auto o_before = t_.o.snapshot();
  struct Newer {
    attnlab_forward_args args;
    unsigned char added_fields[64];
  } newer;
  std::memset(&newer, 0, sizeof newer);
  CForward a = to_c(forward_args(c_, t_));
  newer.args = a.args;
  newer.args.struct_size = sizeof newer;
  EXPECT_EQ(run(newer.args), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_forward: attnlab_forward_args.struct_size = " + std::to_string(sizeof newer) +
                        " is larger than this library's " + std::to_string(sizeof(attnlab_forward_args)) +
                        ": the caller was compiled against a newer attnlab.h than this library's (ABI " +
                        std::to_string(ATTNLAB_ABI_VERSION) + "); use a library at least as new as that header"));
  struct NewerOptions {
    attnlab_options options;
    unsigned char added_fields[64];
  } newer_options;
  std::memset(&newer_options, 0, sizeof newer_options);
  newer_options.options = a.options;
  newer_options.options.struct_size = sizeof newer_options;
  a.args.options = &newer_options.options;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("args->options: attnlab_options.struct_size = " + std::to_string(sizeof newer_options) +
                        " is larger than this library's " + std::to_string(sizeof(attnlab_options))));
  // The first field of a struct from before struct_size existed was a pointer: not mistaken for a newer layout.
  a = to_c(forward_args(c_, t_));
  a.args.struct_size = reinterpret_cast<std::uintptr_t>(t_.q.data());
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has(" is no struct size: initialise the struct with attnlab_forward_args_init"));
  EXPECT_TRUE(t_.o.same_bytes(o_before)) << "a refused call wrote O";
}

TEST_F(CApiAbiCalls, UnknownSmallerStructSizeRefused) {
  CForward a = to_c(forward_args(c_, t_));
  for (std::size_t size : {std::size_t(8), kForwardAbi1 - 8, kForwardAbi1 + 8}) {
    a.args.struct_size = size;
    EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
    EXPECT_TRUE(error_has("attnlab_forward_args.struct_size = " + std::to_string(size) +
                          " is the size of no attnlab_forward_args layout this library knows (ABI 1: " +
                          std::to_string(kForwardAbi1) + ", ABI 2: " + std::to_string(kForwardAbi2) + ", ABI 3: " +
                          std::to_string(sizeof(attnlab_forward_args)) +
                          "): initialise the struct with attnlab_forward_args_init"));
  }
  a = to_c(forward_args(c_, t_));
  a.options.struct_size = sizeof(attnlab_options) - 8;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("is the size of no attnlab_options layout this library knows (ABI 1: " +
                        std::to_string(sizeof(attnlab_options)) + ")"));
}

// An ABI 1 caller's args end after `options`: accepted, with no workspace whatever the bytes past its struct hold.
TEST_F(CApiAbiCalls, OlderLayoutAcceptedWithDefaults) {
  CForward a = to_c(forward_args(c_, t_));
  a.options.path = "cpu-naive";
  ASSERT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();
  const auto o_now = t_.o.snapshot();
  t_.o.poison();
  // In a buffer as large as today's struct, the bytes past layout 1 ask for an invalid workspace (NULL data with
  // bytes); read, they would fail the call.
  attnlab_forward_args older = a.args;
  older.struct_size = kForwardAbi1;
  older.has_workspace = 1, older.workspace = nullptr, older.workspace_bytes = 64;
  ASSERT_EQ(run(older), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_now)) << "the ABI 1 call differs from today's";
  // Exactly layout 1's bytes on the heap, so that a read past them is a read past the allocation.
  t_.o.poison();
  std::vector<unsigned char> exact(kForwardAbi1);
  std::memcpy(exact.data(), &older, kForwardAbi1);
  ASSERT_EQ(attnlab_forward(cc_.ctx, reinterpret_cast<const attnlab_forward_args*>(exact.data()), nullptr, 0),
            ATTNLAB_OK)
      << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_now));

  GradTensors g = make_grads(c_, rng_);
  CBackward b = to_c(backward_args(c_, t_, g));
  ASSERT_EQ(run_backward(b.args), ATTNLAB_OK) << attnlab_last_error();
  const auto dq = g.dq.snapshot();
  g.dq.poison();
  attnlab_backward_args older_b = b.args;
  older_b.struct_size = kBackwardAbi1;
  older_b.has_workspace = 1, older_b.workspace = nullptr, older_b.workspace_bytes = 64;
  ASSERT_EQ(run_backward(older_b), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_TRUE(g.dq.same_bytes(dq));
  older_b.struct_size = sizeof older_b;  // today's layout reads those fields
  EXPECT_EQ(run_backward(older_b), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("workspace.data is null but workspace.bytes = 64"));
}

// An ABI 2 caller's args end after workspace_bytes: accepted with no FP8 scales, whatever lies past its struct.
TEST_F(CApiAbiCalls, Abi2LayoutAcceptedWithoutFp8) {
  CForward a = to_c(forward_args(c_, t_));
  a.options.path = "cpu-naive";
  ASSERT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();
  const auto o_now = t_.o.snapshot();
  t_.o.poison();
  // Past layout 2: scales whose struct_size is unset; read, they would fail the call.
  attnlab_fp8_forward_scales unset;
  std::memset(&unset, 0, sizeof unset);
  attnlab_forward_args abi2 = a.args;
  abi2.struct_size = kForwardAbi2;
  abi2.fp8 = &unset;
  ASSERT_EQ(run(abi2), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_now)) << "the ABI 2 call differs from today's";
  t_.o.poison();
  std::vector<unsigned char> exact(kForwardAbi2);  // a read past layout 2 is a read past the allocation
  std::memcpy(exact.data(), &abi2, kForwardAbi2);
  ASSERT_EQ(attnlab_forward(cc_.ctx, reinterpret_cast<const attnlab_forward_args*>(exact.data()), nullptr, 0),
            ATTNLAB_OK)
      << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_now));
  abi2.struct_size = sizeof abi2;  // today's layout reads the pointer
  EXPECT_EQ(run(abi2), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_forward: args->fp8: attnlab_fp8_forward_scales.struct_size was not set (it is 0): "
                        "initialise the struct with attnlab_fp8_forward_scales_init"));

  GradTensors g = make_grads(c_, rng_);
  CBackward b = to_c(backward_args(c_, t_, g));
  ASSERT_EQ(run_backward(b.args), ATTNLAB_OK) << attnlab_last_error();
  const auto dq = g.dq.snapshot();
  g.dq.poison();
  attnlab_fp8_backward_scales unset_b;
  std::memset(&unset_b, 0, sizeof unset_b);
  attnlab_backward_args abi2_b = b.args;
  abi2_b.struct_size = kBackwardAbi2;
  abi2_b.fp8 = &unset_b;
  ASSERT_EQ(run_backward(abi2_b), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_TRUE(g.dq.same_bytes(dq));
  abi2_b.struct_size = sizeof abi2_b;
  EXPECT_EQ(run_backward(abi2_b), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("attnlab_backward: args->fp8: attnlab_fp8_backward_scales.struct_size was not set"));
}

// The FP8 structs are versioned like the others: init writes exactly the size it is given, unknown sizes refused.
TEST(CApiAbi, Fp8StructsVersioned) {
  InitBuffer buf;
  ASSERT_EQ(attnlab_fp8_forward_scales_init_sized(buf.as<attnlab_fp8_forward_scales>(),
                                                  sizeof(attnlab_fp8_forward_scales)),
            ATTNLAB_OK);
  EXPECT_EQ(buf.written_past(sizeof(attnlab_fp8_forward_scales)), sizeof buf.bytes);
  const auto f = buf.read<attnlab_fp8_forward_scales>(sizeof(attnlab_fp8_forward_scales));
  EXPECT_EQ(f.struct_size, sizeof f);
  EXPECT_TRUE(f.descale_q == nullptr && f.scale_s == nullptr && f.amax_o == nullptr);
  InitBuffer bwd;
  ASSERT_EQ(attnlab_fp8_backward_scales_init_sized(bwd.as<attnlab_fp8_backward_scales>(),
                                                   sizeof(attnlab_fp8_backward_scales)),
            ATTNLAB_OK);
  EXPECT_EQ(bwd.written_past(sizeof(attnlab_fp8_backward_scales)), sizeof bwd.bytes);
  InitBuffer rec;
  ASSERT_EQ(attnlab_delayed_scaling_recipe_init_sized(rec.as<attnlab_delayed_scaling_recipe>(),
                                                      sizeof(attnlab_delayed_scaling_recipe)),
            ATTNLAB_OK);
  EXPECT_EQ(rec.written_past(sizeof(attnlab_delayed_scaling_recipe)), sizeof rec.bytes);
  const auto r = rec.read<attnlab_delayed_scaling_recipe>(sizeof(attnlab_delayed_scaling_recipe));
  EXPECT_EQ(r.margin, 0);
  EXPECT_EQ(r.format, ATTNLAB_FP8_FORMAT_HYBRID);
  EXPECT_EQ(r.amax_history_len, 1024);
  EXPECT_EQ(r.amax_compute_algo, ATTNLAB_AMAX_MAX);

  InitBuffer bad;
  EXPECT_EQ(attnlab_fp8_forward_scales_init_sized(bad.as<attnlab_fp8_forward_scales>(), 40),
            ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error())
                .find("struct_size = 40 is the size of no attnlab_fp8_forward_scales layout this library knows "
                      "(ABI 3: " + std::to_string(sizeof(attnlab_fp8_forward_scales)) + ")"),
            std::string::npos)
      << attnlab_last_error();
  EXPECT_EQ(attnlab_delayed_scaling_recipe_init_sized(bad.as<attnlab_delayed_scaling_recipe>(), 64),
            ATTNLAB_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnlab_last_error()).find("is larger than this library's"), std::string::npos)
      << attnlab_last_error();
}

TEST_F(CApiAbiCalls, NullOptionsAreTheDefaults) {
  attnlab::Context ctx;
  const attnlab::RunInfo info = attnlab::forward(ctx, forward_args(c_, t_));  // c_ sets no option
  const auto o_cpp = t_.o.snapshot(), lse_cpp = t_.lse.snapshot();
  t_.o.poison();
  t_.lse.poison();
  CForward a = to_c(forward_args(c_, t_));
  a.args.options = nullptr;
  char ran[32];
  ASSERT_EQ(run(a, ran, sizeof ran), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(std::string(ran), info.path) << "NULL options: path auto";
  EXPECT_TRUE(t_.o.same_bytes(o_cpp)) << "NULL options differ from the C++ defaults";
  EXPECT_TRUE(t_.lse.same_bytes(lse_cpp));
  a.options.causal = 1;  // not pointed at: must not matter
  ASSERT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_TRUE(t_.o.same_bytes(o_cpp));
  GradTensors g = make_grads(c_, rng_);
  CBackward b = to_c(backward_args(c_, t_, g));
  b.args.options = nullptr;
  EXPECT_EQ(run_backward(b.args), ATTNLAB_OK) << attnlab_last_error();
}

// has_workspace != 0 gives the call workspace {workspace, workspace_bytes}; 0 gives none, whatever the other two.
TEST_F(CApiAbiCalls, WorkspaceMapping) {
  CForward a = to_c(forward_args(c_, t_));
  a.args.has_workspace = 0, a.args.workspace = nullptr, a.args.workspace_bytes = 64;
  EXPECT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();
  a.args.has_workspace = 1;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("workspace.data is null but workspace.bytes = 64"));
  alignas(256) static unsigned char block[1024];
  a.args.workspace = block + 16, a.args.workspace_bytes = 512;
  EXPECT_EQ(run(a), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("workspace.data must be 256-byte aligned"));

  // The size the call needs, as the C++ API says; a workspace that large is accepted.
  a.args.workspace = block, a.args.workspace_bytes = sizeof block;
  size_t bytes = 12345;
  ASSERT_EQ(attnlab_forward_workspace_size(cc_.ctx, &a.args, &bytes), ATTNLAB_OK) << attnlab_last_error();
  attnlab::Context ctx;
  EXPECT_EQ(bytes, attnlab::workspace_size(ctx, forward_args(c_, t_)));
  ASSERT_LE(bytes, sizeof block);
  EXPECT_EQ(run(a), ATTNLAB_OK) << attnlab_last_error();

  GradTensors g = make_grads(c_, rng_);
  CBackward b = to_c(backward_args(c_, t_, g));
  b.args.has_workspace = 1, b.args.workspace = nullptr, b.args.workspace_bytes = 64;
  EXPECT_EQ(run_backward(b.args), ATTNLAB_INVALID_ARGUMENT);
  EXPECT_TRUE(error_has("workspace.data is null but workspace.bytes = 64"));
  b.args.has_workspace = 0;
  EXPECT_EQ(run_backward(b.args), ATTNLAB_OK) << attnlab_last_error();
  bytes = 12345;
  ASSERT_EQ(attnlab_backward_workspace_size(cc_.ctx, &b.args, &bytes), ATTNLAB_OK) << attnlab_last_error();
  EXPECT_EQ(bytes, attnlab::workspace_size(ctx, backward_args(c_, t_, g)));
  // The C++ side's workspace reaches the C args (the round-trip helpers carry it).
  attnlab::ForwardArgs with = forward_args(c_, t_);
  with.workspace = attnlab::DeviceBuffer{block, sizeof block};
  const CForward c = to_c(with);
  EXPECT_EQ(c.args.has_workspace, 1);
  EXPECT_EQ(c.args.workspace, static_cast<void*>(block));
  EXPECT_EQ(run(c), ATTNLAB_OK) << attnlab_last_error();
}

}  // namespace
}  // namespace attnlab_test
