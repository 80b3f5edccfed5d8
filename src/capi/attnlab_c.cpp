// The C ABI (attnlab.h): plain structs in, attnlab::forward / backward / list_paths and the FP8 helpers (fp8.h)
// behind, status codes out.
//
// No exception crosses this boundary: every entry point runs its body inside guarded(), which maps
// attnlab::Error to its code, std::bad_alloc to ATTNLAB_OUT_OF_MEMORY and anything else to ATTNLAB_INTERNAL, and
// records the message for attnlab_last_error(). A call that succeeds clears the message.
//
// Versioned structs are read through capi::accept() (convert.h), which knows every released layout's size.
#include "attnlab/attnlab.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/fp8.h"
#include "attnlab/version.h"
#include "attnlab/serving.h"
#include "capi/convert.h"
#include "capi/convert_serving.h"
#include "core/error.h"

// The C enums are the C++ enums' values; the conversions below rely on it.
#define ATTNLAB_SAME_VALUE(c_value, cxx_value) \
  static_assert(static_cast<long long>(c_value) == static_cast<long long>(cxx_value), #c_value " != " #cxx_value)
ATTNLAB_SAME_VALUE(ATTNLAB_OK, attnlab::ErrorCode::ok);
ATTNLAB_SAME_VALUE(ATTNLAB_INVALID_ARGUMENT, attnlab::ErrorCode::invalid_argument);
ATTNLAB_SAME_VALUE(ATTNLAB_UNSUPPORTED, attnlab::ErrorCode::unsupported);
ATTNLAB_SAME_VALUE(ATTNLAB_OUT_OF_MEMORY, attnlab::ErrorCode::out_of_memory);
ATTNLAB_SAME_VALUE(ATTNLAB_DEVICE_ERROR, attnlab::ErrorCode::device_error);
ATTNLAB_SAME_VALUE(ATTNLAB_INTERNAL, attnlab::ErrorCode::internal);
ATTNLAB_SAME_VALUE(ATTNLAB_F32, attnlab::DType::f32);
ATTNLAB_SAME_VALUE(ATTNLAB_F16, attnlab::DType::f16);
ATTNLAB_SAME_VALUE(ATTNLAB_BF16, attnlab::DType::bf16);
ATTNLAB_SAME_VALUE(ATTNLAB_E4M3, attnlab::DType::e4m3);
ATTNLAB_SAME_VALUE(ATTNLAB_E5M2, attnlab::DType::e5m2);
ATTNLAB_SAME_VALUE(ATTNLAB_I32, attnlab::DType::i32);
ATTNLAB_SAME_VALUE(ATTNLAB_U8, attnlab::DType::u8);
ATTNLAB_SAME_VALUE(ATTNLAB_CPU, attnlab::Device::cpu);
ATTNLAB_SAME_VALUE(ATTNLAB_CUDA, attnlab::Device::cuda);
ATTNLAB_SAME_VALUE(ATTNLAB_TOP_LEFT, attnlab::MaskAlign::top_left);
ATTNLAB_SAME_VALUE(ATTNLAB_BOTTOM_RIGHT, attnlab::MaskAlign::bottom_right);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_FORMAT_E4M3, attnlab::Fp8RecipeFormat::e4m3);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_FORMAT_HYBRID, attnlab::Fp8RecipeFormat::hybrid);
ATTNLAB_SAME_VALUE(ATTNLAB_AMAX_MAX, attnlab::AmaxAlgorithm::max);
ATTNLAB_SAME_VALUE(ATTNLAB_AMAX_MOST_RECENT, attnlab::AmaxAlgorithm::most_recent);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_Q, attnlab::Fp8Tensor::q);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_K, attnlab::Fp8Tensor::k);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_V, attnlab::Fp8Tensor::v);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_S, attnlab::Fp8Tensor::s);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_O, attnlab::Fp8Tensor::o);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_DO, attnlab::Fp8Tensor::d_o);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_DP, attnlab::Fp8Tensor::d_p);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_DQ, attnlab::Fp8Tensor::dq);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_DK, attnlab::Fp8Tensor::dk);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_DV, attnlab::Fp8Tensor::dv);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_TENSOR_COUNT, attnlab::kFp8TensorCount);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_FORWARD, attnlab::Fp8Pass::forward);
ATTNLAB_SAME_VALUE(ATTNLAB_FP8_BACKWARD, attnlab::Fp8Pass::backward);
#undef ATTNLAB_SAME_VALUE
static_assert(sizeof(attnlab_tensor{}.shape) / sizeof(int64_t) == attnlab::kMaxRank, "attnlab_tensor.shape size");
static_assert(sizeof(attnlab_tensor{}.strides) / sizeof(int64_t) == attnlab::kMaxRank, "attnlab_tensor.strides size");

