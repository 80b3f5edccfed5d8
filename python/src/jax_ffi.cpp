// attnlab as XLA FFI custom calls (python/attnlab/jax.py registers and calls them): forward (Q, K, V → O, LSE) and
// backward (Q, K, V, O, dO, LSE → dQ, dK, dV), for XLA's CPU platform and, with CUDA, its CUDA platform. Under XLA
// the call runs on XLA's stream, with its scratch from XLA's allocator (ScratchAllocator: the library allocates no
// device memory of its own), and a failure comes back to JAX as an FFI error carrying attnlab's message.
#include "jax_ffi.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "attnlab/attention.h"
#include "attnlab/version.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace attnlab_python {
namespace {

std::optional<attnlab::DType> dtype_of(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return attnlab::DType::f32;
    case ffi::DataType::F16: return attnlab::DType::f16;
    case ffi::DataType::BF16: return attnlab::DType::bf16;
    case ffi::DataType::S32: return attnlab::DType::i32;   // sequence lengths
    case ffi::DataType::PRED: return attnlab::DType::u8;   // a boolean mask: one byte per element
    default: return std::nullopt;
  }
}

// XLA's buffers are dense and row-major (the default layout of a custom call's operands and results).
attnlab::TensorView view(const ffi::AnyBuffer& b, attnlab::Device device, int device_index) {
  attnlab::TensorView v;
  v.data = b.untyped_data();
  v.dtype = dtype_of(b.element_type()).value_or(attnlab::DType::f32);
  v.device = device;
  v.device_index = device_index;
  const auto dims = b.dimensions();
  v.rank = int(dims.size());
  std::int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = dims[i];
    v.strides[i] = stride;
    stride *= dims[i];
  }
  return v;
}

// The optional operands after the fixed ones, in this order, each present when its bit of `extras` is set.
enum Extra : std::int64_t { kBias = 1, kMask = 2, kQueryLengths = 4, kKeyLengths = 8 };

attnlab::Options options(float scale, bool causal, std::int64_t window_left, std::int64_t window_right,
                         std::string_view path) {
  attnlab::Options o;
  o.scale = scale;
  o.mask.causal = causal;
  o.mask.window_left = window_left;
  o.mask.window_right = window_right;
  o.path = std::string(path);
  return o;
}

// Fills the options' bias, mask and lengths from the call's remaining operands.
ffi::Error add_extras(attnlab::Options& o, const ffi::RemainingArgs& rest, std::int64_t extras,
                      attnlab::Device device, int device_index) {
  std::size_t next = 0;
  attnlab::TensorView* slots[] = {&o.bias, &o.bool_mask, &o.q_seqlens, &o.kv_seqlens};
  for (int bit = 0; bit < 4; ++bit) {
    if ((extras & (std::int64_t(1) << bit)) == 0) continue;
    ffi::ErrorOr<ffi::AnyBuffer> b = rest.get<ffi::AnyBuffer>(next++);
    if (!b.has_value()) return b.error();
    if (!dtype_of(b->element_type()))
      return ffi::Error::InvalidArgument("attnlab: bias, mask and lengths must be float, bool and int32 arrays");
    *slots[bit] = view(*b, device, device_index);
  }
  if (next != rest.size()) return ffi::Error::InvalidArgument("attnlab: operands do not match the extras attribute");
  return ffi::Error::Success();
}

ffi::Error to_ffi(const attnlab::Error& e) {
  const ffi::ErrorCode code = e.code() == attnlab::ErrorCode::invalid_argument ? ffi::ErrorCode::kInvalidArgument
                              : e.code() == attnlab::ErrorCode::unsupported    ? ffi::ErrorCode::kUnimplemented
                              : e.code() == attnlab::ErrorCode::out_of_memory  ? ffi::ErrorCode::kResourceExhausted
                                                                              : ffi::ErrorCode::kInternal;
  return ffi::Error(code, std::string("attnlab: ") + e.what());
}

ffi::Error check_dtypes(std::initializer_list<const ffi::AnyBuffer*> buffers) {
  for (const ffi::AnyBuffer* b : buffers)
    if (!dtype_of(b->element_type()))
      return ffi::Error::InvalidArgument("attnlab: arrays must be float32, float16 or bfloat16");
  return ffi::Error::Success();
}

// One context per thread (a context serves one thread at a time; XLA may run handlers on several).
attnlab::Context& thread_context() {
  thread_local attnlab::Context ctx;
  return ctx;
}

