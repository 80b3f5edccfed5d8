// attnlab prefill — what a variable-length prefill batch costs three ways on one device: packed through the
// serving API (attnlab::forward(ctx, VarlenForwardArgs), include/attnlab/serving.h: q (Σ len, N, H), k/v
// (Σ len, K, H), cu_seqlens_q = cu_seqlens_k = the lengths' offsets), as a padded batch (B, T_max, N, H) through
// attnlab::forward(ctx, ForwardArgs) with Options::q_seqlens / kv_seqlens holding the lengths, and as a uniform
// batch with no padding at all (B' sequences of the mean length rounded to a multiple of 64, about the same total
// tokens). Every row counts only the useful work: tokens are Σ len (B'·L for uniform) and FLOPs are
// Σ_b attention_flops(1, N, len_b, len_b, H, H, causal), so padded's row shows what its padding costs and uniform's
// what the mix of lengths costs the varlen path. The varlen output is checked against the padded one on the same
// values (every valid row) before anything is timed, when the batch is small enough; a path that refuses a call
// leaves its reason as a footnote and the other modes go on.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <attnlab/attention.h>
#include <attnlab/serving.h>

#include "bench_core.h"
#include "case.h"
#include "decode_inputs.h"
#include "experiment.h"
#include "gpu.h"
#include "progress.h"
#include "serving_lab.h"
#include "table.h"
#include "tensors.h"
#include "timing.h"

namespace lab {
namespace {

// The presets: a skewed mix (one long prompt dominates, as a serving batch's often does) and an equal one.
const std::vector<std::int64_t> kSkewed = {128, 256, 512, 1024, 2048, 4096, 8192};
const std::vector<std::int64_t> kEqual(8, 2048);
// The check keeps both outputs on the host as f32; past this many tokens it would take longer than it guards.
constexpr std::int64_t kCheckMaxTokens = 20000;
// The uniform batch's sequence length is a multiple of this (a kernel's tile: no partial tiles to flatter it).
constexpr std::int64_t kUniformMultiple = 64;

struct PrefillFlags : ServingFlags {
  std::vector<std::int64_t> lengths;  // empty: --mix, else kSkewed
  std::string mix;
  std::string heads = "32/8";
  std::int64_t head_dim = 128;
  bool causal = false;
  std::string path = "auto";
  std::string padded_path = "auto";
};

// A named path must be known (serving_lab.h) and, since all three modes run on one device, run there.
void check_path_on(const char* flag, const std::string& path, attnlab::Device device) {
  check_path_name(flag, path);
  if (path_device(path, device) != device)
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("{}: '{}' runs on {}, but prefill runs every mode on --device {}", flag, path,
                                     attnlab::to_string(path_device(path, device)), attnlab::to_string(device)));
}

// The batch as every mode sees it.
struct Batch {
  std::vector<std::int64_t> lengths;
  std::int64_t N, K, H;
  attnlab::DType dtype;
  bool causal;