// The opaque handles: a C++ context, a C++ recipe.
struct attnlab_context {
  attnlab::Context cxx;
};
struct attnlab_delayed_scaling {
  attnlab::DelayedScaling cxx;
};

namespace {

// ---------------------------------------------------------------------------------------------------------------
// The per-thread last-error message
// ---------------------------------------------------------------------------------------------------------------
std::string& last_error_message() noexcept {
  thread_local std::string message;
  return message;
}

void set_error(const char* message) noexcept {
  std::string& m = last_error_message();
  try {
    m.assign(message);
  } catch (...) {
    // Short enough for the small-string buffer (and any larger existing buffer): this assignment cannot allocate.
    m.assign("out of memory");
  }
}

void clear_error() noexcept { last_error_message().clear(); }

attnlab_status status_of(attnlab::ErrorCode code) noexcept {
  switch (code) {
    case attnlab::ErrorCode::invalid_argument: return ATTNLAB_INVALID_ARGUMENT;
    case attnlab::ErrorCode::unsupported: return ATTNLAB_UNSUPPORTED;
    case attnlab::ErrorCode::out_of_memory: return ATTNLAB_OUT_OF_MEMORY;
    case attnlab::ErrorCode::device_error: return ATTNLAB_DEVICE_ERROR;
    case attnlab::ErrorCode::internal: return ATTNLAB_INTERNAL;
    case attnlab::ErrorCode::ok: break;  // an Error that says "ok" is itself a bug
  }
  return ATTNLAB_INTERNAL;
}

// Runs `body`; returns ATTNLAB_OK and clears the last error when it returns, or the status of what it threw.
template <class Body>
attnlab_status guarded(Body&& body) noexcept {
  try {
    body();
    clear_error();
    return ATTNLAB_OK;
  } catch (const attnlab::Error& e) {
    set_error(e.what());
    return status_of(e.code());
  } catch (const std::bad_alloc&) {
    set_error("out of host memory");
    return ATTNLAB_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    try {
      set_error((std::string("internal error: ") + e.what()).c_str());
    } catch (...) {
      set_error("internal error");
    }
    return ATTNLAB_INTERNAL;
  } catch (...) {
    set_error("internal error: an unknown exception");
    return ATTNLAB_INTERNAL;
  }
}

[[noreturn]] void null_argument(const char* function, const char* argument) {
  attnlab::core::invalid("{}: {} is NULL", function, argument);
}

// Copies the name of the path that ran, truncated and NUL-terminated; nothing when there is no room at all.
void copy_path_name(const std::string& name, char* out, size_t out_size) noexcept {
  if (out == nullptr || out_size == 0) return;
  const size_t n = name.size() < out_size - 1 ? name.size() : out_size - 1;
  std::memcpy(out, name.data(), n);
  out[n] = '\0';
}

// list_paths(), taken once: the strings attnlab_path_info hands out live as long as the process.
const std::vector<attnlab::PathInfo>& cached_paths() {
  static const std::vector<attnlab::PathInfo> paths = attnlab::list_paths();
  return paths;
}

}  // namespace

extern "C" {

const char* attnlab_last_error(void) { return last_error_message().c_str(); }

const char* attnlab_version(void) { return ATTNLAB_VERSION_STRING; }

attnlab_status attnlab_context_create(attnlab_context** out) {
  return guarded([&] {
    if (out == nullptr) null_argument("attnlab_context_create", "out");
    *out = nullptr;
    *out = new attnlab_context{};
  });
}

void attnlab_context_destroy(attnlab_context* ctx) {
  // ~Context releases the paths' state; nothing in it is expected to throw, but nothing may escape either.
  guarded([&] { delete ctx; });
}

attnlab_status attnlab_context_set_stream(attnlab_context* ctx, void* cuda_stream) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_context_set_stream", "ctx");
    ctx->cxx.set_stream(cuda_stream);
  });
}