// Scratch for a GPU call from XLA's allocator; a workspace is always given, so the library allocates nothing.
// attnlab wants its workspace 256-byte aligned (as cudaMalloc returns it), but XLA's FFI refuses any alignment
// above 16 (its DeviceMemory_Allocate): ask for 16 and 240 bytes more, and round the start up.
template <class Args>
ffi::Error lend_workspace(attnlab::Context& ctx, Args& a, ffi::ScratchAllocator* scratch) {
  if (scratch == nullptr) return ffi::Error::Success();
  constexpr std::size_t kAsked = 16, kNeeded = 256;
  const std::size_t bytes = attnlab::workspace_size(ctx, a);
  void* data = nullptr;
  if (bytes > 0) {
    const std::optional<void*> got = scratch->Allocate(bytes + kNeeded - kAsked, kAsked);
    if (!got)
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        "attnlab: XLA's scratch allocator could not lend " + std::to_string(bytes) + " bytes");
    const std::uintptr_t start = (reinterpret_cast<std::uintptr_t>(*got) + kNeeded - 1) & ~(kNeeded - 1);
    data = reinterpret_cast<void*>(start);
  }
  a.workspace = attnlab::DeviceBuffer{data, bytes};
  return ffi::Error::Success();
}

ffi::Error forward(attnlab::Device device, int device_index, void* stream, ffi::ScratchAllocator* scratch,
                   ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::RemainingArgs rest,
                   ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::AnyBuffer> lse, float scale, bool causal,
                   std::int64_t window_left, std::int64_t window_right, std::string_view path, std::int64_t extras) {
  if (ffi::Error e = check_dtypes({&q, &k, &v, &*o}); e.failure()) return e;
  try {
    attnlab::ForwardArgs a;
    a.q = view(q, device, device_index), a.k = view(k, device, device_index), a.v = view(v, device, device_index);
    a.o = view(*o, device, device_index);
    a.lse = view(*lse, device, device_index);
    a.lse.dtype = attnlab::DType::f32;
    a.options = options(scale, causal, window_left, window_right, path);
    if (ffi::Error e = add_extras(a.options, rest, extras, device, device_index); e.failure()) return e;
    attnlab::Context& ctx = thread_context();
    ctx.set_stream(stream);
    if (ffi::Error e = lend_workspace(ctx, a, scratch); e.failure()) return e;
    attnlab::forward(ctx, a);
  } catch (const attnlab::Error& e) {
    return to_ffi(e);
  }
  return ffi::Error::Success();
}

ffi::Error backward(attnlab::Device device, int device_index, void* stream, ffi::ScratchAllocator* scratch,
                    ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer o, ffi::AnyBuffer d_o,
                    ffi::AnyBuffer lse, ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> dq,
                    ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv, float scale, bool causal,
                    std::int64_t window_left, std::int64_t window_right, std::string_view path, std::int64_t extras) {
  if (ffi::Error e = check_dtypes({&q, &k, &v, &o, &d_o}); e.failure()) return e;
  try {
    attnlab::BackwardArgs a;
    a.q = view(q, device, device_index), a.k = view(k, device, device_index), a.v = view(v, device, device_index);
    a.o = view(o, device, device_index), a.d_o = view(d_o, device, device_index);
    a.lse = view(lse, device, device_index);
    a.lse.dtype = attnlab::DType::f32;
    a.dq = view(*dq, device, device_index), a.dk = view(*dk, device, device_index);
    a.dv = view(*dv, device, device_index);
    a.options = options(scale, causal, window_left, window_right, path);
    if (ffi::Error e = add_extras(a.options, rest, extras, device, device_index); e.failure()) return e;
    attnlab::Context& ctx = thread_context();
    ctx.set_stream(stream);
    if (ffi::Error e = lend_workspace(ctx, a, scratch); e.failure()) return e;
    attnlab::backward(ctx, a);
  } catch (const attnlab::Error& e) {
    return to_ffi(e);
  }
  return ffi::Error::Success();
}

