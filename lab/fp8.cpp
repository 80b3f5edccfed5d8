// attnlab fp8 — the codelab's FP8 cell (step 9, TransformerEngine's FP8 path, here attnlab's own). On a GPU whose
// attention paths take FP8: the codelab's case, (B, T, N, H) = (4, 2048, 8, 64) causal; random bf16 Q, K, V;
// bf16 attention on the fastest bf16 path; then FP8 for a few steps with TransformerEngine's DelayedScaling recipe
// (attnlab::DelayedScaling: quantize Q, K, V with its scales, the call with its forward_scales() and an e4m3 O,
// then its update), the outputs compared, each path timed in bf16 and e4m3, and the recipe's state shown.
// Where there is no FP8 attention (no GPU, a CPU-only build, compute capability below 9.0) it says so in the
// library's words and prints the C++ that would use it, as the codelab prints its te.autocast lines: exit 0.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>
#include <attnlab/fp8.h>

#include "bench_core.h"
#include "case.h"
#include "experiment.h"
#include "fp8_cell.h"
#include "fp8_snippet.h"
#include "gpu.h"
#include "report/report_flags.h"
#include "results.h"
#include "runner.h"
#include "runs.h"
#include "table.h"
#include "tensors.h"
#include "timing.h"

namespace lab {
namespace {

// How close FP8 must come to bf16 (the codelab prints the difference without a bound; this is the lab's). E4M3
// keeps 3 mantissa bits, so rounding O alone moves an element by up to 1/16 of itself; Q, K, V and P add their
// own. On random inputs the mean difference is ~6% of mean |O| and the largest ~7–10% of max |O|; the bounds leave
// twice that and still catch a wrong scale (a factor 2 is 50%), an unwritten output (NaN) or zeros (100%).
constexpr double kMaxOfMaxAbs = 0.25;    // max |bf16 − fp8| ≤ 1/4 of max |O|
constexpr double kMeanOfMeanAbs = 0.125; // mean |bf16 − fp8| ≤ 1/8 of mean |O|

std::string recipe_text(const attnlab::DelayedScalingRecipe& r) {
  return fmt::format("DelayedScaling: margin {}, {}, amax history {}, amax \"{}\"", r.margin,
                     r.format == attnlab::Fp8RecipeFormat::hybrid ? "HYBRID (e4m3 forward, e5m2 backward)" : "E4M3",
                     r.amax_history_len, r.amax_compute_algo == attnlab::AmaxAlgorithm::max ? "max" : "most_recent");
}

std::string shape_text(const Fp8Options& o) {
  return fmt::format("{} (B, T, N, H){}", format_shape({o.B, o.T, o.N, o.H}), o.causal ? ", causal" : "");
}

struct GpuHere {
  std::string label;    // "NVIDIA H200 (compute capability 9.0)", or "none"
  std::string problem;  // why there is no GPU to use; empty when there is one
};

GpuHere find_gpu() {
  std::string problem;
  if (!attnlab::build_info().cuda || !gpu::compiled_in()) {
    problem = "this build of attnlab has no CUDA paths (CPU-only build)";
  } else {
    const gpu::Inventory inv = gpu::inventory();
    if (!inv.devices.empty()) {
      const gpu::DeviceInfo& d = inv.devices.front();
      return {fmt::format("{} (compute capability {}.{})", d.name, d.cc_major, d.cc_minor), ""};
    }
    problem = inv.problem;
  }
  return {"none", problem};
}

// Why no GPU path of this build can run anything here, in the library's words (list_paths).
std::string no_gpu_path_reason() {
  std::vector<std::string> reasons;
  for (const attnlab::PathInfo& p : attnlab::list_paths())
    if (p.device == attnlab::Device::cuda && !p.available) reasons.push_back(p.name + ": " + p.unavailable);
  return reasons.empty() ? "this build has no GPU path" : fmt::format("{}", fmt::join(reasons, "; "));
}

void print_snippet(const char* indent) {
  std::string_view text = kFp8Snippet;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    fmt::print("{}{}\n", line.empty() ? "" : indent, line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

// No FP8 attention here: the codelab's "not available" table, then the C++ that would use it.
Outcome unavailable(const Fp8Options& o, const Workload& w, const GpuHere& here, const std::string& reason,
                    const std::vector<std::pair<std::string, std::string>>& per_path) {
  Outcome outcome;
  ResultRow row = workload_row(w, "cudnn", here.problem.empty() ? attnlab::Device::cuda : attnlab::Device::cpu);
  row.ok = false;
  row.note = "no FP8 attention here: " + reason;
  outcome.rows.push_back(row);
  outcome.skipped = reason;
  if (o.json) {
    fmt::print("{}\n", to_json_line(row));
    fmt::print(stderr, "attnlab fp8: no FP8 attention here: {}\n", reason);
    return outcome;
  }
  key_value_table("FP8 attention — not available here",
                  {{"GPU", here.label},
                   {"Case", shape_text(o) + "; bf16 next to e4m3"},
                   {"Recipe", recipe_text({})},
                   {"FP8 attention", "no: " + reason}})
      .print();
  if (!per_path.empty()) {
    Table t("GPU paths and FP8 (e4m3 Q, K, V and O with the recipe's scales)");
    t.columns({"path", "FP8", "why not"});
    for (const auto& [path, why] : per_path) t.row({path, why.empty() ? "yes" : "no", why});
    t.print();
  }
  fmt::print("FP8 attention from C++ (what runs the codelab's cell on a GPU whose paths take FP8, such as cuDNN's on "
             "compute capability 9.0 or newer):\n\n");
  print_snippet("  ");
  fmt::print("\n");
  return outcome;
}

std::string pct(double part, double whole) { return fmt::format("{:.1f}%", 100.0 * part / whole); }

// Which piece a large difference comes from, from the per-piece checks of the step (fp8_cell.h).
std::string diagnosis(const Fp8Step& s, double ref_mean, const std::string& path) {
  if (s.quantize_mismatches != 0) return " — quantize() rounds differently from e4m3(x · scale)";
  if (!s.dequant_agrees) return " — dequantize() does not decode the e4m3 O as code · scale_inv";
  if (!(s.call_mean_abs <= kMeanOfMeanAbs * ref_mean))
    return fmt::format(" — quantize and dequantize agree with the lab, so the difference is {}'s FP8 call itself",
                       path);
  return "";
}
std::string sci(double x) { return std::isnan(x) ? "nan (an output element is NaN)" : fmt::format("{:.2e}", x); }

}  // namespace

Outcome run_fp8(const Fp8Options& o) {
  if (o.steps < 1) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "--steps must be >= 1");
  const Workload w16{"", "fp8", o.B, o.T, o.T, o.N, o.N, o.H, o.H, attnlab::DType::bf16, o.causal, false};
  Workload w8 = w16;
  w8.dtype = attnlab::DType::e4m3;
  const attnlab::DelayedScalingRecipe defaults;

  GpuHere here = find_gpu();
  if (o.cpu_only && here.problem.empty())
    here = {"not used (--device cpu)", "--device cpu: the FP8 cell runs on a GPU"};
  if (!here.problem.empty()) return unavailable(o, w8, here, here.problem, {});
  const std::vector<std::string> gpu_paths = available_paths(attnlab::Device::cuda);
  if (gpu_paths.empty()) return unavailable(o, w8, here, no_gpu_path_reason(), {});

  // Which GPU paths take the FP8 call: asked with the real tensors and the recipe's scales (cuDNN builds its graph).
  Fp8Cell cell({o.B, o.T, o.N, o.H, o.causal}, o.seed);
  std::vector<std::pair<std::string, std::string>> support;  // path, why not ("" = runs)
  std::vector<std::string> fp8_paths;
  bool invalid = false;
  for (const std::string& p : gpu_paths) {
    std::string why;
    try {
      why = cell.why_not_fp8(p).value_or("");
    } catch (const attnlab::Error& e) {
      invalid = invalid || e.code() == attnlab::ErrorCode::invalid_argument;  // the lab's arguments: a bug to see
      why = e.what();
    }
    if (why.empty()) fp8_paths.push_back(p);
    support.emplace_back(p, why.empty() ? "" : refusal_reason(p, why));
  }
  if (fp8_paths.empty()) {
    // cuDNN's answer names the rule (compute capability, version) when there is a cudnn path.
    const auto it = std::find_if(support.begin(), support.end(), [](const auto& s) { return s.first == "cudnn"; });
    const std::string reason = it != support.end() ? "cudnn: " + it->second : support.front().first + ": " +
                                                                                  support.front().second;
    Outcome out = unavailable(o, w8, here, reason, support);
    out.passed = !invalid;
    return out;
  }
  const std::string fp8_path =
      std::find(fp8_paths.begin(), fp8_paths.end(), "cudnn") != fp8_paths.end() ? "cudnn" : fp8_paths.front();
  const std::vector<std::string> bf16_paths = o.paths.empty() ? gpu_paths : o.paths;

  Outcome outcome;
  // 1. bf16 on every path, timed; the fastest GPU path's O is the reference.
  std::vector<ResultRow> t16, t8;
  for (const std::string& p : bf16_paths) t16.push_back(bench_one(w16, p, path_device(p, attnlab::Device::cuda),
                                                                  o.plan, 0));
  const ResultRow* fastest = nullptr;
  for (const ResultRow& r : t16)
    if (r.ok && path_device(r.path, attnlab::Device::cuda) == attnlab::Device::cuda &&
        (fastest == nullptr || *r.ms_median < *fastest->ms_median))
      fastest = &r;
  if (fastest == nullptr)
    throw attnlab::Error(attnlab::ErrorCode::unsupported,
                         fmt::format("no GPU path of '{}' ran the bf16 case {}: the FP8 output has nothing to be "
                                     "compared with", fmt::join(bf16_paths, ","), shape_text(o)));
  const std::string ref_path = fastest->path;
  cell.run_bf16(ref_path);

  // 2. The recipe's steps: the first quantizes with scale 1, each update sets the next step's scales.
  std::vector<Fp8Step> steps;
  for (int i = 1; i <= o.steps; ++i) {
    steps.push_back(cell.step(fp8_path));
    steps.back().step = i;
  }
  std::vector<attnlab::Fp8TensorState> states;
  for (attnlab::Fp8Tensor t : kForwardTensors) states.push_back(cell.state(t));

  // 3. e4m3 on every path that takes it, timed like bf16; and one whole recipe step from bf16 inputs.
  for (const std::string& p : fp8_paths) t8.push_back(bench_one(w8, p, attnlab::Device::cuda, o.plan, 0));
  ResultRow whole = workload_row(w8, fp8_path + " +quantize+update", attnlab::Device::cuda);
  try {
    const Timing t = measure(attnlab::Device::cuda, [&](int) { cell.enqueue_step(fp8_path, false); }, o.plan);
    whole.ms_median = t.ms_median, whole.ms_min = t.ms_min, whole.ms_max = t.ms_max;
    whole.tflops = attention_flops(o.B, o.N, o.T, o.T, o.H, o.H, o.causal, false) / (t.ms_median * 1e-3) / 1e12;
    whole.ok = true;
    whole.note = "one DelayedScaling step from bf16 Q, K, V: quantize Q, K, V, the FP8 call, the recipe update";
  } catch (const attnlab::Error& e) {
    whole.note = e.what();
  }

  // The verdicts.
  const Fp8Step& first = steps.front();
  const Fp8Step& last = steps.back();
  const double ref_max = cell.max_abs_reference(), ref_mean = cell.mean_abs_reference();
  const bool close = std::isfinite(last.max_abs) && last.max_abs <= kMaxOfMaxAbs * ref_max &&
                     last.mean_abs <= kMeanOfMeanAbs * ref_mean && last.quantize_mismatches == 0 &&
                     last.dequant_agrees;
  std::vector<std::string> off_recipe;  // tensors whose scale is not fp8_max / amax over their history
  for (std::size_t i = 0; i < states.size(); ++i) {
    const attnlab::Fp8TensorState& s = states[i];
    const double want = expected_scale(kForwardTensors[i], s, cell.format(kForwardTensors[i]), defaults.margin,
                                       last.scale_used[i], defaults.amax_compute_algo);
    const bool ok = std::fabs(s.scale - want) <= 1e-6 * want && std::fabs(double(s.scale) * s.scale_inv - 1) <= 1e-6;
    if (!ok) off_recipe.push_back(fp8_tensor_name(kForwardTensors[i]));
  }
  const ResultRow* fp8_timed = nullptr;
  for (const ResultRow& r : t8)
    if (r.path == fp8_path && r.ok) fp8_timed = &r;

  ResultRow accuracy = workload_row(w8, fp8_path, attnlab::Device::cuda);
  accuracy.max_abs_err = last.max_abs;
  accuracy.ok = close;
  accuracy.note = fmt::format("accuracy vs {} bf16 after {} DelayedScaling step{}: mean |diff| {:.3g} ({} of mean "
                              "|O|), max {} of max |O|; the FP8 call alone: mean {:.3g}, max {:.3g}; quantize {}; "
                              "dequantize {}",
                              ref_path, o.steps, o.steps == 1 ? "" : "s", last.mean_abs, pct(last.mean_abs, ref_mean),
                              pct(last.max_abs, ref_max), last.call_mean_abs, last.call_max_abs,
                              last.quantize_mismatches == 0 ? "agrees" : "DISAGREES",
                              last.dequant_agrees ? "agrees" : "DISAGREES");
  for (const auto* group : {&t16, &t8})
    outcome.rows.insert(outcome.rows.end(), group->begin(), group->end());
  outcome.rows.push_back(whole);
  outcome.rows.push_back(accuracy);
  outcome.passed = close && !invalid;

  const bool recipe_ok = off_recipe.empty() && last.mean_abs <= first.mean_abs * 1.05;
  const bool faster = fp8_timed != nullptr && *fp8_timed->ms_median < *fastest->ms_median;
  outcome.as_expected = close && recipe_ok && faster;
  if (o.json) {
    for (const ResultRow& r : outcome.rows) fmt::print("{}\n", to_json_line(r));
    return outcome;
  }

  key_value_table("FP8 attention (the codelab's TransformerEngine FP8 cell, with attnlab's FP8 path)",
                  {{"GPU", here.label}, {"Case", shape_text(o)}, {"Recipe", recipe_text(defaults)}})
      .print();
  {
    Table t("GPU paths and FP8 (e4m3 Q, K, V and O with the recipe's scales)");
    t.columns({"path", "FP8", "why not"});
    for (const auto& [path, why] : support) t.row({path, why.empty() ? "yes" : "no", why});
    t.print();
  }
  key_value_table("FP8 attention with attnlab",
                  {{"GPU", here.label},
                   {"Input dtype", "bf16 (Q, K, V as drawn; quantized to e4m3 for the FP8 call)"},
                   {"bf16 output dtype", fmt::format("bf16 ({})", ref_path)},
                   {"FP8 output dtype", fmt::format("e4m3 ({}; dequantized to bf16 to compare)", fp8_path)},
                   {"Output shape", format_shape({o.B, o.T, o.N, o.H})},
                   {fmt::format("Max |bf16 − FP8| (step {})", last.step),
                    fmt::format("{} ({} of max |O| = {:.3g})", sci(last.max_abs), pct(last.max_abs, ref_max), ref_max)},
                   {fmt::format("Mean |bf16 − FP8| (step {})", last.step),
                    fmt::format("{} ({} of mean |O| = {:.3g})", sci(last.mean_abs), pct(last.mean_abs, ref_mean),
                                ref_mean)}})
      .print();

  {
    Table t("DelayedScaling steps: the scale each quantization used (the update after a step sets the next one's)");
    t.columns({"step", "q", "k", "v", "s (P)", "o"}, std::vector<Align>(6, Align::right));
    for (const Fp8Step& s : steps) {
      std::vector<std::string> cells = {std::to_string(s.step)};
      for (float x : s.scale_used) cells.push_back(fmt::format("{:.4g}", x));
      t.row(cells);
    }
    t.print();
  }
  {
    // Each piece on its own, so a difference from bf16 can be traced to the step that made it.
    Table t("Where the difference comes from (max / mean |diff| over O)");
    t.columns({"step", "bf16 vs FP8", "the FP8 call alone (vs bf16 on its e4m3 inputs)", "quantize vs e4m3(x · scale)",
               "dequantize vs e4m3 bytes"},
              {Align::right, Align::left, Align::left, Align::left, Align::left});
    for (const Fp8Step& s : steps)
      t.row({std::to_string(s.step), fmt::format("{} / {}", sci(s.max_abs), sci(s.mean_abs)),
             fmt::format("{} / {}", sci(s.call_max_abs), sci(s.call_mean_abs)),
             s.quantize_mismatches == 0 ? "every code agrees" : fmt::format("{} codes DIFFER", s.quantize_mismatches),
             s.dequant_agrees ? fmt::format("agrees (≤ {:.1e} relative)", s.dequant_max_rel)
                              : fmt::format("DISAGREES ({:.2e} relative)", s.dequant_max_rel)});
    t.print();
  }
  {
    // One entry more than the steps: the history's end as read() returns it, every step's amax included.
    const std::size_t shown = std::min<std::size_t>(std::size_t(o.steps) + 1, 8);
    Table t(fmt::format("DelayedScaling state after {} step{} (DelayedScaling::read): the amax history's last {} "
                        "entries, oldest first", o.steps, o.steps == 1 ? "" : "s", shown));
    t.columns({"tensor", "format", "scale", "scale_inv", "amax history", "fp8_max / amax"},
              {Align::left, Align::left, Align::right, Align::right, Align::left, Align::right});
    for (std::size_t i = 0; i < states.size(); ++i) {
      const attnlab::Fp8TensorState& s = states[i];
      std::vector<std::string> tail;
      for (std::size_t j = s.amax_history.size() - std::min(shown, s.amax_history.size()); j < s.amax_history.size();
           ++j)
        tail.push_back(fmt::format("{:.4g}", s.amax_history[j]));
      const attnlab::DType f = cell.format(kForwardTensors[i]);
      const double want =
          expected_scale(kForwardTensors[i], s, f, defaults.margin, last.scale_used[i], defaults.amax_compute_algo);
      t.row({fp8_tensor_name(kForwardTensors[i]), std::string(attnlab::to_string(f)), fmt::format("{:.6g}", s.scale),
             fmt::format("{:.6g}", s.scale_inv), fmt::format("{}", fmt::join(tail, ", ")),
             fmt::format("{:.6g} {}", want, std::fabs(s.scale - want) <= 1e-6 * want ? "✓" : "✗")});
    }
    t.print();
  }
  {
    Table t(fmt::format("Time per call at {} (median of groups, CUDA events; e4m3: Q, K, V already FP8)",
                        shape_text(o)));
    t.columns({"path", "bf16 ms", "TFLOP/s", "e4m3 ms", "TFLOP/s", "e4m3 vs bf16"});
    for (const ResultRow& r16 : t16) {
      const auto it = std::find_if(t8.begin(), t8.end(), [&](const ResultRow& r) { return r.path == r16.path; });
      const auto why = std::find_if(support.begin(), support.end(), [&](const auto& s) { return s.first == r16.path; });
      std::vector<std::string> cells = {r16.path};
      if (r16.ok) cells.insert(cells.end(), {fmt_opt(r16.ms_median, "{:.4f}"), fmt_opt(r16.tflops, "{:.1f}")});
      else cells.insert(cells.end(), {"did not run", r16.note.substr(0, 60)});
      if (it != t8.end() && it->ok) {
        cells.insert(cells.end(), {fmt_opt(it->ms_median, "{:.4f}"), fmt_opt(it->tflops, "{:.1f}")});
        const double speedup = r16.ok ? *r16.ms_median / *it->ms_median : 0.0;
        cells.push_back(!r16.ok ? "—"
                        : speedup >= 1.0 ? fmt::format("{:.2f}× faster", speedup)
                                         : fmt::format("{:.2f}× slower", 1.0 / speedup));
      } else {
        const std::string reason = it != t8.end() ? it->note : why != support.end() ? why->second : "not asked";
        cells.insert(cells.end(), {"no FP8", reason.substr(0, 60), "—"});
      }
      t.row(cells);
    }
    t.print();
    if (whole.ok)
      fmt::print("One recipe step on {} from bf16 Q, K, V (quantize Q, K, V + the FP8 call + update): {} ms, {:.1f} "
                 "TFLOP/s of attention\n\n",
                 fp8_path, fmt_opt(whole.ms_median, "{:.4f}"), *whole.tflops);
    else
      fmt::print("One recipe step on {} could not be timed: {}\n\n", fp8_path, whole.note);
  }

  print_observation(
      fmt::format("the FP8 output is close to the bf16 one: E4M3 keeps 3 mantissa bits, so elements differ by a few "
                  "percent of |O| (the lab's bound: mean ≤ {:.1f}% of mean |O|, max ≤ {:.0f}% of max |O|), nothing is "
                  "NaN, and quantize() and dequantize() agree with the lab's own e4m3 rounding and decoding",
                  100 * kMeanOfMeanAbs, 100 * kMaxOfMaxAbs),
      fmt::format("step {}: mean |bf16 − FP8| {} ({} of mean |O|), max {} ({} of max |O|); the FP8 call alone "
                  "(vs bf16 on its own e4m3 inputs): mean {} ({} of mean |O|); quantize {}; dequantize {}{}",
                  last.step, sci(last.mean_abs), pct(last.mean_abs, ref_mean), sci(last.max_abs),
                  pct(last.max_abs, ref_max), sci(last.call_mean_abs), pct(last.call_mean_abs, ref_mean),
                  last.quantize_mismatches == 0 ? "agrees" : fmt::format("differs in {} codes", last.quantize_mismatches),
                  last.dequant_agrees ? "agrees" : "disagrees", diagnosis(last, ref_mean, fp8_path)),
      close);
  print_observation(
      "delayed scaling: step 1 quantizes with scale 1 (no amax seen yet); each update sets a tensor's scale to "
      "fp8_max / amax over its history (q, k, v about 448 / max |x|, P capped at 448), and later steps are no less "
      "accurate than the first",
      fmt::format("scales after step {}: q {:.4g}, k {:.4g}, v {:.4g}, s {:.4g}, o {:.4g} ({}); mean |diff| {} at step "
                  "1, {} at step {}",
                  last.step, states[0].scale, states[1].scale, states[2].scale, states[3].scale, states[4].scale,
                  off_recipe.empty() ? "each fp8_max / max(history)"
                                     : fmt::format("NOT fp8_max / max(history) for {}", fmt::join(off_recipe, ", ")),
                  sci(first.mean_abs), sci(last.mean_abs), last.step),
      recipe_ok);
  print_observation(
      "FP8 is faster than bf16 on large shapes: e4m3 tensor cores run at twice the bf16 rate on Hopper (at this "
      "head dim and length the gap can be small; 'attnlab bench --workloads bench/workloads_fp8.json' times "
      "Hqk 128 at T 8k–16k)",
      fp8_timed == nullptr
          ? fmt::format("{} in e4m3 could not be timed", fp8_path)
          : fmt::format("{} e4m3 {} ms vs the fastest bf16 path ({}) {} ms: {:.2f}×", fp8_path,
                        fmt_opt(fp8_timed->ms_median, "{:.4f}"), ref_path, fmt_opt(fastest->ms_median, "{:.4f}"),
                        *fastest->ms_median / *fp8_timed->ms_median),
      faster);
  fmt::print("The C++ of these steps: 'attnlab fp8 --snippet'.\n\n");
  return outcome;
}

Action attach_fp8(CLI::App& cmd) {
  auto o = std::make_shared<Fp8Options>();
  auto report = std::make_shared<ReportFlags>();
  auto snippet = std::make_shared<bool>(false);
  const char* shape = "Shape (Q, K, V and O are (B, T, N, H); the codelab's FP8 cell by default)";
  cmd.add_option("-B,--batch", o->B, "batch size B")->check(CLI::PositiveNumber)->capture_default_str()->group(shape);
  cmd.add_option("-T,--seq", o->T, "sequence length T = S")->check(CLI::PositiveNumber)->capture_default_str()
      ->group(shape);
  cmd.add_option("-N,--heads", o->N, "heads N (= K)")->check(CLI::PositiveNumber)->capture_default_str()->group(shape);
  cmd.add_option("-H,--head-dim", o->H, "head dimension H")->check(CLI::PositiveNumber)->capture_default_str()
      ->group(shape);
  cmd.add_flag("--causal,!--no-causal", o->causal, "causal mask (the codelab's; --no-causal for the full one)")
      ->group(shape);
  const char* run = "Run";
  cmd.add_option("--steps", o->steps, "DelayedScaling steps (the first runs with scale 1)")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(run);
  cmd.add_option("--paths", o->paths, "bf16 paths to time and compare with (default: every GPU path here; the "
                                      "fastest is the reference)")->delimiter(',')->group(run);
  cmd.add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str()->group(run);
  cmd.add_flag("--json", o->json, "print result rows as JSON, one object per line, instead of tables")->group(run);
  cmd.add_flag("--snippet", *snippet, "print the C++ that runs FP8 attention with the recipe, and exit")->group(run);
  add_timing_flags(cmd, o->plan, "Timing");
  add_report_flags(cmd, *report);
  cmd.footer("Exits 0 where there is no FP8 attention (it says why and prints the C++ that would use it), and 1 "
             "when the FP8 output is not close to the bf16 one; timing observations are flagged only.");
  return [o, report, snippet] {
    if (*snippet) {
      fmt::print("{}", kFp8Snippet);
      return 0;
    }
    return run_with_report(*report, "attnlab fp8", o->json, [&] { return run_fp8(*o); });
  };
}

}  // namespace lab
