// attnlab::DelayedScaling (include/attnlab/fp8.h): the recipe's state in one block of memory, updated on the host
// (Device::cpu) by the host reference itself (core/delayed_scaling.h), or on the GPU by one kernel per pass
// (src/cuda/fp8/recipe_kernels.cu) that reproduces it bit for bit.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

#include "attnlab/fp8.h"
#include "attnlab/version.h"
#include "core/context_impl.h"
#include "core/delayed_scaling.h"
#include "core/error.h"
#include "cuda/fp8/recipe_kernels.h"  // the state's layout; plain C++ (its functions exist in CUDA builds only)

namespace attnlab {

namespace layout = cuda::fp8;

namespace {

// 2^24 entries keep every index of the kernels in int and the state within 1 GiB.
constexpr std::size_t kMaxHistoryLen = std::size_t(1) << 24;
constexpr int kMaxMargin = 32;  // beyond every format's range: a larger margin would quantize everything to 0

void check_recipe(const DelayedScalingRecipe& r) {
  if (r.amax_history_len < 1 || r.amax_history_len > kMaxHistoryLen)
    core::invalid("DelayedScaling: amax_history_len must be in 1..{}, got {}", kMaxHistoryLen, r.amax_history_len);
  if (r.margin < 0 || r.margin > kMaxMargin)
    core::invalid("DelayedScaling: margin must be in 0..{}, got {}", kMaxMargin, r.margin);
  if (r.format != Fp8RecipeFormat::e4m3 && r.format != Fp8RecipeFormat::hybrid)
    core::invalid("DelayedScaling: format {} is not an Fp8RecipeFormat", int(r.format));
  if (r.amax_compute_algo != AmaxAlgorithm::max && r.amax_compute_algo != AmaxAlgorithm::most_recent)
    core::invalid("DelayedScaling: amax_compute_algo {} is not an AmaxAlgorithm", int(r.amax_compute_algo));
}

int index_of(Fp8Tensor t) {
  const int i = static_cast<int>(t);
  if (i < 0 || i >= kFp8TensorCount) core::invalid("DelayedScaling: {} is not an Fp8Tensor", i);
  return i;
}

int first_of(Fp8Pass pass) {
  if (pass == Fp8Pass::forward) return static_cast<int>(Fp8Tensor::q);
  if (pass == Fp8Pass::backward) return static_cast<int>(Fp8Tensor::d_o);
  core::invalid("DelayedScaling::update: {} is not an Fp8Pass", int(pass));
}

core::Fp8Role role_of(int tensor) {
  return tensor >= static_cast<int>(Fp8Tensor::d_o) ? core::Fp8Role::backward : core::Fp8Role::forward;
}

#if !ATTNLAB_WITH_CUDA
[[noreturn]] void no_cuda() {
  core::fail(ErrorCode::unsupported,
             "DelayedScaling: Device::cuda needs CUDA, and this libattnlab was built without it");
}
#endif

}  // namespace

struct DelayedScaling::Impl {
  DelayedScalingRecipe recipe;
  Device device = Device::cpu;
  int device_index = 0;
  int block_floats = 0;               // L + 2 per tensor
  std::unique_ptr<float[]> host;      // Device::cpu
  float* state = nullptr;             // the first block: host.get() or device memory