attnlab_status attnlab_context_set_num_threads(attnlab_context* ctx, int32_t threads) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_context_set_num_threads", "ctx");
    ctx->cxx.set_num_threads(threads);
  });
}

attnlab_tensor attnlab_tensor_contiguous(void* data, int32_t dtype, int32_t device, int32_t rank,
                                         const int64_t* shape) {
  attnlab_tensor t{};
  // A bad request sets the last error and leaves a tensor that the call using it rejects as well.
  guarded([&] { attnlab::capi::contiguous(t, data, dtype, device, rank, shape); });
  return t;
}

attnlab_status attnlab_options_init_sized(attnlab_options* options, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(options, struct_size, "attnlab_options_init_sized: "); });
}

attnlab_status attnlab_forward_args_init_sized(attnlab_forward_args* args, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(args, struct_size, "attnlab_forward_args_init_sized: "); });
}

attnlab_status attnlab_backward_args_init_sized(attnlab_backward_args* args, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(args, struct_size, "attnlab_backward_args_init_sized: "); });
}

attnlab_status attnlab_fp8_forward_scales_init_sized(attnlab_fp8_forward_scales* scales, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(scales, struct_size, "attnlab_fp8_forward_scales_init_sized: "); });
}

attnlab_status attnlab_fp8_backward_scales_init_sized(attnlab_fp8_backward_scales* scales, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(scales, struct_size, "attnlab_fp8_backward_scales_init_sized: "); });
}

attnlab_status attnlab_delayed_scaling_recipe_init_sized(attnlab_delayed_scaling_recipe* recipe, size_t struct_size) {
  return guarded(
      [&] { attnlab::capi::init_sized(recipe, struct_size, "attnlab_delayed_scaling_recipe_init_sized: "); });
}

int32_t attnlab_abi_version(void) { return ATTNLAB_ABI_VERSION; }

attnlab_status attnlab_paged_kv_init_sized(attnlab_paged_kv* cache, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(cache, struct_size, "attnlab_paged_kv_init_sized: "); });
}

attnlab_status attnlab_varlen_forward_args_init_sized(attnlab_varlen_forward_args* args, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(args, struct_size, "attnlab_varlen_forward_args_init_sized: "); });
}

attnlab_status attnlab_append_kv_args_init_sized(attnlab_append_kv_args* args, size_t struct_size) {
  return guarded([&] { attnlab::capi::init_sized(args, struct_size, "attnlab_append_kv_args_init_sized: "); });
}

attnlab_status attnlab_varlen_forward(attnlab_context* ctx, const attnlab_varlen_forward_args* args, char* path_ran,
                                      size_t path_ran_size) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_varlen_forward", "ctx");
    if (args == nullptr) null_argument("attnlab_varlen_forward", "args");
    const attnlab::VarlenForwardArgs cxx_args = attnlab::capi::to_cxx(args, "attnlab_varlen_forward");
    const attnlab::RunInfo info = attnlab::forward(ctx->cxx, cxx_args);
    copy_path_name(info.path, path_ran, path_ran_size);
  });
}

attnlab_status attnlab_append_kv(attnlab_context* ctx, const attnlab_append_kv_args* args) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_append_kv", "ctx");
    if (args == nullptr) null_argument("attnlab_append_kv", "args");
    attnlab::append_kv(ctx->cxx, attnlab::capi::to_cxx(args, "attnlab_append_kv"));
  });
}

attnlab_status attnlab_forward(attnlab_context* ctx, const attnlab_forward_args* args, char* path_ran,
                               size_t path_ran_size) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_forward", "ctx");
    if (args == nullptr) null_argument("attnlab_forward", "args");
    const attnlab::ForwardArgs cxx_args = attnlab::capi::to_cxx(args, "attnlab_forward");
    const attnlab::RunInfo info = attnlab::forward(ctx->cxx, cxx_args);
    copy_path_name(info.path, path_ran, path_ran_size);
  });
}

