// Support rules of the cudnn path and the mapping of attnlab's options onto cuDNN's.
//
// The rules mirror the checks cudnn-frontend 1.23 runs before building (node/sdpa_support_surface.h and the
// backward node's pre_validate_node), so that an unsupported call is refused here with a reason, before any
// graph is built; what they cannot foresee surfaces as the frontend's own message when the graph is built.
//
// Mask mapping (derived from utils/attn_score_modifiers.h, sliding_window_mask): with d(i) the diagonal
// (i, or i + kv_len − q_len bottom-right), cuDNN keeps key j iff
//   right bound:  d(i) + right_bound ≥ j            (comparison CMP_GE, row side shifted by right_bound)
//   left bound:   j + left_bound > d(i)              (comparison CMP_GT, column side shifted by left_bound)
// attnlab keeps j iff d(i) − window_left ≤ j ≤ d(i) + window_right, so
//   right_bound = window_right (0 for causal),   left_bound = window_left + 1.
#include "cuda/cudnn/cudnn_plan.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/error.h"
#include "core/mask.h"
#include "cuda/cudnn/fixup_kernels.h"

namespace attnlab::cuda::cudnn {
namespace {

using Strides = GraphSpec::Strides;

std::int64_t round_up8(std::int64_t x) { return (x + 7) / 8 * 8; }

// Strides of a rank-4 view with those of size-1 dimensions (never used to address anything) replaced by the
// value a packed layout would have: equal graphs for equal layouts, and no odd stride for cuDNN to refuse.
Strides canonical(const TensorView& t) {
  Strides s{t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
  if (t.shape[3] == 1) s[3] = 1;
  for (int d = 2; d >= 0; --d)
    if (t.shape[d] == 1) s[d] = round_up8(t.shape[d + 1] * s[d + 1]);
  return s;
}

// Our (B, L, H, D) order to cuDNN's logical (B, H, L, D).
Strides bhld(const Strides& s) { return {s[0], s[2], s[1], s[3]}; }

// cuDNN's kernels read and write rows with 16-byte vector accesses (and TMA on Hopper, whose global strides must be
// multiples of 16 bytes): base pointers 16-byte aligned, every stride but the last a multiple of 16 bytes.
std::optional<std::string> layout_rule(const char* name, const TensorView& t) {
  if (t.empty()) return std::nullopt;
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0)
    return fmt::format("{}.data must be 16-byte aligned for cuDNN", name);
  const Strides s = canonical(t);
  const std::int64_t per_16_bytes = 16 / std::int64_t(size_of(t.dtype));
  for (int d = 0; d < 3; ++d)
    if (s[d] <= 0 || s[d] % per_16_bytes != 0)
      return fmt::format("{}.strides[{}] = {} must be a positive multiple of {} elements (16 bytes) for cuDNN", name,
                         d, t.strides[d], per_16_bytes);
  return std::nullopt;
}

// Whether a (B, N, T) fp32 view is laid out exactly as cuDNN's packed Stats (B, N, T, 1) and aligned for it.
bool stats_layout(const TensorView& lse, const core::Dims& d) {
  if (reinterpret_cast<std::uintptr_t>(lse.data) % 16 != 0) return false;
  const std::int64_t packed[3] = {d.N * d.T, d.T, 1};
  for (int k = 0; k < 3; ++k)
    if (lse.shape[k] > 1 && lse.strides[k] != packed[k]) return false;
  return true;
}

std::optional<std::string> head_dim_rule(const core::Problem& p, const Runtime& rt) {
  const auto& d = p.dims;
  const int major = rt.cc / 10;
  const int v = rt.cudnn_version;
  if (d.Hqk % 8 != 0 || d.Hv % 8 != 0)
    return fmt::format("head dims must be multiples of 8 for cuDNN (Hqk = {}, Hv = {})", d.Hqk, d.Hv);
  if (p.direction == core::Direction::forward) {
    std::int64_t max = 256;
    if ((major == 8 && v <= 90900) || (major == 10 && v < 90900)) max = 128;
    if (d.Hqk > max || d.Hv > max)
      return fmt::format("head dims above {} unsupported by cuDNN {} on compute capability {}.{} (Hqk = {}, Hv = {})",
                         max, version_string(v), major, rt.cc % 10, d.Hqk, d.Hv);
    if (d.T == 1 && major == 10 && v <= 90900 && (d.Hqk > 128 || d.Hv > 128))
      return std::string("T = 1 with head dims above 128 needs cuDNN ≥ 9.10 on this GPU");
    return std::nullopt;
  }
  if (major == 9) {
    if (d.Hqk > 256 || d.Hv > 256)
      return fmt::format("backward head dims above 256 unsupported by cuDNN (Hqk = {}, Hv = {})", d.Hqk, d.Hv);
    if (v >= 91100 && v < 91300 && d.Hqk > 128 && d.Hqk <= 192 && d.Hv > 64 && d.Hv <= 128 && d.Hv != 128 &&
        d.Hqk != 192)
      return fmt::format("backward with Hqk = {}, Hv = {} unsupported by cuDNN {} (only 192 / 128 in that range)",
                         d.Hqk, d.Hv, version_string(v));
  } else if (major == 10 && v >= 91100 && d.Hqk == 192) {
    if (d.Hv != 128) return fmt::format("backward with Hqk = 192 needs Hv = 128 on this GPU (Hv = {})", d.Hv);
  } else if (d.Hqk > 128 || d.Hv > 128) {
    return fmt::format("backward head dims above 128 unsupported by cuDNN on compute capability {}.{} (Hqk = {}, "
                       "Hv = {})",
                       major, rt.cc % 10, d.Hqk, d.Hv);
  }
  if (d.T == 1 && d.S == 1) return std::string("backward with T = S = 1 unsupported by cuDNN");
  return std::nullopt;
}

// The diagonal band in cuDNN's terms; fills spec.bottom_right / left_bound / right_bound.
std::optional<std::string> band_rule(const core::Problem& p, const Runtime& rt, GraphSpec& spec) {
  const auto& d = p.dims;
  const MaskOptions& m = p.mask;
  const int v = rt.cudnn_version;
  // A bound that reaches past every key (even with per-batch lengths, |d(i)| < T + S) changes nothing: drop it,
  // which also keeps the values inside the int that cuDNN takes.
  const std::int64_t far = d.T + d.S;
  std::int64_t right = core::effective_window_right(m);
  if (right >= far) right = -1;
  std::int64_t left = m.window_left >= far ? -1 : m.window_left;
  spec.right_bound = right;
  spec.left_bound = left >= 0 ? left + 1 : -1;
  spec.bottom_right = m.align == MaskAlign::bottom_right && (left >= 0 || right >= 0);
  if ((left >= 0 || right > 0) && v < 90600)
    return fmt::format("sliding windows need cuDNN ≥ 9.6 (this runtime is {})", version_string(v));
  if (spec.bottom_right && v < 90600)
    return fmt::format("bottom-right masks need cuDNN ≥ 9.6 (this runtime is {})", version_string(v));
  // A left bound without a right one is refused before cuDNN 9.10.2 and hits a known bug in 9.14.0 (non-causal
  // sliding window, S > 1024). A right bound of T + S is the same mask and takes the well-trodden causal-like path.
  if (left >= 0 && right < 0 && (v < 91002 || v == 91400)) spec.right_bound = far;
  if (!p.bias.empty()) {
    if (spec.bottom_right && spec.right_bound >= 0)
      return std::string("a bias together with a bottom-right causal mask or window is unsupported by cuDNN");
    if (left >= 0 && v < 91002)
      return fmt::format("a bias together with a sliding window needs cuDNN ≥ 9.10.2 (this runtime is {})",
                         version_string(v));
  }
  if (p.direction == core::Direction::forward && d.T == 1 && spec.right_bound >= 0 && v <= 90900)
    return std::string("T = 1 with a causal mask or window needs cuDNN ≥ 9.10");
  return std::nullopt;
}

std::optional<std::string> softcap_rule(const core::Problem& p, const Runtime& rt, const GraphSpec& spec) {
  if (p.softcap <= 0.0f) return std::nullopt;
  // cuDNN applies a score modifier only with every built-in mask switched off (the frontend refuses the mix), and
  // its flexible-graph samples run softcap on plain attention on Hopper and newer: support exactly that.
  if (spec.left_bound >= 0 || spec.right_bound >= 0 || p.has_seqlens() || !p.bias.empty())
    return std::string("softcap unsupported together with causal/window masks, sequence lengths or a bias (cuDNN "
                       "disables its masks when a score modifier is set); use path=flash or cuda-naive");
  if (rt.cc < 90) return std::string("softcap needs compute capability ≥ 9.0 with cuDNN");
  if (rt.cudnn_version < 90400) return std::string("softcap needs cuDNN ≥ 9.4");
  return std::nullopt;
}

bool is_fp8(DType d) { return d == DType::e4m3 || d == DType::e5m2; }

// cuDNN's FP8 SDPA (cudnn-frontend 1.23: node/sdpa_support_surface.h for the forward, node/sdpa_fp8_bwd.h for the
// backward), as it runs on each architecture. Checked before the layout and bias rules, which would otherwise
// answer an FP8 call in bf16 terms.
std::optional<std::string> fp8_rule(const core::Problem& p, const Runtime& rt) {
  const auto& d = p.dims;
  const bool forward = p.direction == core::Direction::forward;
  const int major = rt.cc / 10;
  const int v = rt.cudnn_version;
  if (rt.cc < 90)
    return fmt::format("FP8 attention needs compute capability ≥ 9.0 (cuDNN's FP8 SDPA), this GPU has {}.{}",
                       rt.cc / 10, rt.cc % 10);
  if (v < 90100 || v == 91000)
    return fmt::format("FP8 attention needs cuDNN ≥ 9.1 other than 9.10.0 (this runtime is {})", version_string(v));
  // The sdpa_fp8 nodes give P the inputs' type: e5m2 inputs would quantize P in e5m2, not as docs/design.md §7 says.
  if (p.dtype != DType::e4m3)
    return fmt::format("FP8 inputs must be e4m3 for cuDNN (P is quantized in the inputs' format), got {}",
                       to_string(p.dtype));
  if (!p.bias.empty()) return std::string("FP8 attention takes no bias in cuDNN");
  if (p.softcap > 0.0f) return std::string("softcap unsupported with FP8 in cuDNN");
  if (d.Hqk % 16 != 0 || d.Hv % 16 != 0)
    return fmt::format("FP8 head dims must be multiples of 16 for cuDNN (Hqk = {}, Hv = {})", d.Hqk, d.Hv);
  const bool d192_128 = d.Hqk == 192 && d.Hv == 128;
  // On Blackwell the frontend routes every FP8 backward up to 192 / 128 to its deterministic kernels, which need 9.19.
  if (!forward && major == 10 && v < 91900 && d.Hqk <= 192 && d.Hv <= 128)
    return fmt::format("the FP8 backward on compute capability {}.{} needs cuDNN ≥ 9.19 (this runtime is {})", major,
                       rt.cc % 10, version_string(v));
  if (major >= 10) {
    if ((d.Hqk > 128 || d.Hv > 128) && !(d192_128 && (!forward || v >= 91900)))
      return fmt::format("FP8 head dims above 128 (other than 192 / 128) unsupported by cuDNN on compute capability "
                         "{}.{} (Hqk = {}, Hv = {})",
                         major, rt.cc % 10, d.Hqk, d.Hv);
  } else if (forward) {
    if (d.Hqk > 256 || d.Hv > 256)
      return fmt::format("FP8 head dims above 256 unsupported by cuDNN (Hqk = {}, Hv = {})", d.Hqk, d.Hv);
  } else if (d.Hqk != 128 || d.Hv != 128) {
    return fmt::format("the FP8 backward on compute capability {}.{} needs Hqk = Hv = 128 in cuDNN (Hqk = {}, "
                       "Hv = {})",
                       major, rt.cc % 10, d.Hqk, d.Hv);
  } else if (d.T % 64 != 0) {
    // Measured: with T = 1, 113, 203 and 1023, cuDNN 9.14's Hopper FP8 backward left columns 16… of the last query
    // row's dQ unwritten; multiples of 64 came out right (docs/perf-notes.md, FP8).
    return fmt::format("the FP8 backward on compute capability {}.{} needs T a multiple of 64 (T = {}): cuDNN's "
                       "kernel leaves part of the last query row's dQ unwritten otherwise",
                       major, rt.cc % 10, d.T);
  } else if (d.S < 64) {
    // Measured: with S = 1 the dK, dV values came out right but amax_dk and amax_dp were several times the true
    // maxima (the padding of the one key tile taken in); S = 113 and longer came out right.
    return fmt::format("the FP8 backward on compute capability {}.{} needs S ≥ 64 (S = {}): cuDNN's amax outputs "
                       "take in the padding of a partial key tile otherwise",
                       major, rt.cc % 10, d.S);
  }
  // Measured: at Hqk 64, cuDNN 9.14's Hopper FP8 forward returned a wrong O once the grid had more 128-row query
  // tiles than the GPU has SMs (B·N·T = 32768 and above on the H200's 132 SMs; 16384 and below came out right; Hqk
  // 128 right at every size tried). Until that is understood, smaller head dims run one wave per graph: make_plan
  // splits the batch (one_wave_batches), and one batch must fit.
  if (forward && major == 9 && d.Hqk < 128 && rt.sm_count > 0 && d.N * ((d.T + 127) / 128) > rt.sm_count)
    return fmt::format("the FP8 forward with Hqk = {} on compute capability {}.{} needs N·⌈T/128⌉ ≤ {} (the GPU's "
                       "SMs; here {}): beyond one wave of query tiles cuDNN returned a wrong O, and a batch is the "
                       "smallest piece the path splits a call into (use Hqk 128, or fewer heads per call)",
                       d.Hqk, major, rt.cc % 10, rt.sm_count, d.N * ((d.T + 127) / 128));
  if (forward && d.T == 1 && major == 9)
    return std::string("the FP8 forward with T = 1 is unsupported by cuDNN on compute capability 9.x (it runs one "
                       "query row on its sm_80 decode kernels, which have no FP8)");
  // On Hopper cuDNN writes FP8 outputs only: O (forward) and dQ, dK, dV (backward).
  const DType out = forward ? p.o.dtype : p.dq.dtype;
  if (!is_fp8(out) && (major < 10 || v < 91300))
    return fmt::format("FP8 attention with {} {} needs compute capability ≥ 10.0 and cuDNN ≥ 9.13 (this GPU: {}.{}, "
                       "cuDNN {}); pass an e4m3 {} with its scale and dequantize it (attnlab::dequantize)",
                       to_string(out), forward ? "O" : "gradients", major, rt.cc % 10, version_string(v),
                       forward ? "O" : "dq, dk, dv");
  return std::nullopt;
}

// The FP8 graphs' masks: causal top-left, or bottom-right where cuDNN has it (Blackwell) or where it is the same
// mask (T = S without per-batch lengths); no query row without keys, since cuDNN's FP8 kernels define neither O
// nor the amax there.
std::optional<std::string> fp8_mask_rule(const core::Problem& p, const Runtime& rt, GraphSpec& spec,
                                         bool empty_rows) {
  const auto& d = p.dims;
  if (spec.bottom_right && d.T == d.S && !p.has_seqlens()) spec.bottom_right = false;
  if (spec.bottom_right && rt.cc < 100)
    return std::string("bottom-right causal masks with FP8 need compute capability ≥ 10.0 in cuDNN (T ≠ S here; "
                       "with T = S the mask is the top-left one)");
  if (spec.left_bound >= 0)
    return std::string("sliding windows with FP8 unsupported in cuDNN; use a causal mask or none");
  if (p.has_seqlens())
    return std::string("per-batch sequence lengths with FP8 are not supported (cuDNN's FP8 kernels leave padded rows "
                       "and their amax undefined)");
  if (empty_rows) return std::string("FP8 with a mask that leaves a query row without keys is unsupported");
  if (p.direction == core::Direction::backward && spec.bottom_right && (d.T > d.S || d.T % 64 || d.S % 64))
    return std::string("the FP8 backward with a bottom-right mask needs T ≤ S and T, S multiples of 64 in cuDNN");
  return std::nullopt;
}

// The batches per graph of an FP8 forward that must stay within one wave (see fp8_rule): the largest divisor of B
// whose query tiles fit in the GPU's SMs, so that every chunk has the same shape and one graph serves them all.
std::int64_t one_wave_batches(const core::Dims& d, int sm_count) {
  const std::int64_t per_batch = d.N * ((d.T + 127) / 128);
  std::int64_t batches = std::min<std::int64_t>(d.B, std::max<std::int64_t>(1, sm_count / per_batch));
  while (d.B % batches != 0) --batches;
  return batches;
}

}  // namespace

std::optional<std::string> head_dims_and_band(const core::Problem& p, const Runtime& rt, GraphSpec& spec) {
  if (auto why = head_dim_rule(p, rt)) return why;
  return band_rule(p, rt, spec);
}

std::string version_string(int v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); }

