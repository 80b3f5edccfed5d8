// cudnn: cuDNN's fused attention (flash-attention style kernels) through cudnn-frontend graphs, forward and
// backward — the codelab's `implementation="cudnn"`, driven from C++.
//
// Per context the path keeps one cuDNN handle, a bounded LRU cache of built graphs keyed by everything a graph
// depends on (shapes, strides, dtypes, options, which optional tensors are present) and the cases cuDNN refused to
// build. A call in steady state therefore builds nothing, allocates nothing and never waits for the device: it
// sets the handle's stream, enqueues the graph and, only for the calls that need them, the small fix-up kernels of
// fixup_kernels.h, with its scratch (graph workspace, lengths, statistics) from the call's workspace.
//
// A case cuDNN refuses to build is remembered in the context, so the call that found it falls through to the next
// path under auto, and why_not(ctx, ...) reports the frontend's reason for that exact case from then on.

#include <cudnn.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <vector>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/path.h"
#include "cuda/common/call_scratch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"
#include "cuda/common/scratch_layout.h"
#include "cuda/common/staging.h"
#include "cuda/cudnn/cudnn_cache.h"
#include "cuda/cudnn/cudnn_graphs.h"
#include "cuda/cudnn/cudnn_plan.h"
#include "cuda/cudnn/fixup_kernels.h"