attnlab_status attnlab_backward(attnlab_context* ctx, const attnlab_backward_args* args, char* path_ran,
                                size_t path_ran_size) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_backward", "ctx");
    if (args == nullptr) null_argument("attnlab_backward", "args");
    const attnlab::BackwardArgs cxx_args = attnlab::capi::to_cxx(args, "attnlab_backward");
    const attnlab::RunInfo info = attnlab::backward(ctx->cxx, cxx_args);
    copy_path_name(info.path, path_ran, path_ran_size);
  });
}

attnlab_status attnlab_forward_workspace_size(attnlab_context* ctx, const attnlab_forward_args* args,
                                              size_t* bytes) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_forward_workspace_size", "ctx");
    if (args == nullptr) null_argument("attnlab_forward_workspace_size", "args");
    if (bytes == nullptr) null_argument("attnlab_forward_workspace_size", "bytes");
    const attnlab::ForwardArgs cxx_args = attnlab::capi::to_cxx(args, "attnlab_forward_workspace_size");
    *bytes = attnlab::workspace_size(ctx->cxx, cxx_args);
  });
}

attnlab_status attnlab_backward_workspace_size(attnlab_context* ctx, const attnlab_backward_args* args,
                                               size_t* bytes) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_backward_workspace_size", "ctx");
    if (args == nullptr) null_argument("attnlab_backward_workspace_size", "args");
    if (bytes == nullptr) null_argument("attnlab_backward_workspace_size", "bytes");
    const attnlab::BackwardArgs cxx_args = attnlab::capi::to_cxx(args, "attnlab_backward_workspace_size");
    *bytes = attnlab::workspace_size(ctx->cxx, cxx_args);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// FP8
// ---------------------------------------------------------------------------------------------------------------
attnlab_status attnlab_quantize(attnlab_context* ctx, const attnlab_tensor* in, const attnlab_tensor* out,
                                const float* scale, float* amax) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_quantize", "ctx");
    if (in == nullptr) null_argument("attnlab_quantize", "in");
    if (out == nullptr) null_argument("attnlab_quantize", "out");
    attnlab::quantize(ctx->cxx, attnlab::capi::to_cxx(*in, "in"), attnlab::capi::to_cxx(*out, "out"), scale, amax);
  });
}

attnlab_status attnlab_dequantize(attnlab_context* ctx, const attnlab_tensor* in, const attnlab_tensor* out,
                                  const float* scale_inv) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_dequantize", "ctx");
    if (in == nullptr) null_argument("attnlab_dequantize", "in");
    if (out == nullptr) null_argument("attnlab_dequantize", "out");
    attnlab::dequantize(ctx->cxx, attnlab::capi::to_cxx(*in, "in"), attnlab::capi::to_cxx(*out, "out"), scale_inv);
  });
}

attnlab_status attnlab_delayed_scaling_create(attnlab_context* ctx, const attnlab_delayed_scaling_recipe* recipe,
                                              int32_t device, int32_t device_index, attnlab_delayed_scaling** out) {
  return guarded([&] {
    const char* f = "attnlab_delayed_scaling_create";
    if (out == nullptr) null_argument(f, "out");
    *out = nullptr;
    if (ctx == nullptr) null_argument(f, "ctx");
    const attnlab::DelayedScalingRecipe r = attnlab::capi::to_cxx(recipe, std::string(f) + ": ");
    const attnlab::Device d = attnlab::capi::to_device(device, std::string(f) + ": device");
    *out = new attnlab_delayed_scaling{attnlab::DelayedScaling(ctx->cxx, r, d, device_index)};
  });
}

void attnlab_delayed_scaling_destroy(attnlab_delayed_scaling* recipe) {
  guarded([&] { delete recipe; });  // ~DelayedScaling never throws; nothing may escape regardless
}

attnlab_status attnlab_delayed_scaling_update(attnlab_context* ctx, attnlab_delayed_scaling* recipe, int32_t pass) {
  return guarded([&] {
    if (ctx == nullptr) null_argument("attnlab_delayed_scaling_update", "ctx");
    if (recipe == nullptr) null_argument("attnlab_delayed_scaling_update", "recipe");
    recipe->cxx.update(ctx->cxx, attnlab::capi::to_fp8_pass(pass, "attnlab_delayed_scaling_update: "));
  });
}

