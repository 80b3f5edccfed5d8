// Conversions between the C ABI's plain structs (attnlab.h) and the C++ API's types (attention.h).
//
// The C side carries enums as int32_t, so every enum value is range-checked here and a bad one is reported with
// the field it came from ("options.bias.dtype: 9 is not an attnlab_dtype ..."). Everything else (shapes, strides,
// pointers, dtype combinations) is left to the core's validation, which checks C and C++ callers alike.
//
// The versioned structs (attnlab_options, attnlab_forward_args, attnlab_backward_args, attnlab_fp8_forward_scales,
// attnlab_fp8_backward_scales, attnlab_delayed_scaling_recipe; the serving ones in convert_serving.h) arrive with the struct_size the caller compiled them
// with. Layouts<S> is the one table of the sizes this library accepts; accept() copies the
// caller's prefix into a default-initialised current struct, so the fields an older caller lacks get their defaults.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "attnlab/attention.h"
#include "attnlab/attnlab.h"
#include "attnlab/fp8.h"
#include "core/error.h"

namespace attnlab::capi {

// ---------------------------------------------------------------------------------------------------------------
// Struct layouts by ABI version
// ---------------------------------------------------------------------------------------------------------------
struct Layout {
  int abi;           // the ATTNLAB_ABI_VERSION that introduced it
  std::size_t size;  // sizeof the struct as a caller of that version compiles it
};

// sizeof a struct whose fields end after `end` bytes: the end padded to the struct's alignment. Every versioned
// struct begins with a size_t, whose alignment no later field exceeds, so each layout has the current alignment.
template <class S>
constexpr std::size_t layout_size(std::size_t end) {
  return (end + alignof(S) - 1) / alignof(S) * alignof(S);
}
#define ATTNLAB_LAYOUT_END(S, last_field) \
  ::attnlab::capi::layout_size<S>(offsetof(S, last_field) + sizeof(S{}.last_field))

template <class S>
struct Layouts;

// Each entry is a released layout, accepted forever: entries are only appended, never removed or changed.
template <>
struct Layouts<attnlab_options> {
  static constexpr const char* name = "attnlab_options";
  static constexpr const char* init = "attnlab_options_init";
  static constexpr std::array<Layout, 1> known{{
      {1, ATTNLAB_LAYOUT_END(attnlab_options, path)},
  }};
};
template <>
struct Layouts<attnlab_forward_args> {
  static constexpr const char* name = "attnlab_forward_args";
  static constexpr const char* init = "attnlab_forward_args_init";
  static constexpr std::array<Layout, 3> known{{
      {1, ATTNLAB_LAYOUT_END(attnlab_forward_args, options)},
      {2, ATTNLAB_LAYOUT_END(attnlab_forward_args, workspace_bytes)},
      {3, ATTNLAB_LAYOUT_END(attnlab_forward_args, fp8)},
  }};
};
template <>
struct Layouts<attnlab_backward_args> {
  static constexpr const char* name = "attnlab_backward_args";
  static constexpr const char* init = "attnlab_backward_args_init";
  static constexpr std::array<Layout, 3> known{{
      {1, ATTNLAB_LAYOUT_END(attnlab_backward_args, options)},
      {2, ATTNLAB_LAYOUT_END(attnlab_backward_args, workspace_bytes)},
      {3, ATTNLAB_LAYOUT_END(attnlab_backward_args, fp8)},
  }};
};
template <>
struct Layouts<attnlab_fp8_forward_scales> {
  static constexpr const char* name = "attnlab_fp8_forward_scales";
  static constexpr const char* init = "attnlab_fp8_forward_scales_init";
  static constexpr std::array<Layout, 1> known{{
      {3, ATTNLAB_LAYOUT_END(attnlab_fp8_forward_scales, amax_o)},
  }};
};
template <>
struct Layouts<attnlab_fp8_backward_scales> {
  static constexpr const char* name = "attnlab_fp8_backward_scales";
  static constexpr const char* init = "attnlab_fp8_backward_scales_init";
  static constexpr std::array<Layout, 1> known{{
      {3, ATTNLAB_LAYOUT_END(attnlab_fp8_backward_scales, amax_dv)},
  }};
};
template <>
struct Layouts<attnlab_delayed_scaling_recipe> {
  static constexpr const char* name = "attnlab_delayed_scaling_recipe";
  static constexpr const char* init = "attnlab_delayed_scaling_recipe_init";
  static constexpr std::array<Layout, 1> known{{
      {3, ATTNLAB_LAYOUT_END(attnlab_delayed_scaling_recipe, amax_compute_algo)},
  }};
};
#undef ATTNLAB_LAYOUT_END

template <class S>
constexpr bool layouts_grow() {
  const auto& known = Layouts<S>::known;
  if (known.front().abi < 1 || known.back().abi > ATTNLAB_ABI_VERSION) return false;  // a new struct starts later
  if (known.front().size < sizeof(std::size_t)) return false;
  for (std::size_t i = 1; i < known.size(); ++i)
    if (known[i].abi <= known[i - 1].abi || known[i].size <= known[i - 1].size) return false;
  return true;
}

// A field appended without a new layout entry fails here, as does a new ATTNLAB_ABI_VERSION that changed no layout.
#define ATTNLAB_CHECK_LAYOUTS(S)                                                                                \
  static_assert(offsetof(S, struct_size) == 0 && std::is_same_v<decltype(S{}.struct_size), std::size_t>,       \
                #S ": struct_size must be the first field, a size_t");                                         \
  static_assert(Layouts<S>::known.back().size == sizeof(S),                                                   \
                #S " has fields past its newest known layout: add a layout here and bump ATTNLAB_ABI_VERSION"); \
  static_assert(layouts_grow<S>(), #S ": layouts must grow in ABI version and size, up to ATTNLAB_ABI_VERSION")
ATTNLAB_CHECK_LAYOUTS(attnlab_options);
ATTNLAB_CHECK_LAYOUTS(attnlab_forward_args);
ATTNLAB_CHECK_LAYOUTS(attnlab_backward_args);
ATTNLAB_CHECK_LAYOUTS(attnlab_fp8_forward_scales);
ATTNLAB_CHECK_LAYOUTS(attnlab_fp8_backward_scales);
ATTNLAB_CHECK_LAYOUTS(attnlab_delayed_scaling_recipe);
#undef ATTNLAB_CHECK_LAYOUTS
static_assert(std::max({Layouts<attnlab_options>::known.back().abi, Layouts<attnlab_forward_args>::known.back().abi,
                        Layouts<attnlab_backward_args>::known.back().abi,
                        Layouts<attnlab_fp8_forward_scales>::known.back().abi,
                        Layouts<attnlab_fp8_backward_scales>::known.back().abi,
                        Layouts<attnlab_delayed_scaling_recipe>::known.back().abi}) <= ATTNLAB_ABI_VERSION,
              "no layout newer than ATTNLAB_ABI_VERSION (the newest, ABI 5, is attnlab_varlen_forward_args': convert_serving.h)");
#if defined(__x86_64__)
// Released layouts are frozen: a field inserted into or changed inside one changes its size here.
static_assert(Layouts<attnlab_options>::known[0].size == 408, "attnlab_options' ABI 1 layout changed");
static_assert(Layouts<attnlab_forward_args>::known[0].size == 456, "attnlab_forward_args' ABI 1 layout changed");
static_assert(Layouts<attnlab_forward_args>::known[1].size == 480, "attnlab_forward_args' ABI 2 layout changed");
static_assert(Layouts<attnlab_backward_args>::known[0].size == 808, "attnlab_backward_args' ABI 1 layout changed");
static_assert(Layouts<attnlab_backward_args>::known[1].size == 832, "attnlab_backward_args' ABI 2 layout changed");
static_assert(Layouts<attnlab_forward_args>::known[2].size == 488, "attnlab_forward_args' ABI 3 layout changed");
static_assert(Layouts<attnlab_backward_args>::known[2].size == 840, "attnlab_backward_args' ABI 3 layout changed");
static_assert(Layouts<attnlab_fp8_forward_scales>::known[0].size == 72, "attnlab_fp8_forward_scales' ABI 3 layout");
static_assert(Layouts<attnlab_fp8_backward_scales>::known[0].size == 136, "attnlab_fp8_backward_scales' ABI 3 layout");
static_assert(Layouts<attnlab_delayed_scaling_recipe>::known[0].size == 32, "attnlab_delayed_scaling_recipe's ABI 3");
#endif

template <class S>
bool is_known_size(std::size_t size) {
  return std::any_of(Layouts<S>::known.begin(), Layouts<S>::known.end(),
                     [&](const Layout& l) { return l.size == size; });
}

// Far beyond any layout's growth: such a struct_size is garbage (typically the first pointer of a struct compiled
// against a header from before struct_size), not a newer layout.
inline constexpr std::size_t kImplausibleStructSize = std::size_t(1) << 16;

// Refuses a struct_size of no known layout, saying why. `where` names the call and the argument ("attnlab_forward:
// "); `in_init` is true for the size given to attnlab_*_init_sized, false for a struct's struct_size field.
template <class S>
void check_struct_size(std::size_t size, const std::string& where, bool in_init) {
  using L = Layouts<S>;
  if (is_known_size<S>(size)) return;
  const std::string field = in_init ? std::string("struct_size") : std::string(L::name) + ".struct_size";
  if (size == 0 && !in_init)
    core::invalid("{}{} was not set (it is 0): initialise the struct with {}", where, field, L::init);
  if (size >= kImplausibleStructSize)
    core::invalid("{}{} = {} is no struct size: {}", where, field, size,
                  in_init ? std::string("pass sizeof the struct")
                          : fmt::format("initialise the struct with {} (a caller compiled against an attnlab.h "
                                        "from before struct_size must be rebuilt)",
                                        L::init));
  if (size > sizeof(S))
    core::invalid("{}{} = {} is larger than this library's {}: the caller was compiled against a newer attnlab.h "
                  "than this library's (ABI {}); use a library at least as new as that header",
                  where, field, size, sizeof(S), ATTNLAB_ABI_VERSION);
  std::string sizes;
  for (const Layout& l : L::known) sizes += fmt::format("{}ABI {}: {}", sizes.empty() ? "" : ", ", l.abi, l.size);
  core::invalid("{}{} = {} is the size of no {} layout this library knows ({}){}", where, field, size, L::name,
                sizes, in_init ? "" : fmt::format(": initialise the struct with {}", L::init));
}

// The defaults of attnlab::Options, as C fields.
inline attnlab_options default_options() {
  const Options d;
  attnlab_options o{};
  o.struct_size = sizeof(attnlab_options);
  o.has_scale = d.scale.has_value() ? 1 : 0;
  o.scale = d.scale.value_or(0.0f);
  o.softcap = d.softcap;
  o.causal = d.mask.causal ? 1 : 0;
  o.mask_align = static_cast<std::int32_t>(d.mask.align);
  o.window_left = d.mask.window_left;
  o.window_right = d.mask.window_right;
  o.path = nullptr;  // "auto"
  return o;
}

// The defaults of attnlab::DelayedScalingRecipe, as C fields.
inline attnlab_delayed_scaling_recipe default_recipe() {
  const DelayedScalingRecipe d;
  attnlab_delayed_scaling_recipe r{};
  r.struct_size = sizeof(attnlab_delayed_scaling_recipe);
  r.margin = d.margin;
  r.format = static_cast<std::int32_t>(d.format);
  r.amax_history_len = static_cast<std::int64_t>(d.amax_history_len);
  r.amax_compute_algo = static_cast<std::int32_t>(d.amax_compute_algo);
  return r;
}

// The current struct with every field at its default (tensors absent, pointers NULL, no workspace).
template <class S>
S defaults() {
  if constexpr (std::is_same_v<S, attnlab_options>) {
    return default_options();
  } else if constexpr (std::is_same_v<S, attnlab_delayed_scaling_recipe>) {
    return default_recipe();
  } else {
    S s{};
    s.struct_size = sizeof(S);
    return s;
  }
}

// The caller's struct as a current one: the fields of its layout copied, the others at their defaults. Only
// struct_size bytes of `given` are read: an older caller's struct is that small.
template <class S>
S accept(const S* given, const std::string& where) {
  std::size_t size = 0;
  std::memcpy(&size, static_cast<const void*>(given), sizeof size);
  check_struct_size<S>(size, where, false);
  S current = defaults<S>();
  std::memcpy(static_cast<void*>(&current), static_cast<const void*>(given), size);
  current.struct_size = sizeof(S);
  return current;
}

// attnlab_*_init_sized: writes the defaults into exactly `size` bytes. A refused size still gets struct_size (when
// it covers that field), so that a call made with the struct is refused with the reason.
template <class S>
void init_sized(S* out, std::size_t size, const std::string& where) {
  if (out == nullptr) core::invalid("{}{} is NULL", where, Layouts<S>::name);
  if (!is_known_size<S>(size)) {
    if (size >= sizeof(std::size_t)) std::memcpy(static_cast<void*>(out), &size, sizeof size);
    check_struct_size<S>(size, where, true);
  }
  S current = defaults<S>();
  current.struct_size = size;
  std::memcpy(static_cast<void*>(out), &current, size);
}

// ---------------------------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------------------------

inline DType to_dtype(std::int32_t value, const std::string& field) {
  if (value < ATTNLAB_F32 || value > ATTNLAB_U8)
    core::invalid("{}: {} is not an attnlab_dtype (ATTNLAB_F32 = {} .. ATTNLAB_U8 = {})", field, value,
                  int(ATTNLAB_F32), int(ATTNLAB_U8));
  return static_cast<DType>(value);
}

inline Device to_device(std::int32_t value, const std::string& field) {
  if (value != ATTNLAB_CPU && value != ATTNLAB_CUDA)
    core::invalid("{}: {} is not an attnlab_device (ATTNLAB_CPU = {}, ATTNLAB_CUDA = {})", field, value,
                  int(ATTNLAB_CPU), int(ATTNLAB_CUDA));
  return static_cast<Device>(value);
}

inline MaskAlign to_mask_align(std::int32_t value, const std::string& field) {
  if (value != ATTNLAB_TOP_LEFT && value != ATTNLAB_BOTTOM_RIGHT)
    core::invalid("{}: {} is not an attnlab_mask_align (ATTNLAB_TOP_LEFT = {}, ATTNLAB_BOTTOM_RIGHT = {})", field,
                  value, int(ATTNLAB_TOP_LEFT), int(ATTNLAB_BOTTOM_RIGHT));
  return static_cast<MaskAlign>(value);
}

// rank 0 with data NULL is an absent tensor (the default TensorView).
inline TensorView to_cxx(const attnlab_tensor& t, const std::string& name) {
  TensorView v;
  if (t.rank == 0 && t.data == nullptr) return v;
  if (t.rank < 0 || t.rank > kMaxRank) core::invalid("{}.rank must be in 0..{}, got {}", name, kMaxRank, t.rank);
  v.data = t.data;
  v.dtype = to_dtype(t.dtype, name + ".dtype");
  v.device = to_device(t.device, name + ".device");
  v.device_index = t.device_index;
  v.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides[d];
  }
  return v;
}

// `given` NULL: every option at its default.
inline Options to_cxx(const attnlab_options* given, const std::string& where) {
  const attnlab_options o = given == nullptr ? default_options() : accept(given, where + "args->options: ");
  Options out;
  if (o.has_scale != 0) out.scale = o.scale;
  out.softcap = o.softcap;
  out.mask.causal = o.causal != 0;
  out.mask.align = to_mask_align(o.mask_align, "options.mask_align");
  out.mask.window_left = o.window_left;
  out.mask.window_right = o.window_right;
  out.q_seqlens = to_cxx(o.q_seqlens, "options.q_seqlens");
  out.kv_seqlens = to_cxx(o.kv_seqlens, "options.kv_seqlens");
  out.bias = to_cxx(o.bias, "options.bias");
  out.bool_mask = to_cxx(o.bool_mask, "options.bool_mask");
  out.path = o.path == nullptr ? std::string("auto") : std::string(o.path);
  return out;
}

inline std::optional<DeviceBuffer> workspace_to_cxx(std::int32_t has_workspace, void* data, std::size_t bytes) {
  if (has_workspace == 0) return std::nullopt;
  return DeviceBuffer{data, bytes};
}

// `given` NULL: no FP8 scales. Every field is a pointer the call checks (attention.h says which are required).
inline std::optional<Fp8ForwardScales> to_cxx(const attnlab_fp8_forward_scales* given, const std::string& where) {
  if (given == nullptr) return std::nullopt;
  const attnlab_fp8_forward_scales f = accept(given, where + "args->fp8: ");
  Fp8ForwardScales out;
  out.descale_q = f.descale_q, out.descale_k = f.descale_k, out.descale_v = f.descale_v;
  out.scale_s = f.scale_s, out.descale_s = f.descale_s, out.amax_s = f.amax_s;
  out.scale_o = f.scale_o, out.amax_o = f.amax_o;
  return out;
}

inline std::optional<Fp8BackwardScales> to_cxx(const attnlab_fp8_backward_scales* given, const std::string& where) {
  if (given == nullptr) return std::nullopt;
  const attnlab_fp8_backward_scales f = accept(given, where + "args->fp8: ");
  Fp8BackwardScales out;
  out.descale_q = f.descale_q, out.descale_k = f.descale_k, out.descale_v = f.descale_v;
  out.descale_o = f.descale_o, out.descale_do = f.descale_do;
  out.scale_s = f.scale_s, out.descale_s = f.descale_s;
  out.scale_dp = f.scale_dp, out.descale_dp = f.descale_dp;
  out.scale_dq = f.scale_dq, out.scale_dk = f.scale_dk, out.scale_dv = f.scale_dv;
  out.amax_dp = f.amax_dp, out.amax_dq = f.amax_dq, out.amax_dk = f.amax_dk, out.amax_dv = f.amax_dv;
  return out;
}

// The C++ scales into a caller's struct: only the fields of its layout (struct_size) are written.
template <class S>
void write_prefix(const S& current, S* out, const std::string& where) {
  if (out == nullptr) core::invalid("{}out is NULL", where);
  std::size_t size = 0;
  std::memcpy(&size, static_cast<const void*>(out), sizeof size);
  check_struct_size<S>(size, where, false);
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(&current), size);
  std::memcpy(static_cast<void*>(out), &size, sizeof size);  // the caller's layout stays the caller's
}

inline attnlab_fp8_forward_scales to_c(const Fp8ForwardScales& f) {
  attnlab_fp8_forward_scales out = defaults<attnlab_fp8_forward_scales>();
  out.descale_q = f.descale_q, out.descale_k = f.descale_k, out.descale_v = f.descale_v;
  out.scale_s = f.scale_s, out.descale_s = f.descale_s, out.amax_s = f.amax_s;
  out.scale_o = f.scale_o, out.amax_o = f.amax_o;
  return out;
}

inline attnlab_fp8_backward_scales to_c(const Fp8BackwardScales& f) {
  attnlab_fp8_backward_scales out = defaults<attnlab_fp8_backward_scales>();
  out.descale_q = f.descale_q, out.descale_k = f.descale_k, out.descale_v = f.descale_v;
  out.descale_o = f.descale_o, out.descale_do = f.descale_do;
  out.scale_s = f.scale_s, out.descale_s = f.descale_s;
  out.scale_dp = f.scale_dp, out.descale_dp = f.descale_dp;
  out.scale_dq = f.scale_dq, out.scale_dk = f.scale_dk, out.scale_dv = f.scale_dv;
  out.amax_dp = f.amax_dp, out.amax_dq = f.amax_dq, out.amax_dk = f.amax_dk, out.amax_dv = f.amax_dv;
  return out;
}

// `given` NULL: the defaults. Enum values are range-checked here; the numbers by the recipe itself.
inline DelayedScalingRecipe to_cxx(const attnlab_delayed_scaling_recipe* given, const std::string& where) {
  const attnlab_delayed_scaling_recipe r = given == nullptr ? default_recipe() : accept(given, where + "recipe: ");
  if (r.format != ATTNLAB_FP8_FORMAT_E4M3 && r.format != ATTNLAB_FP8_FORMAT_HYBRID)
    core::invalid("{}recipe->format: {} is not an attnlab_fp8_recipe_format (ATTNLAB_FP8_FORMAT_E4M3 = {}, "
                  "ATTNLAB_FP8_FORMAT_HYBRID = {})",
                  where, r.format, int(ATTNLAB_FP8_FORMAT_E4M3), int(ATTNLAB_FP8_FORMAT_HYBRID));
  if (r.amax_compute_algo != ATTNLAB_AMAX_MAX && r.amax_compute_algo != ATTNLAB_AMAX_MOST_RECENT)
    core::invalid("{}recipe->amax_compute_algo: {} is not an attnlab_amax_algorithm (ATTNLAB_AMAX_MAX = {}, "
                  "ATTNLAB_AMAX_MOST_RECENT = {})",
                  where, r.amax_compute_algo, int(ATTNLAB_AMAX_MAX), int(ATTNLAB_AMAX_MOST_RECENT));
  if (r.amax_history_len < 1)
    core::invalid("{}recipe->amax_history_len must be ≥ 1, got {}", where, r.amax_history_len);
  DelayedScalingRecipe out;
  out.margin = r.margin;
  out.format = static_cast<Fp8RecipeFormat>(r.format);
  out.amax_history_len = static_cast<std::size_t>(r.amax_history_len);
  out.amax_compute_algo = static_cast<AmaxAlgorithm>(r.amax_compute_algo);
  return out;
}

inline Fp8Tensor to_fp8_tensor(std::int32_t value, const std::string& where) {
  if (value < ATTNLAB_FP8_Q || value > ATTNLAB_FP8_DV)
    core::invalid("{}tensor: {} is not an attnlab_fp8_tensor (ATTNLAB_FP8_Q = {} .. ATTNLAB_FP8_DV = {})", where,
                  value, int(ATTNLAB_FP8_Q), int(ATTNLAB_FP8_DV));
  return static_cast<Fp8Tensor>(value);
}

inline Fp8Pass to_fp8_pass(std::int32_t value, const std::string& where) {
  if (value != ATTNLAB_FP8_FORWARD && value != ATTNLAB_FP8_BACKWARD)
    core::invalid("{}pass: {} is not an attnlab_fp8_pass (ATTNLAB_FP8_FORWARD = {}, ATTNLAB_FP8_BACKWARD = {})",
                  where, value, int(ATTNLAB_FP8_FORWARD), int(ATTNLAB_FP8_BACKWARD));
  return static_cast<Fp8Pass>(value);
}

// `function` names the entry point in messages ("attnlab_forward").
inline ForwardArgs to_cxx(const attnlab_forward_args* given, const char* function) {
  const std::string where = std::string(function) + ": ";
  const attnlab_forward_args a = accept(given, where);
  ForwardArgs out;
  out.q = to_cxx(a.q, "q");
  out.k = to_cxx(a.k, "k");
  out.v = to_cxx(a.v, "v");
  out.o = to_cxx(a.o, "o");
  out.lse = to_cxx(a.lse, "lse");
  out.options = to_cxx(a.options, where);
  out.workspace = workspace_to_cxx(a.has_workspace, a.workspace, a.workspace_bytes);
  out.fp8 = to_cxx(a.fp8, where);
  return out;
}

inline BackwardArgs to_cxx(const attnlab_backward_args* given, const char* function) {
  const std::string where = std::string(function) + ": ";
  const attnlab_backward_args a = accept(given, where);
  BackwardArgs out;
  out.q = to_cxx(a.q, "q");
  out.k = to_cxx(a.k, "k");
  out.v = to_cxx(a.v, "v");
  out.o = to_cxx(a.o, "o");
  out.d_o = to_cxx(a.d_o, "d_o");
  out.lse = to_cxx(a.lse, "lse");
  out.dq = to_cxx(a.dq, "dq");
  out.dk = to_cxx(a.dk, "dk");
  out.dv = to_cxx(a.dv, "dv");
  out.options = to_cxx(a.options, where);
  out.workspace = workspace_to_cxx(a.has_workspace, a.workspace, a.workspace_bytes);
  out.fp8 = to_cxx(a.fp8, where);
  return out;
}

// attnlab_tensor_contiguous: fills `t` with what was asked first, then checks it, so a rejected request still
// leaves a tensor that the call using it rejects with the same field named.
inline void contiguous(attnlab_tensor& t, void* data, std::int32_t dtype, std::int32_t device, std::int32_t rank,
                       const std::int64_t* shape) {
  t = attnlab_tensor{};
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = rank;
  if (rank < 1 || rank > kMaxRank)
    core::invalid("attnlab_tensor_contiguous: rank must be in 1..{}, got {}", kMaxRank, rank);
  to_dtype(dtype, "attnlab_tensor_contiguous: dtype");
  to_device(device, "attnlab_tensor_contiguous: device");
  if (shape == nullptr) core::invalid("attnlab_tensor_contiguous: shape is NULL");
  std::copy(shape, shape + rank, t.shape);
  std::int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    if (__builtin_mul_overflow(stride, std::max<std::int64_t>(shape[d], 1), &stride)) {
      std::fill(t.strides, t.strides + d, std::int64_t(-1));  // unusable, so a call using it is rejected too
      core::invalid("attnlab_tensor_contiguous: the strides of this shape overflow 64 bits");
    }
  }
}

}  // namespace attnlab::capi