namespace attnlab::cuda {
namespace cudnn {
namespace {

constexpr const char* kName = kPathName;

// Where each piece of a call's scratch lies (byte offsets into one block).
struct Layout {
  std::size_t graph = 0, lengths = 0, stats = 0, amax = 0, total = 0;
};

// FP8 graphs write every amax; those the caller did not ask for land in the scratch (4 floats), and a forward run
// in batch chunks writes each chunk's pair there too (2 more per chunk) before they are combined.
constexpr std::size_t kAmaxSlots = 4;

Layout layout_of(const core::Problem& p, const Plan& plan, const Entry& entry) {
  const auto& d = p.dims;
  ScratchLayout carve(kName);
  Layout l;
  l.graph = carve.add(entry.workspace);
  l.lengths = plan.user_lengths || plan.full_lengths ? carve.add(std::size_t(2 * d.B), sizeof(std::int32_t)) : 0;
  l.stats = plan.stats_in_workspace ? carve.add(std::size_t(d.B * d.N * d.T), sizeof(float)) : 0;
  l.amax = p.fp8() ? carve.add(kAmaxSlots + 2 * std::size_t(plan.batch_chunks > 1 ? plan.batch_chunks : 0),
                               sizeof(float))
                    : 0;
  l.total = carve.size();
  return l;
}

// The padding lengths of the call (T… then S…), written into the scratch at `dst` in the stream's order: host
// values (and T / S for a side without lengths) staged through kernel parameters, device values clamped by a
// kernel after them.
void place_lengths(const core::Problem& p, const Plan& plan, cudaStream_t stream, std::int32_t* dst) {
  const TensorView& q = p.q_seqlens;
  const TensorView& kv = p.kv_seqlens;
  const std::int64_t B = p.dims.B;
  const bool q_dev = plan.user_lengths && !q.empty() && q.device == Device::cuda;
  const bool kv_dev = plan.user_lengths && !kv.empty() && kv.device == Device::cuda;
  const bool q_host = plan.user_lengths && !q.empty() && !q_dev;
  const bool kv_host = plan.user_lengths && !kv.empty() && !kv_dev;
  if (q_host || kv_host) {
    // Both sides in one staging launch when they fit (a device side gets T / S there, which the kernel below
    // overwrites), else side by side in chunks.
    std::array<std::int32_t, kStagedWordsPerLaunch> chunk;
    const TensorView* views[2] = {&q, &kv};
    const bool host[2] = {q_host, kv_host};
    const std::int64_t full[2] = {p.dims.T, p.dims.S};
    auto gather = [&](int k, std::int64_t b0, std::int64_t n, std::int32_t* into) {
      const auto* src = static_cast<const std::int32_t*>(views[k]->data);
      for (std::int64_t b = 0; b < n; ++b)  // host values were range-checked by validation
        into[b] = host[k] ? src[(b0 + b) * views[k]->strides[0]] : std::int32_t(full[k]);
    };
    if (2 * B <= std::int64_t(chunk.size())) {
      gather(0, 0, B, chunk.data());
      gather(1, 0, B, chunk.data() + B);
      stage_words(chunk.data(), std::size_t(2 * B), dst, stream, kName);
    } else {
      for (int k = 0; k < 2; ++k) {
        if (k == 0 ? q_dev : kv_dev) continue;  // written by the kernel below
        for (std::int64_t b0 = 0; b0 < B; b0 += std::int64_t(chunk.size())) {
          const std::int64_t n = std::min<std::int64_t>(std::int64_t(chunk.size()), B - b0);
          gather(k, b0, n, chunk.data());
          stage_words(chunk.data(), std::size_t(n), dst + k * B + b0, stream, kName);
        }
      }
    }
  }
  // Device lengths are clamped to [0, T] / [0, S]; with nothing on the host, the kernel also writes the missing
  // side (and, for full_lengths, both sides) as T / S.
  if (q_dev || kv_dev || !(q_host || kv_host))
    prepare_lengths(q_dev ? static_cast<const std::int32_t*>(q.data) : nullptr, q.strides[0],
                    kv_dev ? static_cast<const std::int32_t*>(kv.data) : nullptr, kv.strides[0], B, p.dims.T,
                    p.dims.S, /*fill_missing=*/!(q_host || kv_host), dst, stream);
}

// The FP8 graphs' scale inputs and amax outputs. An amax the caller left null goes to its own scratch float.
void place_fp8_scales(const core::Problem& p, float* scratch_amax, Pointers& ptr) {
  auto in = [](const float* f) { return const_cast<float*>(f); };  // cuDNN's variant pack takes void*
  int spare = 0;
  auto out = [&](float* f) { return f != nullptr ? f : scratch_amax + spare++; };
  if (p.direction == core::Direction::forward) {
    const Fp8ForwardScales& s = *p.fp8_forward;
    ptr[Slot::descale_q] = in(s.descale_q), ptr[Slot::descale_k] = in(s.descale_k);
    ptr[Slot::descale_v] = in(s.descale_v), ptr[Slot::descale_s] = in(s.descale_s);
    ptr[Slot::scale_s] = in(s.scale_s), ptr[Slot::scale_o] = in(s.scale_o);
    ptr[Slot::amax_s] = out(s.amax_s), ptr[Slot::amax_o] = out(s.amax_o);
    return;
  }
  const Fp8BackwardScales& s = *p.fp8_backward;
  ptr[Slot::descale_q] = in(s.descale_q), ptr[Slot::descale_k] = in(s.descale_k);
  ptr[Slot::descale_v] = in(s.descale_v), ptr[Slot::descale_o] = in(s.descale_o);
  ptr[Slot::descale_do] = in(s.descale_do), ptr[Slot::descale_s] = in(s.descale_s);
  ptr[Slot::scale_s] = in(s.scale_s), ptr[Slot::descale_dp] = in(s.descale_dp), ptr[Slot::scale_dp] = in(s.scale_dp);
  ptr[Slot::scale_dq] = in(s.scale_dq), ptr[Slot::scale_dk] = in(s.scale_dk), ptr[Slot::scale_dv] = in(s.scale_dv);
  ptr[Slot::amax_dp] = out(s.amax_dp), ptr[Slot::amax_dq] = out(s.amax_dq);
  ptr[Slot::amax_dk] = out(s.amax_dk), ptr[Slot::amax_dv] = out(s.amax_dv);
}

// An FP8 forward split by batch (Plan::batch_chunks): the graph, built for spec.B batches, runs once per chunk on
// views offset by whole batches (the packed Stats too: batch is their outermost dimension); each chunk writes its
// amax pair into `parts`, and one small kernel leaves their maxima where the caller asked.
void run_in_batch_chunks(const core::Problem& p, const Plan& plan, const Entry& entry, const Pointers& whole,
                         float* parts, void* graph_workspace, cudnnHandle_t h, cudaStream_t stream) {
  const std::int64_t batches = plan.spec.B;
  auto advance = [&](void* base, const TensorView& t, std::int64_t chunk) -> void* {
    if (base == nullptr) return nullptr;
    const std::int64_t bytes = chunk * batches * t.strides[0] * std::int64_t(size_of(t.dtype));
    return static_cast<char*>(base) + bytes;
  };
  const std::int64_t stats_per_batch = p.dims.N * p.dims.T;
  for (std::int64_t c = 0; c < plan.batch_chunks; ++c) {
    Pointers ptr = whole;
    ptr[Slot::q] = advance(whole[Slot::q], p.q, c);
    ptr[Slot::k] = advance(whole[Slot::k], p.k, c);
    ptr[Slot::v] = advance(whole[Slot::v], p.v, c);
    ptr[Slot::o] = advance(whole[Slot::o], p.o, c);
    if (whole[Slot::stats] != nullptr)
      ptr[Slot::stats] = static_cast<float*>(whole[Slot::stats]) + c * batches * stats_per_batch;
    ptr[Slot::amax_s] = parts + 2 * c;
    ptr[Slot::amax_o] = parts + 2 * c + 1;
    if (auto error = execute(*entry.graph, h, ptr, graph_workspace))
      core::fail(ErrorCode::device_error, "cudnn: cuDNN failed to run the FP8 forward graph (batch chunk {} of {}): {}",
                 c + 1, plan.batch_chunks, *error);
  }
  const Fp8ForwardScales& s = *p.fp8_forward;
  combine_chunk_amaxes(parts, int(plan.batch_chunks), s.amax_s, s.amax_o, stream);
}

RowTensor row_tensor(const TensorView& t) {
  return {t.data, {t.strides[0], t.strides[1], t.strides[2], t.strides[3]}};
}

// Enqueues the call: `entry` is the plan's graph, `layout` its scratch, `base` that scratch on the device.
void run_call(const core::Problem& p, const Plan& plan, const Entry& entry, const Layout& layout, char* base,
              cudnnHandle_t h, cudaStream_t stream) {
  const auto& d = p.dims;
  const bool forward = p.direction == core::Direction::forward;
  Pointers ptr{};
  ptr[Slot::q] = p.q.data;
  ptr[Slot::k] = p.k.data;
  ptr[Slot::v] = p.v.data;
  ptr[Slot::o] = p.o.data;
  ptr[Slot::bias] = p.bias.data;
  float* ws_stats = plan.stats_in_workspace ? reinterpret_cast<float*>(base + layout.stats) : nullptr;
  ptr[Slot::stats] = ws_stats != nullptr ? static_cast<void*>(ws_stats) : p.lse.data;
  Lengths lengths;
  if (plan.user_lengths || plan.full_lengths) {  // full lengths: the fix-ups read them as T / S, which they are
    auto* lens = reinterpret_cast<std::int32_t*>(base + layout.lengths);
    place_lengths(p, plan, stream, lens);
    lengths = {lens, lens + d.B};
  }
  ptr[Slot::seq_len_q] = const_cast<std::int32_t*>(lengths.q);
  ptr[Slot::seq_len_kv] = const_cast<std::int32_t*>(lengths.kv);

  if (!forward) {
    ptr[Slot::d_o] = p.d_o.data;
    ptr[Slot::dq] = p.dq.data;
    ptr[Slot::dk] = p.dk.data;
    ptr[Slot::dv] = p.dv.data;
    if (plan.backward_prepare) {
      const std::int64_t strides[3] = {p.lse.strides[0], p.lse.strides[1], p.lse.strides[2]};
      prepare_backward_stats(static_cast<const float*>(p.lse.data), strides, d.B, d.N, d.T, ws_stats, stream);
    }
  }

  if (p.fp8()) place_fp8_scales(p, reinterpret_cast<float*>(base + layout.amax), ptr);

  void* graph_workspace = entry.workspace > 0 ? base + layout.graph : nullptr;
  if (plan.batch_chunks > 1) {
    run_in_batch_chunks(p, plan, entry, ptr, reinterpret_cast<float*>(base + layout.amax) + kAmaxSlots,
                        graph_workspace, h, stream);
  } else if (auto error = execute(*entry.graph, h, ptr, graph_workspace)) {
    core::fail(ErrorCode::device_error, "cudnn: cuDNN failed to run the {} graph: {}",
               forward ? "forward" : "backward", *error);
  }

  if (forward && plan.forward_fixup) {
    ForwardFixup f;
    f.B = d.B, f.N = d.N, f.T = d.T, f.S = d.S, f.Hv = d.Hv;
    f.mask = p.mask;
    f.lengths = plan.user_lengths ? lengths : Lengths{};
    // FP8 calls reach here only to copy their LSE (rows without keys are refused): O, 1-byte, is not touched.
    if (!p.fp8()) f.o = row_tensor(p.o);
    f.stats = plan.spec.stats ? static_cast<const float*>(ptr[Slot::stats]) : nullptr;
    if (p.has_lse()) {
      f.lse = static_cast<float*>(p.lse.data);
      for (int k = 0; k < 3; ++k) f.lse_strides[k] = p.lse.strides[k];
    }
    f.copy_stats = p.has_lse() && plan.stats_in_workspace;
    f.check_stats = plan.check_stats;
    forward_fixup(f, stream);
  }
  if (!forward && plan.backward_fixup) {
    BackwardFixup f;
    f.B = d.B, f.N = d.N, f.K = d.K, f.T = d.T, f.S = d.S, f.Hqk = d.Hqk, f.Hv = d.Hv;
    f.mask = p.mask;
    f.lengths = plan.user_lengths ? lengths : Lengths{};
    f.dq = row_tensor(p.dq);
    f.dk = row_tensor(p.dk);
    f.dv = row_tensor(p.dv);
    backward_fixup(f, stream);
  }
}

class CudnnPath final : public core::Path {
 public:
  std::string_view name() const override { return kName; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "cuDNN fused attention via cudnn-frontend graphs (cached per shape); bf16/f16, fwd+bwd, causal/window/"
           "lengths/bias, GQA/MQA; cc ≥ 8.0; FP8 (e4m3/e5m2, per-tensor scales) fwd+bwd on cc ≥ 9.0";
  }
  std::optional<std::string> unavailable() const override {
    if (auto why = cuda_unavailable()) return why;
    return library_unavailable();
  }
  std::optional<std::string> why_not(const core::Problem& p) const override {
    Plan plan;
    return make_plan(p, runtime_for(p.device_index), plan);
  }
  core::Verdict plan(Context::Impl& ctx, const core::Problem& p) const override {
    core::Verdict verdict;
    with_graph(ctx, p, [&](const Call& call) {
      verdict.reason = call.reason;
      verdict.workspace_bytes = call.layout.total;
    });
    return verdict;
  }
  std::optional<std::string> run_if_able(Context::Impl& ctx, const core::Problem& p) const override {
    std::optional<std::string> reason;
    with_graph(ctx, p, [&](Call& call) {
      if ((reason = call.reason)) return;  // before anything is placed or launched
      // The plan is the context's: its use is ordered like the context's workspace, also with a caller workspace.
      OrderedUse use(ctx, p.device_index, call.stream, kName);
      ScratchLease scratch(ctx, p, call.layout.total, call.stream, kName, &use);
      run_call(p, call.plan, *call.entry, call.layout, scratch.data(), call.handle, call.stream);
      if (use.capturing()) call.entry->captured = true;
    });
    return reason;
  }