attnlab_status attnlab_delayed_scaling_tensor(const attnlab_delayed_scaling* recipe, int32_t tensor, float** scale,
                                              float** scale_inv, float** amax, int32_t* dtype) {
  return guarded([&] {
    if (recipe == nullptr) null_argument("attnlab_delayed_scaling_tensor", "recipe");
    const attnlab::Fp8Tensor t = attnlab::capi::to_fp8_tensor(tensor, "attnlab_delayed_scaling_tensor: ");
    const attnlab::Fp8TensorScaling s = recipe->cxx.tensor(t);
    if (scale != nullptr) *scale = s.scale;
    if (scale_inv != nullptr) *scale_inv = s.scale_inv;
    if (amax != nullptr) *amax = s.amax;
    if (dtype != nullptr) *dtype = static_cast<int32_t>(recipe->cxx.dtype(t));
  });
}

attnlab_status attnlab_delayed_scaling_forward_scales(const attnlab_delayed_scaling* recipe,
                                                      attnlab_fp8_forward_scales* out) {
  return guarded([&] {
    if (recipe == nullptr) null_argument("attnlab_delayed_scaling_forward_scales", "recipe");
    attnlab::capi::write_prefix(attnlab::capi::to_c(recipe->cxx.forward_scales()), out,
                                "attnlab_delayed_scaling_forward_scales: ");
  });
}

attnlab_status attnlab_delayed_scaling_backward_scales(const attnlab_delayed_scaling* recipe,
                                                       attnlab_fp8_backward_scales* out) {
  return guarded([&] {
    if (recipe == nullptr) null_argument("attnlab_delayed_scaling_backward_scales", "recipe");
    attnlab::capi::write_prefix(attnlab::capi::to_c(recipe->cxx.backward_scales()), out,
                                "attnlab_delayed_scaling_backward_scales: ");
  });
}

attnlab_status attnlab_delayed_scaling_read(attnlab_context* ctx, const attnlab_delayed_scaling* recipe,
                                            int32_t tensor, float* scale, float* scale_inv, float* amax_history,
                                            size_t history_capacity) {
  return guarded([&] {
    const char* f = "attnlab_delayed_scaling_read";
    if (ctx == nullptr) null_argument(f, "ctx");
    if (recipe == nullptr) null_argument(f, "recipe");
    const attnlab::Fp8Tensor t = attnlab::capi::to_fp8_tensor(tensor, std::string(f) + ": ");
    const std::size_t len = recipe->cxx.recipe().amax_history_len;
    // Checked before the read, so that a refused call has not waited for the stream.
    if (amax_history != nullptr && history_capacity < len)
      attnlab::core::invalid("{}: history_capacity {} is below the recipe's amax_history_len {}", f, history_capacity,
                             len);
    const attnlab::Fp8TensorState state = recipe->cxx.read(ctx->cxx, t);
    if (scale != nullptr) *scale = state.scale;
    if (scale_inv != nullptr) *scale_inv = state.scale_inv;
    if (amax_history != nullptr) std::memcpy(amax_history, state.amax_history.data(), len * sizeof(float));
  });
}

int32_t attnlab_path_count(void) {
  int32_t count = 0;
  guarded([&] { count = static_cast<int32_t>(cached_paths().size()); });
  return count;
}

// Each output pointer may be NULL when the caller does not want that field.
attnlab_status attnlab_path_info(int32_t index, const char** name, int32_t* device, int32_t* available,
                                 const char** unavailable_reason) {
  return guarded([&] {
    const auto& paths = cached_paths();
    if (index < 0 || static_cast<size_t>(index) >= paths.size())
      attnlab::core::invalid("attnlab_path_info: index {} is outside 0..{} ({} paths)", index,
                             static_cast<long long>(paths.size()) - 1, paths.size());
    const attnlab::PathInfo& p = paths[static_cast<size_t>(index)];
    if (name != nullptr) *name = p.name.c_str();
    if (device != nullptr) *device = static_cast<int32_t>(p.device);
    if (available != nullptr) *available = p.available ? 1 : 0;
    if (unavailable_reason != nullptr) *unavailable_reason = p.unavailable.c_str();
  });
}

}  // extern "C"