std::optional<std::string> make_plan(const core::Problem& p, const Runtime& rt, Plan& plan) {
  const auto& d = p.dims;
  const bool forward = p.direction == core::Direction::forward;
  if (p.dtype == DType::f32) return std::string("f32 inputs unsupported; use bf16/f16 or path=flash|cuda-naive");
  if (p.dtype != DType::f16 && p.dtype != DType::bf16 && !p.fp8())
    return fmt::format("{} inputs unsupported; use bf16, f16 or e4m3 / e5m2", to_string(p.dtype));
  if (rt.cc < 80)
    return fmt::format("needs compute capability ≥ 8.0, this GPU has {}.{}", rt.cc / 10, rt.cc % 10);
  if (!p.bool_mask.empty())
    return std::string("boolean masks unsupported (cuDNN takes no boolean bias); pass an additive bias with −inf "
                       "where a key is hidden");
  if (p.fp8()) {
    if (auto why = fp8_rule(p, rt)) return why;
  } else if (auto why = head_dim_rule(p, rt)) {
    return why;
  }
  if (d.T + d.S > INT_MAX || d.B > INT_MAX) return std::string("T + S and B must fit cuDNN's 32-bit lengths");

  const std::pair<const char*, const TensorView*> tensors[] = {
      {"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}, {"d_o", &p.d_o}, {"dq", &p.dq}, {"dk", &p.dk}, {"dv", &p.dv}};
  for (auto [name, t] : tensors)
    if (auto why = layout_rule(name, *t)) return why;
  if (!p.bias.empty()) {
    if (p.bias.dtype != p.dtype)
      return fmt::format("the bias must have the inputs' dtype {} for cuDNN, got {}", to_string(p.dtype),
                         to_string(p.bias.dtype));
    if (auto why = layout_rule("bias", p.bias))
      return *why + " (allocate the bias rows padded to a multiple of 8 and pass a view of the first S)";
  }

  plan = Plan{};
  GraphSpec& spec = plan.spec;
  spec.direction = p.direction;
  spec.dtype = p.dtype;
  spec.device_cc = rt.cc;
  spec.B = d.B, spec.T = d.T, spec.S = d.S, spec.N = d.N, spec.K = d.K, spec.Hqk = d.Hqk, spec.Hv = d.Hv;
  spec.q = bhld(canonical(p.q));
  spec.k = bhld(canonical(p.k));
  spec.v = bhld(canonical(p.v));
  spec.o = bhld(canonical(p.o));
  if (!forward) {
    spec.d_o = bhld(canonical(p.d_o));
    spec.dq = bhld(canonical(p.dq));
    spec.dk = bhld(canonical(p.dk));
    spec.dv = bhld(canonical(p.dv));
  }
  spec.scale = p.scale;
  spec.softcap = p.softcap;
  if (!p.bias.empty()) {
    spec.bias = true;
    spec.bias_dtype = p.bias.dtype;
    spec.bias_b = p.bias.shape[0];
    spec.bias_n = p.bias.shape[1];
    spec.bias_strides = canonical(p.bias);  // already (B, N, T, S): no reordering
  }
  if (p.fp8()) {
    spec.o_dtype = p.o.dtype;
    spec.d_o_dtype = forward ? p.o.dtype : p.d_o.dtype;
    spec.grad_dtype = forward ? p.o.dtype : p.dq.dtype;
    if (forward && rt.cc / 10 == 9 && d.Hqk < 128 && rt.sm_count > 0) {
      spec.B = one_wave_batches(d, rt.sm_count);
      plan.batch_chunks = d.B / spec.B;
    }
  }
  if (auto why = band_rule(p, rt, spec)) return why;
  if (auto why = softcap_rule(p, rt, spec)) return why;

  // Padding mask. With the caller's lengths, or with constant ones where cuDNN refuses a mask otherwise: a window or
  // a bottom-right band with T > S is only accepted with a padding mask, and for a backward with S % 128 ≠ 0 up to
  // cuDNN 9.15 the frontend would add one itself — copying host memory on every call; our constant lengths live on
  // the device with the graph instead.
  plan.user_lengths = p.has_seqlens();
  if (!plan.user_lengths && spec.softcap == 0.0f) {
    const bool band_needs_padding =
        d.T > d.S && (spec.left_bound >= 0 || (spec.bottom_right && spec.right_bound >= 0));
    const bool backward_workaround = !forward && d.S % 128 != 0 && rt.cudnn_version <= 91500;
    plan.full_lengths = band_needs_padding || backward_workaround;
  }
  spec.padding = plan.user_lengths || plan.full_lengths;

  // Rows that can see no key and keys that no row sees, by our own mask rule (the same one the fix-ups apply).
  if (plan.user_lengths) {
    plan.empty_rows = plan.unseen_keys = true;  // rows ≥ q_len and keys ≥ kv_len
  } else {
    plan.empty_rows = core::visible_keys(p.mask, 0, d.T, d.S).empty() ||
                      core::visible_keys(p.mask, d.T - 1, d.T, d.S).empty();
    const core::KeyRange seen = seen_keys(p.mask, d.T, d.S);
    plan.unseen_keys = seen.begin > 0 || seen.end < d.S;
  }
  plan.check_stats = !p.bias.empty();
  if (p.fp8()) {
    if (auto why = fp8_mask_rule(p, rt, spec, plan.empty_rows)) return why;
    plan.full_lengths = spec.padding = false;  // FP8 graphs take no padding mask (fp8_mask_rule)
    plan.unseen_keys = false;  // cuDNN sums dK, dV over the rows that see a key: 0 for a key no row sees
  }

  if (forward) {
    const bool lse_direct = p.has_lse() && stats_layout(p.lse, d);
    spec.stats = p.has_lse() || plan.check_stats;
    plan.stats_in_workspace = spec.stats && !lse_direct;
    plan.forward_fixup = plan.empty_rows || plan.check_stats || (p.has_lse() && !lse_direct);
  } else {
    spec.stats = true;
    plan.backward_prepare = plan.empty_rows || plan.check_stats || !stats_layout(p.lse, d);
    plan.stats_in_workspace = plan.backward_prepare;
    plan.backward_fixup = plan.empty_rows || plan.unseen_keys;
  }
  return std::nullopt;
}

}  // namespace attnlab::cuda::cudnn