  std::int64_t B() const { return std::int64_t(lengths.size()); }
  std::int64_t total() const { return std::accumulate(lengths.begin(), lengths.end(), std::int64_t(0)); }
  std::int64_t longest() const { return *std::max_element(lengths.begin(), lengths.end()); }
  // The useful work: each sequence attends to itself only.
  double flops() const {
    double f = 0;
    for (std::int64_t len : lengths) f += attention_flops(1, N, len, len, H, H, causal, false);
    return f;
  }
};

// The uniform batch: B' sequences of L = the mean length rounded to a multiple of 64 (at least 64), B' = round(Σ / L).
Batch uniform_of(const Batch& b) {
  const double mean = double(b.total()) / double(b.B());
  const std::int64_t L =
      std::max(kUniformMultiple, std::int64_t(std::llround(mean / double(kUniformMultiple))) * kUniformMultiple);
  const std::int64_t count = std::max<std::int64_t>(1, std::llround(double(b.total()) / double(L)));
  Batch u = b;
  u.lengths.assign(std::size_t(count), L);
  return u;
}

enum class Mode { varlen, padded, uniform };
const char* to_string(Mode m) { return m == Mode::varlen ? "varlen" : m == Mode::padded ? "padded" : "uniform"; }

// `count` elements of `dtype`: random normals (a pattern of at most kPatternElements) repeated, as bytes.
std::vector<std::byte> random_bytes(std::int64_t count, attnlab::DType dtype, std::uint64_t seed, std::uint64_t stream) {
  std::vector<std::byte> pattern = encode(random_normal(std::min(count, kPatternElements), seed, stream), dtype);
  std::vector<std::byte> out(std::size_t(count) * attnlab::size_of(dtype));
  for (std::size_t at = 0; at < out.size(); at += pattern.size())
    std::memcpy(out.data() + at, pattern.data(), std::min(pattern.size(), out.size() - at));
  return out;
}

std::vector<std::byte> int_bytes(const std::vector<std::int32_t>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(std::int32_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Packed rows (Σ len, heads, H) copied into a padded (B, T_max, heads, H) batch, zeros in the padding.
std::vector<std::byte> pad(const std::vector<std::byte>& packed, const Batch& b, std::int64_t heads) {
  const std::size_t row = std::size_t(heads * b.H) * attnlab::size_of(b.dtype);
  std::vector<std::byte> out(std::size_t(b.B() * b.longest()) * row);
  std::int64_t from = 0;
  for (std::int64_t s = 0; s < b.B(); ++s) {
    const std::int64_t len = b.lengths[std::size_t(s)];
    std::memcpy(out.data() + std::size_t(s * b.longest()) * row, packed.data() + std::size_t(from) * row,
                std::size_t(len) * row);
    from += len;
  }
  return out;
}

// One mode's tensors and arguments. varlen and padded get the same values (the packed draws; padded places
// sequence b's rows at (b, 0 … len_b − 1)); uniform gets its own draws.
class ModeInputs {
 public:
  ModeInputs(Mode mode, const Batch& b, attnlab::Device device, std::uint64_t seed) : device_(device) {
    const attnlab::DType dt = b.dtype;
    if (mode == Mode::uniform) {
      const std::int64_t B = b.B(), L = b.longest();
      padded_.q = make(dt, {B, L, b.N, b.H}, random_bytes(B * L * b.N * b.H, dt, seed, 1));
      padded_.k = make(dt, {B, L, b.K, b.H}, random_bytes(B * L * b.K * b.H, dt, seed, 2));
      padded_.v = make(dt, {B, L, b.K, b.H}, random_bytes(B * L * b.K * b.H, dt, seed, 3));
      padded_.o = make(dt, {B, L, b.N, b.H}, {});
      padded_.options.mask.causal = b.causal;
      is_varlen_ = false;
    } else {
      fill_packed(mode, b, seed);
    }
    if (device == attnlab::Device::cuda) gpu::synchronize();  // the uploads are done before anything is timed
  }

 private:
  void fill_packed(Mode mode, const Batch& b, std::uint64_t seed) {
    const attnlab::DType dt = b.dtype;
    const std::int64_t total = b.total();
    std::vector<std::byte> q = random_bytes(total * b.N * b.H, dt, seed, 1);
    std::vector<std::byte> k = random_bytes(total * b.K * b.H, dt, seed, 2);
    std::vector<std::byte> v = random_bytes(total * b.K * b.H, dt, seed, 3);
    if (mode == Mode::varlen) {
      std::vector<std::int32_t> cu(std::size_t(b.B() + 1), 0);
      for (std::int64_t s = 0; s < b.B(); ++s)
        cu[std::size_t(s + 1)] = cu[std::size_t(s)] + std::int32_t(b.lengths[std::size_t(s)]);
      varlen_.q = make(dt, {total, b.N, b.H}, q);
      varlen_.k = make(dt, {total, b.K, b.H}, k);
      varlen_.v = make(dt, {total, b.K, b.H}, v);
      varlen_.cu_seqlens_q = make(attnlab::DType::i32, {b.B() + 1}, int_bytes(cu));
      varlen_.cu_seqlens_k = varlen_.cu_seqlens_q;
      varlen_.max_seqlen_q = varlen_.max_seqlen_k = b.longest();
      varlen_.o = make(dt, {total, b.N, b.H}, {});
      varlen_.options.mask.causal = b.causal;
      is_varlen_ = true;
    } else {
      const std::int64_t B = b.B(), T = b.longest();
      std::vector<std::int32_t> lens(b.lengths.begin(), b.lengths.end());
      padded_.q = make(dt, {B, T, b.N, b.H}, pad(q, b, b.N));
      padded_.k = make(dt, {B, T, b.K, b.H}, pad(k, b, b.K));
      padded_.v = make(dt, {B, T, b.K, b.H}, pad(v, b, b.K));
      padded_.o = make(dt, {B, T, b.N, b.H}, {});
      padded_.options.q_seqlens = make(attnlab::DType::i32, {B}, int_bytes(lens));
      padded_.options.kv_seqlens = padded_.options.q_seqlens;
      padded_.options.mask.causal = b.causal;
      is_varlen_ = false;
    }
  }

 public:
  attnlab::RunInfo call(attnlab::Context& ctx, const std::string& path) {
    if (is_varlen_) {
      varlen_.options.path = path;
      return attnlab::forward(ctx, varlen_);
    }
    padded_.options.path = path;
    return attnlab::forward(ctx, padded_);
  }

  // O as f32, read back from the GPU when it lives there (waits for the device).
  std::vector<float> output() const {
    if (device_ == attnlab::Device::cuda) gpu::synchronize();
    const attnlab::TensorView& o = is_varlen_ ? varlen_.o : padded_.o;
    const std::vector<std::byte> bytes = o_buffer_->read();
    return decode(bytes.data(), o.numel(), o.dtype);
  }

 private:
  attnlab::TensorView make(attnlab::DType dtype, std::initializer_list<std::int64_t> shape,
                           const std::vector<std::byte>& bytes) {
    const std::int64_t count = element_count(Shape(shape));
    buffers_.push_back(std::make_unique<TensorBuffer>(device_, std::size_t(count) * attnlab::size_of(dtype)));
    if (!bytes.empty()) buffers_.back()->fill(bytes);
    else o_buffer_ = buffers_.back().get();  // the only tensor made without values
    return attnlab::TensorView::contiguous(buffers_.back()->data(), dtype, shape, device_);
  }

  attnlab::Device device_;
  std::vector<std::unique_ptr<TensorBuffer>> buffers_;
  TensorBuffer* o_buffer_ = nullptr;
  bool is_varlen_ = false;
  attnlab::VarlenForwardArgs varlen_;
  attnlab::ForwardArgs padded_;
};

// The bytes a mode's tensors take on their device, and the shape input_sets() judges the L2 by.
Workload workload_of(Mode mode, const Batch& b) {
  const bool packed = mode == Mode::varlen;
  const std::int64_t B = packed ? 1 : b.B(), T = packed ? b.total() : b.longest();
  return Workload{"", "prefill", B, T, T, b.N, b.K, b.H, b.H, b.dtype, b.causal};
}

// Why a mode is not run on `device`, or nullopt: more memory than the budget (all `sets` copies together).
std::optional<std::string> over_budget(Mode mode, const Batch& b, attnlab::Device device, int sets) {
  return over_memory_budget(io_bytes(workload_of(mode, b)) * sets, device);
}

struct PrefillRow : ServingRow {
  Mode mode = Mode::varlen;
  Batch batch;

  std::int64_t tokens() const { return batch.total(); }
  std::optional<double> us_per_1k() const {
    if (!ms) return std::nullopt;
    return *ms * 1e3 / (double(tokens()) / 1e3);
  }
  std::optional<double> tflops() const {
    if (!ms) return std::nullopt;
    return batch.flops() / (*ms * 1e-3) / 1e12;
  }
};

// The varlen-against-padded check: "passed", "failed", or why it did not run.
struct Check {
  std::string result;
  std::optional<double> max_abs_err;
  std::int64_t rows = 0;  // valid rows compared
};

std::string to_json_line(const PrefillRow& r, const Check& check) {
  const Batch& b = r.batch;
  Json j;
  j["experiment"] = "prefill";
  j["mode"] = to_string(r.mode);
  put_run(j, r, b.dtype);
  j["lengths"] = b.lengths;
  j["B"] = b.B(), j["N"] = b.N, j["K"] = b.K, j["H"] = b.H;
  j["causal"] = b.causal;
  put_times(j, r);
  j["tokens"] = r.tokens();
  j["us_per_1k_tokens"] = number(r.us_per_1k());
  j["tflops"] = number(r.tflops());
  const bool checked = r.mode != Mode::uniform && !check.result.empty();
  j["check"] = checked ? Json(check.result) : Json(nullptr);
  j["max_abs_err"] = checked ? number(check.max_abs_err) : Json(nullptr);
  put_outcome(j, r, r.ran && !(checked && check.result == "failed"));
  return json_line(j);
}

std::vector<std::string> cells(const PrefillRow& r, Footnotes& notes) {
  const std::string shape =
      r.mode == Mode::uniform ? fmt::format("{} × {}", r.batch.B(), r.batch.longest())
      : r.mode == Mode::padded ? fmt::format("{} × {} padded", r.batch.B(), r.batch.longest())
                               : fmt::format("{} seqs packed", r.batch.B());
  std::vector<std::string> out = {to_string(r.mode), shape, r.path_cell()};
  if (!r.ran || !r.ms) {
    out.insert(out.end(), {"did not run", std::to_string(r.tokens()), "—", "—", r.not_run_cell(notes)});
    return out;
  }
  out.insert(out.end(), {fmt::format("{:.1f}", *r.ms * 1e3), std::to_string(r.tokens()),
                         fmt::format("{:.2f}", *r.us_per_1k()), fmt_opt(r.tflops(), "{:.3f}"),
                         r.sets > 1 ? fmt::format("{} input sets", r.sets) : std::string()});
  return out;
}

// Largest |varlen − padded| over every valid row: sequence s's row t is row cu[s] + t of varlen's output and row
// (s, t) of padded's.
Check compare_outputs(const std::vector<float>& varlen, const std::vector<float>& padded, const Batch& b) {
  const std::size_t row = std::size_t(b.N * b.H);
  Check c;
  Closeness close(tolerance_for(b.dtype));
  std::int64_t from = 0;
  for (std::int64_t s = 0; s < b.B() && !close.stopped(); ++s) {
    const std::int64_t len = b.lengths[std::size_t(s)];
    for (std::int64_t t = 0; t < len && !close.stopped(); ++t) {
      const float* x = varlen.data() + std::size_t(from + t) * row;
      const float* y = padded.data() + std::size_t(s * b.longest() + t) * row;
      for (std::size_t i = 0; i < row; ++i)
        if (!close.add(x[i], y[i])) break;
      ++c.rows;
    }
    from += len;
  }
  c.max_abs_err = close.max_abs_err();
  c.result = close.close() ? "passed" : "failed";
  return c;
}

// One mode: its tensors, one call (RunInfo, and the output when `keep_output`), then no timing yet.
struct Prepared {
  std::vector<std::unique_ptr<ModeInputs>> sets;
  std::optional<std::vector<float>> output;
};

Prepared prepare(PrefillRow& row, attnlab::Context& ctx, std::uint64_t seed, bool keep_output) {
  Prepared p;
  if (auto why = over_budget(row.mode, row.batch, row.device, row.sets)) {
    row.skipped = true, row.note = *why;
    return p;
  }
  try {
    for (int i = 0; i < row.sets; ++i)
      p.sets.push_back(std::make_unique<ModeInputs>(row.mode, row.batch, row.device, set_seed(seed, i)));
    row.path = p.sets.front()->call(ctx, row.asked).path;
    row.ran = true;
    if (keep_output) p.output = p.sets.front()->output();
  } catch (const attnlab::Error& e) {
    row.record_failure(e);
    p.sets.clear();
  } catch (const std::bad_alloc&) {
    row.ran = false, row.note = "out of host memory";
    p.sets.clear();
  }
  return p;
}

void time_mode(PrefillRow& row, Prepared& p, attnlab::Context& ctx, const TimingPlan& plan) {
  if (!row.ran) return;
  try {
    const Timing t = measure(
        row.device, [&](int i) { p.sets[std::size_t(i) % p.sets.size()]->call(ctx, row.asked); }, plan);
    row.record(t);
  } catch (const attnlab::Error& e) {
    row.record_failure(e);
  }
  p.sets.clear();  // the next mode gets the memory
}

std::string lengths_label(const std::vector<std::int64_t>& lengths) {
  constexpr std::size_t kShown = 12;
  if (lengths.size() <= kShown) return fmt::format("{}", fmt::join(lengths, ","));
  return fmt::format("{},… ({} sequences)",
                     fmt::join(std::vector<std::int64_t>(lengths.begin(), lengths.begin() + kShown), ","),
                     lengths.size());
}

int run_prefill(const PrefillFlags& f) {
  const attnlab::Device device = resolve_device(f.device);
  const bool gpu = device == attnlab::Device::cuda;
  const attnlab::DType dtype = resolve_dtype(f.dtype, device);
  const Heads heads = parse_heads(f.heads, "an N/K pair such as 32/8");
  check_path_on("--path", f.path, device);
  check_path_on("--padded-path", f.padded_path, device);

  Batch batch{!f.lengths.empty() ? f.lengths : f.mix == "equal" ? kEqual : kSkewed, heads.N, heads.K, f.head_dim,
              dtype, f.causal};
  // cu_seqlens are int32: the packed batch's rows must fit.
  if (batch.total() > std::int64_t(INT32_MAX))
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("--lengths: {} tokens in all, past what int32 cu_seqlens can address",
                                     batch.total()));
  const Batch uniform = uniform_of(batch);

  RowSinks sinks(f);
  const bool json = sinks.on_stdout();

  std::vector<PrefillRow> rows(3);
  const Mode modes[3] = {Mode::varlen, Mode::padded, Mode::uniform};
  for (int m = 0; m < 3; ++m) {
    PrefillRow& r = rows[std::size_t(m)];
    r.mode = modes[m];
    r.batch = r.mode == Mode::uniform ? uniform : batch;
    r.asked = r.path = r.mode == Mode::varlen ? f.path : f.padded_path;
    r.device = device;
    // Rotate input sets where one would sit in the GPU's L2 between calls, as bench and decode do.
    r.sets = input_sets(workload_of(r.mode, r.batch), device);
  }

  const bool check_wanted = batch.total() <= kCheckMaxTokens;
  Check check;
  {
    Progress bar("prefill", 4);
    attnlab::Context ctx;
    ctx.set_num_threads(f.threads);
    // varlen and padded each run once, and their outputs are compared, before anything is timed.
    bar.step("varlen: first call");
    Prepared varlen = prepare(rows[0], ctx, f.seed, check_wanted);
    bar.step("padded: first call and check");
    Prepared padded = prepare(rows[1], ctx, f.seed, check_wanted);
    if (!check_wanted)
      check.result = fmt::format("skipped: {} tokens > {}", batch.total(), kCheckMaxTokens);
    else if (!rows[0].ran || !rows[1].ran)
      check.result = fmt::format("not run: {} did not run", !rows[0].ran ? "varlen" : "padded");
    else
      check = compare_outputs(*varlen.output, *padded.output, batch);
    varlen.output.reset(), padded.output.reset();
    bar.step(fmt::format("timing varlen ({})", rows[0].path));
    time_mode(rows[0], varlen, ctx, f.plan);
    time_mode(rows[1], padded, ctx, f.plan);
    bar.step(fmt::format("uniform {} × {}", uniform.B(), uniform.longest()));
    Prepared u = prepare(rows[2], ctx, f.seed, false);
    time_mode(rows[2], u, ctx, f.plan);
  }

  for (const PrefillRow& r : rows) sinks.write(to_json_line(r, check));
  const bool passed = check.result != "failed";
  if (json) return passed ? 0 : 1;

  const Tolerance tol = tolerance_for(dtype);
  Table table(fmt::format("Prefill of {} sequences (lengths {}; {} tokens) on {}: heads {}, H={}, {}{}; time per "
                          "call, median of groups ({})",
                          batch.B(), lengths_label(batch.lengths), batch.total(), device_label(device),
                          heads.label(), f.head_dim, attnlab::to_string(dtype), f.causal ? ", causal" : "",
                          gpu ? "CUDA events" : "steady clock"));
  table.columns({"mode", "batch", "path", "µs/call", "tokens", "µs/1k tok", "TFLOP/s", "note"},
                {Align::left, Align::left, Align::left, Align::right, Align::right, Align::right, Align::right,
                 Align::left});
  Footnotes notes;
  for (const PrefillRow& r : rows) table.row(cells(r, notes));
  table.print();
  notes.print();

  const auto ratio = [](const std::optional<double>& a, const std::optional<double>& b) -> std::string {
    return a && b && *b > 0 ? fmt::format("{:.2f}×", *a / *b) : std::string("— (a mode did not run)");
  };
  fmt::print("padded / varlen (time per call): {}\n", ratio(rows[1].ms, rows[0].ms));
  fmt::print("varlen per token / uniform per token: {}\n", ratio(rows[0].us_per_1k(), rows[2].us_per_1k()));
  if (check.max_abs_err)
    fmt::print("check: varlen against padded on the same inputs, max |diff| {:.1e} over {} valid rows (rtol={:g}, "
               "atol={:g}): {}\n",
               *check.max_abs_err, check.rows, tol.rtol, tol.atol, check.result);
  else
    fmt::print("check: varlen against padded {}\n", check.result);
  fmt::print("tokens: the useful ones (Σ lengths; uniform: B'·L = {} × {}); TFLOP/s: the useful work only, "
             "Σ_b 4·N·H·len_b²{} / time per call\n",
             uniform.B(), uniform.longest(), f.causal ? " / 2 (causal)" : "");
  fmt::print("uniform: B' = round(Σ lengths / L) sequences of L = the mean length ({:.1f}) rounded to a multiple of "
             "{}, no padding; padded: every sequence padded to {}, q_seqlens = kv_seqlens = the lengths\n",
             double(batch.total()) / double(batch.B()), kUniformMultiple, batch.longest());
  if (!passed) fmt::print("check failed: varlen's output differs from padded's beyond the tolerance\n");
  return passed ? 0 : 1;
}

}  // namespace

Action attach_prefill(CLI::App& cmd) {
  auto f = std::make_shared<PrefillFlags>();
  const CLI::Validator positive = positive_number();
  const char* batch = "Batch (varlen: q (Σ len, N, H), k/v (Σ len, K, H) packed; padded: (B, max len, ·, H))";
  CLI::Option* lengths =
      cmd.add_option("--lengths", f->lengths, "comma-separated sequence lengths (queries = keys per sequence; "
                                              "default 128,256,512,1024,2048,4096,8192, the skewed mix)")
          ->delimiter(',')->check(positive)->group(batch);
  cmd.add_option("--mix", f->mix, "a named batch instead of --lengths: skewed (128,256,…,8192) or equal (eight "
                                  "sequences of 2048)")
      ->check(CLI::IsMember({"skewed", "equal"}))->excludes(lengths)->group(batch);
  cmd.add_option("--heads", f->heads, "query heads over KV heads, N/K (e.g. 32/32 MHA, 32/8 GQA, 32/1 MQA)")
      ->capture_default_str()->group(batch);
  cmd.add_option("--head-dim", f->head_dim, "head dimension H")->check(positive)->capture_default_str()->group(batch);
  cmd.add_flag("--causal", f->causal, "causal mask in every mode (queries = keys per sequence: top-left and "
                                      "bottom-right agree)")->group(batch);

  const char* run = "Run";
  add_dtype_flag(cmd, *f, run);
  cmd.add_option("--path", f->path, "path of the varlen call; 'auto' lets the library choose")
      ->capture_default_str()->group(run);
  cmd.add_option("--padded-path", f->padded_path, "path of the padded and uniform calls (ForwardArgs)")
      ->capture_default_str()->group(run);
  add_run_flags(cmd, *f, "where every mode's tensors live (default: cuda when a CUDA path is available)", run);
  add_timing_group(cmd, f);
  cmd.footer("A path that refuses a call gets its reason as a footnote and the other modes go on; the exit status "
             "is 1 only when the varlen/padded check fails.");
  return [f] { return run_prefill(*f); };
}

}  // namespace lab