ffi::Error forward_cpu(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::RemainingArgs rest,
                       ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::AnyBuffer> lse, float scale, bool causal,
                       std::int64_t window_left, std::int64_t window_right, std::string_view path,
                       std::int64_t extras) {
  return forward(attnlab::Device::cpu, 0, nullptr, nullptr, q, k, v, rest, o, lse, scale, causal, window_left,
                 window_right, path, extras);
}
ffi::Error backward_cpu(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer o, ffi::AnyBuffer d_o,
                        ffi::AnyBuffer lse, ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> dq,
                        ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv, float scale, bool causal,
                        std::int64_t window_left, std::int64_t window_right, std::string_view path,
                        std::int64_t extras) {
  return backward(attnlab::Device::cpu, 0, nullptr, nullptr, q, k, v, o, d_o, lse, rest, dq, dk, dv, scale, causal,
                  window_left, window_right, path, extras);
}
#if ATTNLAB_WITH_CUDA
ffi::Error forward_cuda(void* stream, std::int32_t device, ffi::ScratchAllocator scratch, ffi::AnyBuffer q,
                        ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> o,
                        ffi::Result<ffi::AnyBuffer> lse, float scale, bool causal, std::int64_t window_left,
                        std::int64_t window_right, std::string_view path, std::int64_t extras) {
  return forward(attnlab::Device::cuda, device, stream, &scratch, q, k, v, rest, o, lse, scale, causal, window_left,
                 window_right, path, extras);
}
ffi::Error backward_cuda(void* stream, std::int32_t device, ffi::ScratchAllocator scratch, ffi::AnyBuffer q,
                         ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer o, ffi::AnyBuffer d_o, ffi::AnyBuffer lse,
                         ffi::RemainingArgs rest, ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk,
                         ffi::Result<ffi::AnyBuffer> dv, float scale, bool causal, std::int64_t window_left,
                         std::int64_t window_right, std::string_view path, std::int64_t extras) {
  return backward(attnlab::Device::cuda, device, stream, &scratch, q, k, v, o, d_o, lse, rest, dq, dk, dv, scale,
                  causal, window_left, window_right, path, extras);
}
#endif

// The attributes every handler takes, after its buffers.
template <class Binding>
auto with_attributes(Binding b) {
  return std::move(b)
      .template Attr<float>("scale")
      .template Attr<bool>("causal")
      .template Attr<std::int64_t>("window_left")
      .template Attr<std::int64_t>("window_right")
      .template Attr<std::string_view>("path")
      .template Attr<std::int64_t>("extras");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(attnlab_forward_cpu, forward_cpu,
                              with_attributes(ffi::Ffi::Bind()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .RemainingArgs()
                                                  .Ret<ffi::AnyBuffer>()
                                                  .Ret<ffi::AnyBuffer>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(attnlab_backward_cpu, backward_cpu,
                              with_attributes(ffi::Ffi::Bind()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .RemainingArgs()
                                                  .Ret<ffi::AnyBuffer>()
                                                  .Ret<ffi::AnyBuffer>()
                                                  .Ret<ffi::AnyBuffer>()));
#if ATTNLAB_WITH_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(attnlab_forward_cuda, forward_cuda,
                              with_attributes(ffi::Ffi::Bind()
                                                  .Ctx<ffi::PlatformStream<void*>>()
                                                  .Ctx<ffi::DeviceOrdinal>()
                                                  .Ctx<ffi::ScratchAllocator>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .RemainingArgs()
                                                  .Ret<ffi::AnyBuffer>()
                                                  .Ret<ffi::AnyBuffer>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(attnlab_backward_cuda, backward_cuda,
                              with_attributes(ffi::Ffi::Bind()
                                                  .Ctx<ffi::PlatformStream<void*>>()
                                                  .Ctx<ffi::DeviceOrdinal>()
                                                  .Ctx<ffi::ScratchAllocator>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .Arg<ffi::AnyBuffer>()
                                                  .RemainingArgs()
                                                  .Ret<ffi::AnyBuffer>()
                                                  .Ret<ffi::AnyBuffer>()
                                                  .Ret<ffi::AnyBuffer>()));
#endif

std::vector<JaxHandler> jax_handlers() {
  std::vector<JaxHandler> out = {{"attnlab_forward", "cpu", reinterpret_cast<void*>(attnlab_forward_cpu)},
                                 {"attnlab_backward", "cpu", reinterpret_cast<void*>(attnlab_backward_cpu)}};
#if ATTNLAB_WITH_CUDA
  out.push_back({"attnlab_forward", "CUDA", reinterpret_cast<void*>(attnlab_forward_cuda)});
  out.push_back({"attnlab_backward", "CUDA", reinterpret_cast<void*>(attnlab_backward_cuda)});
#endif
  return out;
}

}  // namespace attnlab_python