  ~Impl() {
#if ATTNLAB_WITH_CUDA
    if (device == Device::cuda) layout::free_state(device_index, state);
#endif
  }
  std::size_t floats() const { return std::size_t(kFp8TensorCount) * std::size_t(block_floats); }
  float* block(int tensor) const { return state + std::ptrdiff_t(tensor) * block_floats; }
  core::RecipeParams params() const {
    core::RecipeParams p;
    p.margin = recipe.margin;
    p.history_len = recipe.amax_history_len;
    p.algorithm = recipe.amax_compute_algo;
    p.format = recipe.format;
    p.update = core::DelayedScalingUpdate::reference;
    return p;
  }
};

DelayedScaling::DelayedScaling(Context& ctx, const DelayedScalingRecipe& recipe, Device device, int device_index) {
  check_recipe(recipe);
  if (device != Device::cpu && device != Device::cuda)
    core::invalid("DelayedScaling: device {} is not a Device", int(device));
  auto impl = std::make_unique<Impl>();
  impl->recipe = recipe;
  impl->device = device;
  impl->device_index = device == Device::cuda ? device_index : 0;
  impl->block_floats = int(recipe.amax_history_len) + layout::kHistorySlot;
  if (device == Device::cpu) {
    impl->host = std::make_unique<float[]>(impl->floats());  // zeros: the histories
    impl->state = impl->host.get();
    for (int t = 0; t < kFp8TensorCount; ++t) {
      impl->block(t)[layout::kScaleSlot] = 1.0f;
      impl->block(t)[layout::kScaleInvSlot] = 1.0f;
    }
  } else {
#if ATTNLAB_WITH_CUDA
    impl->state = layout::allocate_state(device_index, impl->floats());  // freed by ~Impl if init throws
    layout::init_state(device_index, impl->state, kFp8TensorCount, impl->block_floats, ctx.impl().stream);
#else
    no_cuda();
#endif
  }
  impl_ = std::move(impl);
}

DelayedScaling::~DelayedScaling() = default;
DelayedScaling::DelayedScaling(DelayedScaling&&) noexcept = default;
DelayedScaling& DelayedScaling::operator=(DelayedScaling&&) noexcept = default;

namespace {
const DelayedScaling::Impl& live(const std::unique_ptr<DelayedScaling::Impl>& impl) {
  if (!impl) core::invalid("DelayedScaling: this recipe was moved from and holds no state");
  return *impl;
}
}  // namespace

const DelayedScalingRecipe& DelayedScaling::recipe() const { return live(impl_).recipe; }
Device DelayedScaling::device() const { return live(impl_).device; }
int DelayedScaling::device_index() const { return live(impl_).device_index; }

DType DelayedScaling::dtype(Fp8Tensor tensor) const {
  const core::Fp8Format f = core::recipe_fp8_format(live(impl_).recipe.format, role_of(index_of(tensor)));
  return f == core::Fp8Format::e5m2 ? DType::e5m2 : DType::e4m3;
}

Fp8TensorScaling DelayedScaling::tensor(Fp8Tensor tensor) const {
  float* block = live(impl_).block(index_of(tensor));
  return {block + layout::kScaleSlot, block + layout::kScaleInvSlot, block + layout::kHistorySlot};
}

Fp8ForwardScales DelayedScaling::forward_scales() const {
  const Fp8TensorScaling q = tensor(Fp8Tensor::q), k = tensor(Fp8Tensor::k), v = tensor(Fp8Tensor::v);
  const Fp8TensorScaling s = tensor(Fp8Tensor::s), o = tensor(Fp8Tensor::o);
  Fp8ForwardScales f;
  f.descale_q = q.scale_inv;
  f.descale_k = k.scale_inv;
  f.descale_v = v.scale_inv;
  f.scale_s = s.scale;
  f.descale_s = s.scale_inv;
  f.amax_s = s.amax;
  f.scale_o = o.scale;
  f.amax_o = o.amax;
  return f;
}

Fp8BackwardScales DelayedScaling::backward_scales() const {
  const Fp8TensorScaling q = tensor(Fp8Tensor::q), k = tensor(Fp8Tensor::k), v = tensor(Fp8Tensor::v);
  const Fp8TensorScaling s = tensor(Fp8Tensor::s), o = tensor(Fp8Tensor::o), d_o = tensor(Fp8Tensor::d_o);
  const Fp8TensorScaling dp = tensor(Fp8Tensor::d_p), dq = tensor(Fp8Tensor::dq), dk = tensor(Fp8Tensor::dk);
  const Fp8TensorScaling dv = tensor(Fp8Tensor::dv);
  Fp8BackwardScales b;
  b.descale_q = q.scale_inv;
  b.descale_k = k.scale_inv;
  b.descale_v = v.scale_inv;
  b.descale_o = o.scale_inv;
  b.descale_do = d_o.scale_inv;
  b.scale_s = s.scale;
  b.descale_s = s.scale_inv;
  b.scale_dp = dp.scale;
  b.descale_dp = dp.scale_inv;
  b.scale_dq = dq.scale;
  b.scale_dk = dk.scale;
  b.scale_dv = dv.scale;
  b.amax_dp = dp.amax;
  b.amax_dq = dq.amax;
  b.amax_dk = dk.amax;
  b.amax_dv = dv.amax;
  return b;
}

namespace {
// P's scale at most fp8_max / 2^margin: the fused kernels quantize the running probabilities exp(s − m) ≤ 1 (m the
// running row maximum), while amax_s reports the normalized max p, so TransformerEngine's fp8_max / amax_s would
// saturate every running value above amax_s (measured on an H200: docs/perf-notes.md, FP8).
float scale_ceiling(const DelayedScalingRecipe& r, int tensor) {
  if (tensor != int(Fp8Tensor::s)) return FLT_MAX;
  return core::fp8_max(core::recipe_fp8_format(r.format, core::Fp8Role::forward)) / std::ldexp(1.0f, r.margin);
}
}  // namespace

void DelayedScaling::update(Context& ctx, Fp8Pass pass) {
  const Impl& im = live(impl_);
  const int first = first_of(pass);
  const std::size_t L = im.recipe.amax_history_len;
  if (im.device == Device::cpu) {
    const core::RecipeParams params = im.params();
    std::vector<float> history(L);
    for (int t = first; t < first + layout::kTensorsPerPass; ++t) {
      float* block = im.block(t);
      float* h = block + layout::kHistorySlot;
      history.assign(h, h + L);
      const core::DelayedScalingState next =
          core::delayed_scaling_step(params, role_of(t), history, block[layout::kScaleSlot], history[0]);
      std::copy(next.amax_history.begin(), next.amax_history.end(), h);
      const float ceiling = scale_ceiling(im.recipe, t);
      block[layout::kScaleSlot] = next.scale > ceiling ? ceiling : next.scale;
      block[layout::kScaleInvSlot] = next.scale > ceiling ? 1.0f / ceiling : next.scale_inv;
    }
    return;
  }
#if ATTNLAB_WITH_CUDA
  layout::RecipeUpdate u;
  u.first = im.block(first);
  u.block_floats = im.block_floats;
  u.history_len = int(L);
  for (int i = 0; i < layout::kTensorsPerPass; ++i) {
    u.fp8_max[i] = core::fp8_max(core::recipe_fp8_format(im.recipe.format, role_of(first + i)));
    u.scale_max[i] = scale_ceiling(im.recipe, first + i);
  }
  u.margin_divisor = std::ldexp(1.0f, im.recipe.margin);  // as the reference divides by it
  u.most_recent = im.recipe.amax_compute_algo == AmaxAlgorithm::most_recent;
  layout::update_state(im.device_index, u, ctx.impl().stream);
#else
  no_cuda();
#endif
}

Fp8TensorState DelayedScaling::read(Context& ctx, Fp8Tensor tensor) const {
  const Impl& im = live(impl_);
  const int t = index_of(tensor);
  std::vector<float> block(std::size_t(im.block_floats));
  if (im.device == Device::cpu) {
    std::copy(im.block(t), im.block(t) + im.block_floats, block.begin());
  } else {
#if ATTNLAB_WITH_CUDA
    layout::read_state(im.device_index, im.block(t), block.size(), block.data(), ctx.impl().stream);
#else
    no_cuda();
#endif
  }
  Fp8TensorState state;
  state.scale = block[layout::kScaleSlot];
  state.scale_inv = block[layout::kScaleInvSlot];
  // Memory holds [staging, oldest .. newest]; the state reads in time order: [oldest .. newest, staging].
  const auto h = block.begin() + layout::kHistorySlot;
  state.amax_history.assign(h + 1, block.end());
  state.amax_history.push_back(*h);
  return state;
}

}  // namespace attnlab
