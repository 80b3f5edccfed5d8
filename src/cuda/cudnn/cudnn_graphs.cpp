// Building and running cuDNN SDPA graphs through cudnn-frontend. This is the only file that includes
// cudnn_frontend.h; the rest of the path talks to it through cudnn_graphs.h.
//
// A forward graph is sdpa(Q, K, V) → O (+ Stats); a backward graph is sdpa_backward(Q, K, V, O, dO, Stats) →
// dQ, dK, dV. Both take the same options: attention scale, bias, padding mask with per-batch lengths, diagonal
// band (causal / sliding window, top-left or bottom-right), and optionally tanh soft-capping as a score modifier.
// FP8 graphs are their sdpa_fp8 counterparts, with per-tensor scales in and amaxes out; of the options they take
// the scale and the causal band (cudnn_plan.cpp refuses the rest for FP8).
#include "cuda/cudnn/cudnn_graphs.h"

#include <cudnn_frontend.h>

#include <cstring>
#include <exception>
#include <vector>

namespace attnlab::cuda::cudnn {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

class Graph {
 public:
  std::shared_ptr<fe::graph::Graph> graph;
  // user_slots[i] is the Slot of the i-th pointer execute() passes: the frontend wants its user pointers sorted
  // by UID, and we resolve that order once here instead of building a map on every call.
  std::vector<int> user_slots;
  std::size_t workspace = 0;
};

namespace {

// The UID of a slot. Fixed UIDs let the same code fill the variant pack of every graph; they sit far above the
// small UIDs the frontend hands out to its own internal tensors (counting up from 1).
constexpr std::int64_t kUidBase = 1 << 20;
std::int64_t uid_of(int slot) { return kUidBase + std::int64_t(slot); }

bool is_fp8(DType d) { return d == DType::e4m3 || d == DType::e5m2; }

// Whether the graph of `s` has a tensor in `slot` that the caller provides.
bool provides(const GraphSpec& s, int slot) {
  const bool forward = s.direction == core::Direction::forward;
  const bool fp8 = s.fp8();
  switch (slot) {
    case Slot::q: case Slot::k: case Slot::v: case Slot::o: return true;
    case Slot::stats: return forward ? s.stats : true;
    case Slot::bias: return s.bias;
    case Slot::seq_len_q: case Slot::seq_len_kv: return s.padding;
    case Slot::d_o: case Slot::dq: case Slot::dk: case Slot::dv: return !forward;
    case Slot::descale_q: case Slot::descale_k: case Slot::descale_v: case Slot::descale_s: case Slot::scale_s:
      return fp8;
    case Slot::amax_s: case Slot::amax_o: return fp8 && forward;
    case Slot::scale_o: return fp8 && forward && is_fp8(s.o_dtype);
    case Slot::descale_o: case Slot::descale_do: case Slot::descale_dp: case Slot::scale_dp: case Slot::amax_dp:
    case Slot::amax_dq: case Slot::amax_dk: case Slot::amax_dv:
      return fp8 && !forward;
    case Slot::scale_dq: case Slot::scale_dk: case Slot::scale_dv: return fp8 && !forward && is_fp8(s.grad_dtype);
    case Slot::ragged_q: case Slot::ragged_o: return s.ragged_q;
    case Slot::ragged_k: case Slot::ragged_v: return s.ragged_kv;
    case Slot::page_table_k: case Slot::page_table_v: return s.paged;
    default: return false;
  }
}

fe::DataType_t fe_type(DType dtype) {
  switch (dtype) {
    case DType::f16: return fe::DataType_t::HALF;
    case DType::bf16: return fe::DataType_t::BFLOAT16;
    case DType::e4m3: return fe::DataType_t::FP8_E4M3;
    case DType::e5m2: return fe::DataType_t::FP8_E5M2;
    default: return fe::DataType_t::FLOAT;
  }
}

std::vector<std::int64_t> vec(const GraphSpec::Strides& s) { return {s[0], s[1], s[2], s[3]}; }

TensorPtr input(fe::graph::Graph& g, const char* name, int slot, std::vector<std::int64_t> dims,
                std::vector<std::int64_t> strides, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid_of(slot))
                      .set_dim(std::move(dims))
                      .set_stride(std::move(strides))
                      .set_data_type(type));
}

void mark_output(const TensorPtr& t, int slot, std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                 fe::DataType_t type) {
  t->set_output(true).set_uid(uid_of(slot)).set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(
      type);
}