 private:
  // What one call works out before it launches: the plan (once per call), the graph and its scratch layout.
  struct Call {
    std::optional<std::string> reason;  // set when the call cannot run; nothing else is then
    Plan plan;
    Entry* entry = nullptr;
    Layout layout;
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
  };

  // Runs `fn(call)` with the context's cudnn state locked and the call's device current. Everything a call can run
  // into before its launch is found here, for plan() and run_if_able() alike: the rules, the handle and the graph
  // (neither made while the stream captures), the scratch.
  template <class Fn>
  static void with_graph(Context::Impl& ctx, const core::Problem& p, Fn&& fn) {
    Call call;
    if ((call.reason = make_plan(p, runtime_for(p.device_index), call.plan))) return fn(call);
    DeviceGuard guard(p.device_index);
    GraphLookup found = find_graph(ctx, p.device_index, call.plan.spec, *p.tuning);
    call.stream = found.stream;
    call.handle = found.handle;
    call.entry = found.entry;
    if ((call.reason = std::move(found.reason))) return fn(call);
    call.layout = layout_of(p, call.plan, *call.entry);
    call.reason = scratch_refusal(ctx, p, call.layout.total, call.stream);
    fn(call);
  }
};

}  // namespace
}  // namespace cudnn

const core::Path& cudnn_path() {
  static const cudnn::CudnnPath path;
  return path;
}

}  // namespace attnlab::cuda