// Stats are (B, N, T, 1) fp32, packed; the path routes them through its workspace when the caller's LSE is not.
std::vector<std::int64_t> stats_dims(const GraphSpec& s) { return {s.B, s.N, s.T, 1}; }
std::vector<std::int64_t> stats_strides(const GraphSpec& s) { return {s.N * s.T, s.T, 1, 1}; }

// Options shared by SDPA_attributes and SDPA_backward_attributes (same setter names on both).
template <class Attributes>
void set_options(Attributes& a, fe::graph::Graph& g, const GraphSpec& s) {
  a.set_attn_scale(s.scale);
  if (s.bias) {
    a.set_bias(input(g, "bias", Slot::bias, {s.bias_b, s.bias_n, s.T, s.S}, vec(s.bias_strides),
                     fe_type(s.bias_dtype)));
  }
  if (s.padding) {
    // (B, 1, 1, 1) int32 lengths. cuDNN also uses them to place the bottom-right diagonal per batch.
    a.set_padding_mask(true);
    a.set_seq_len_q(input(g, "seq_len_q", Slot::seq_len_q, {s.B, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32));
    a.set_seq_len_kv(input(g, "seq_len_kv", Slot::seq_len_kv, {s.B, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32));
  }
  if (s.left_bound >= 0 || s.right_bound >= 0) {
    a.set_diagonal_alignment(s.bottom_right ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                            : fe::DiagonalAlignment_t::TOP_LEFT);
  }
  if (s.left_bound >= 0) a.set_diagonal_band_left_bound(int(s.left_bound));
  if (s.right_bound >= 0) a.set_diagonal_band_right_bound(int(s.right_bound));
}

std::shared_ptr<fe::graph::Graph> new_graph(const GraphSpec& s) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// Q (B, N, T, Hqk), K (B, K, S, Hqk), V (B, K, S, Hv): cuDNN's logical (batch, heads, sequence, head dim) order
// over our BTNH memory, through the strides.
struct QKV {
  TensorPtr q, k, v;
};
// A paged graph's K and V are the caches instead: (pages, K, page_size, H).
QKV qkv_inputs(fe::graph::Graph& g, const GraphSpec& s) {
  const auto io = fe_type(s.dtype);
  const std::int64_t kv_batches = s.paged ? s.pages : s.B, kv_rows = s.paged ? s.page_size : s.S;
  return {input(g, "Q", Slot::q, {s.B, s.N, s.T, s.Hqk}, vec(s.q), io),
          input(g, "K", Slot::k, {kv_batches, s.K, kv_rows, s.Hqk}, vec(s.k), io),
          input(g, "V", Slot::v, {kv_batches, s.K, kv_rows, s.Hv}, vec(s.v), io)};
}

// A (B + 1, 1, 1, 1) int32 tensor of element offsets: where batch b's rows of a ragged tensor begin.
TensorPtr ragged_offsets(fe::graph::Graph& g, const char* name, int slot, std::int64_t B) {
  return input(g, name, slot, {B + 1, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32);
}

// Packed and paged layouts of the serving calls (GraphSpec::ragged_q, ragged_kv, paged) on a forward graph's inputs.
void set_serving_layouts(fe::graph::Graph& g, const GraphSpec& s, const QKV& in, fe::graph::SDPA_attributes& a) {
  if (s.ragged_q) in.q->set_ragged_offset(ragged_offsets(g, "Q_offsets", Slot::ragged_q, s.B));
  if (s.ragged_kv) {
    in.k->set_ragged_offset(ragged_offsets(g, "K_offsets", Slot::ragged_k, s.B));
    in.v->set_ragged_offset(ragged_offsets(g, "V_offsets", Slot::ragged_v, s.B));
  }
  if (s.paged) {
    const std::vector<std::int64_t> dims{s.B, 1, s.pages_per_sequence, 1};
    const std::vector<std::int64_t> strides{s.pages_per_sequence, s.pages_per_sequence, 1, 1};
    a.set_paged_attention_k_table(input(g, "page_table_K", Slot::page_table_k, dims, strides, fe::DataType_t::INT32));
    a.set_paged_attention_v_table(input(g, "page_table_V", Slot::page_table_v, dims, strides, fe::DataType_t::INT32));
    a.set_paged_attention_max_seq_len_kv(int(s.S));
  }
}

std::shared_ptr<fe::graph::Graph> forward_graph(const GraphSpec& s, fe::AttentionImplementation_t implementation) {
  auto g = new_graph(s);
  const QKV in = qkv_inputs(*g, s);
  auto attributes = fe::graph::SDPA_attributes().set_name("attnlab_sdpa").set_generate_stats(s.stats);
  set_options(attributes, *g, s);
  set_serving_layouts(*g, s, in, attributes);
  if (s.softcap > 0.0f) {
    // Soft-capping is cuDNN's own score-modifier pattern: s ↦ c·tanh(s / c), between the scale and the bias.
    auto cap = g->tensor(s.softcap, fe::graph::ScalarType::RUNTIME_PARAM);
    auto softcap = std::make_shared<fe::graph::attn::score_modifiers::Softcap>();
    attributes.set_score_mod([softcap, cap](std::shared_ptr<fe::graph::Graph> sub, TensorPtr score) {
      return softcap->forward(std::move(sub), std::move(score), cap);
    });
  }
  attributes.set_implementation(implementation);
  auto [o, stats] = g->sdpa(in.q, in.k, in.v, std::move(attributes));
  mark_output(o, Slot::o, {s.B, s.N, s.T, s.Hv}, vec(s.o), fe_type(s.dtype));
  if (s.ragged_q) o->set_ragged_offset(ragged_offsets(*g, "O_offsets", Slot::ragged_o, s.B));
  if (s.stats) mark_output(stats, Slot::stats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const GraphSpec& s) {
  auto g = new_graph(s);
  const auto io = fe_type(s.dtype);
  const QKV in = qkv_inputs(*g, s);
  auto o = input(*g, "O", Slot::o, {s.B, s.N, s.T, s.Hv}, vec(s.o), io);
  auto d_o = input(*g, "dO", Slot::d_o, {s.B, s.N, s.T, s.Hv}, vec(s.d_o), io);
  auto stats = input(*g, "Stats", Slot::stats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
  auto attributes = fe::graph::SDPA_backward_attributes().set_name("attnlab_sdpa_backward");
  set_options(attributes, *g, s);
  if (s.softcap > 0.0f) {
    // The backward modifier needs the forward one's saved tanh input: both share one Softcap object.
    auto cap = g->tensor(s.softcap, fe::graph::ScalarType::RUNTIME_PARAM);
    auto softcap = std::make_shared<fe::graph::attn::score_modifiers::Softcap>();
    attributes.set_score_mod([softcap, cap](std::shared_ptr<fe::graph::Graph> sub, TensorPtr score) {
      return softcap->forward(std::move(sub), std::move(score), cap);
    });
    attributes.set_score_mod_bprop([softcap, cap](std::shared_ptr<fe::graph::Graph> sub, TensorPtr grad) {
      return softcap->backward(std::move(sub), std::move(grad), cap);
    });
  }
  auto [dq, dk, dv] = g->sdpa_backward(in.q, in.k, in.v, o, d_o, stats, std::move(attributes));
  mark_output(dq, Slot::dq, {s.B, s.N, s.T, s.Hqk}, vec(s.dq), io);
  mark_output(dk, Slot::dk, {s.B, s.K, s.S, s.Hqk}, vec(s.dk), io);
  mark_output(dv, Slot::dv, {s.B, s.K, s.S, s.Hv}, vec(s.dv), io);
  return g;
}

// A per-tensor scale or amax: one f32, cuDNN's (1, 1, 1, 1).
TensorPtr scalar_input(fe::graph::Graph& g, const char* name, int slot) {
  return input(g, name, slot, {1, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::FLOAT);
}
void mark_scalar_output(const TensorPtr& t, int slot) {
  mark_output(t, slot, {1, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::FLOAT);
}
// The scale of an output: the caller's for an FP8 output, the constant 1 for a bf16/f16 one (nothing to scale).
TensorPtr output_scale(fe::graph::Graph& g, DType output, const char* name, int slot) {
  return is_fp8(output) ? scalar_input(g, name, slot) : g.tensor(1.0f);
}

// sdpa_fp8(Q, K, V, descales, scale_s, scale_o) → O, Stats, Amax_S, Amax_O (docs/design.md §7).
std::shared_ptr<fe::graph::Graph> forward_fp8_graph(const GraphSpec& s, fe::AttentionImplementation_t implementation) {
  auto g = new_graph(s);
  const QKV in = qkv_inputs(*g, s);
  auto descale_q = scalar_input(*g, "descale_q", Slot::descale_q);
  auto descale_k = scalar_input(*g, "descale_k", Slot::descale_k);
  auto descale_v = scalar_input(*g, "descale_v", Slot::descale_v);
  auto descale_s = scalar_input(*g, "descale_s", Slot::descale_s);
  auto scale_s = scalar_input(*g, "scale_s", Slot::scale_s);
  auto scale_o = output_scale(*g, s.o_dtype, "scale_o", Slot::scale_o);
  auto attributes = fe::graph::SDPA_fp8_attributes().set_name("attnlab_sdpa_fp8").set_generate_stats(s.stats);
  set_options(attributes, *g, s);
  attributes.set_implementation(implementation);
  auto [o, stats, amax_s, amax_o] = g->sdpa_fp8(in.q, in.k, in.v, descale_q, descale_k, descale_v, descale_s,
                                                scale_s, scale_o, std::move(attributes));
  mark_output(o, Slot::o, {s.B, s.N, s.T, s.Hv}, vec(s.o), fe_type(s.o_dtype));
  if (s.stats) mark_output(stats, Slot::stats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
  mark_scalar_output(amax_s, Slot::amax_s);
  mark_scalar_output(amax_o, Slot::amax_o);
  return g;
}

// sdpa_fp8_backward(Q, K, V, O, dO, Stats, descales, scales) → dQ, dK, dV and their amaxes, Amax_dP.
std::shared_ptr<fe::graph::Graph> backward_fp8_graph(const GraphSpec& s) {
  auto g = new_graph(s);
  const QKV in = qkv_inputs(*g, s);
  auto o = input(*g, "O", Slot::o, {s.B, s.N, s.T, s.Hv}, vec(s.o), fe_type(s.o_dtype));
  auto d_o = input(*g, "dO", Slot::d_o, {s.B, s.N, s.T, s.Hv}, vec(s.d_o), fe_type(s.d_o_dtype));
  auto stats = input(*g, "Stats", Slot::stats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
  auto descale_q = scalar_input(*g, "descale_q", Slot::descale_q);
  auto descale_k = scalar_input(*g, "descale_k", Slot::descale_k);
  auto descale_v = scalar_input(*g, "descale_v", Slot::descale_v);
  auto descale_o = scalar_input(*g, "descale_o", Slot::descale_o);
  auto descale_do = scalar_input(*g, "descale_do", Slot::descale_do);
  auto descale_s = scalar_input(*g, "descale_s", Slot::descale_s);
  auto descale_dp = scalar_input(*g, "descale_dp", Slot::descale_dp);
  auto scale_s = scalar_input(*g, "scale_s", Slot::scale_s);
  auto scale_dp = scalar_input(*g, "scale_dp", Slot::scale_dp);
  auto scale_dq = output_scale(*g, s.grad_dtype, "scale_dq", Slot::scale_dq);
  auto scale_dk = output_scale(*g, s.grad_dtype, "scale_dk", Slot::scale_dk);
  auto scale_dv = output_scale(*g, s.grad_dtype, "scale_dv", Slot::scale_dv);
  auto attributes = fe::graph::SDPA_fp8_backward_attributes().set_name("attnlab_sdpa_fp8_backward");
  set_options(attributes, *g, s);
  auto [dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp] =
      g->sdpa_fp8_backward(in.q, in.k, in.v, o, d_o, stats, descale_q, descale_k, descale_v, descale_o, descale_do,
                           descale_s, descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
                           std::move(attributes));
  const auto grad = fe_type(s.grad_dtype);
  mark_output(dq, Slot::dq, {s.B, s.N, s.T, s.Hqk}, vec(s.dq), grad);
  mark_output(dk, Slot::dk, {s.B, s.K, s.S, s.Hqk}, vec(s.dk), grad);
  mark_output(dv, Slot::dv, {s.B, s.K, s.S, s.Hv}, vec(s.dv), grad);
  mark_scalar_output(amax_dq, Slot::amax_dq);
  mark_scalar_output(amax_dk, Slot::amax_dk);
  mark_scalar_output(amax_dv, Slot::amax_dv);
  mark_scalar_output(amax_dp, Slot::amax_dp);
  return g;
}

// Failures of the machinery rather than of the case: not a reason to call the case unsupported.
bool is_device_failure(fe::error_code_t code) {
  return code == fe::error_code_t::CUDA_API_FAILED || code == fe::error_code_t::HANDLE_ERROR ||
         code == fe::error_code_t::INVALID_CUDA_DEVICE;
}

// Builds one graph; exceptions from the frontend (it throws on a few invalid combinations) become messages.
BuildResult try_build(cudnnHandle_t handle, const GraphSpec& s, fe::AttentionImplementation_t implementation) {
  BuildResult result;
  try {
    const bool forward = s.direction == core::Direction::forward;
    auto g = s.fp8() ? (forward ? forward_fp8_graph(s, implementation) : backward_fp8_graph(s))
                     : (forward ? forward_graph(s, implementation) : backward_graph(s));
    // validate → operation graph → heuristics (mode A, then the fallback list) → first plan cuDNN supports.
    auto status = g->build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
    std::int64_t bytes = 0;
    if (status.is_good()) status = g->get_workspace_size(bytes);
    if (status.is_bad()) {
      result.error = status.get_message();
      result.device_failure = is_device_failure(status.get_code());
      return result;
    }
    auto built = std::make_shared<Graph>();
    for (std::int64_t uid : g->get_variant_pack_uids_sorted()) {
      const std::int64_t slot = uid - kUidBase;
      if (slot < 0 || slot >= Slot::count || !provides(s, int(slot))) {
        result.error = "the built graph expects a tensor this path does not provide (uid " + std::to_string(uid) + ")";
        return result;
      }
      built->user_slots.push_back(int(slot));
    }
    built->graph = std::move(g);
    built->workspace = std::size_t(bytes);
    result.graph = std::move(built);
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  if (result.error.empty() && result.graph == nullptr) result.error = "graph build failed without a message";
  return result;
}

}  // namespace

BuildResult build_graph(cudnnHandle_t handle, const GraphSpec& spec) {
  BuildResult result = try_build(handle, spec, fe::AttentionImplementation_t::AUTO);
  // With AUTO the frontend may pick the newer "unified" SDPA node on feature checks alone; if the backend then has
  // no engine for it, the classic composite graph (the one every cuDNN 9 runs) is the one to try.
  if (result.graph == nullptr && spec.direction == core::Direction::forward) {
    BuildResult composite = try_build(handle, spec, fe::AttentionImplementation_t::COMPOSITE);
    if (composite.graph != nullptr) return composite;
  }
  return result;
}

std::size_t workspace_size(const Graph& graph) { return graph.workspace; }

std::optional<std::string> execute(const Graph& graph, cudnnHandle_t handle, const Pointers& pointers,
                                   void* workspace) {
  void* sorted[Slot::count];
  const int n = int(graph.user_slots.size());
  for (int i = 0; i < n; ++i) sorted[i] = pointers[graph.user_slots[i]];
  try {
    auto status = graph.graph->execute(handle, sorted, n, workspace);
    if (status.is_bad()) return status.get_message();
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------------------
// Cache keys
// ---------------------------------------------------------------------------------------------------------------
namespace {
std::int64_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return std::int64_t(u);
}
}  // namespace

GraphSpec::Key GraphSpec::key() const {
  Key key{};
  int at = 0;
  auto put = [&](std::int64_t x) { key[at++] = x; };
  auto put4 = [&](const Strides& s) {
    for (std::int64_t x : s) put(x);
  };
  put(std::int64_t(direction));
  put(std::int64_t(dtype));
  put(device_cc);
  put(B), put(T), put(S), put(N), put(K), put(Hqk), put(Hv);
  put4(q), put4(k), put4(v), put4(o);
  if (direction == core::Direction::backward) put4(d_o), put4(dq), put4(dk), put4(dv);
  put(stats);
  put(bias);
  if (bias) put(std::int64_t(bias_dtype)), put(bias_b), put(bias_n), put4(bias_strides);
  put(padding), put(bottom_right), put(left_bound), put(right_bound);
  put(float_bits(scale)), put(float_bits(softcap));
  if (fp8()) put(std::int64_t(o_dtype)), put(std::int64_t(d_o_dtype)), put(std::int64_t(grad_dtype));
  put(ragged_q), put(ragged_kv), put(paged);
  if (paged) put(pages), put(page_size), put(pages_per_sequence);
  return key;  // 66 words at most; unused words stay 0
}

std::size_t KeyHash::operator()(const GraphSpec::Key& key) const noexcept {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (std::int64_t x : key) {
    h ^= std::uint64_t(x);
    h *= 1099511628211ull;
  }
  return std::size_t(h);
}

}  // namespace attnlab::cuda::cudnn
