// attnlab decode — decode attention as an inference engine calls it: through the serving API
// (attnlab::forward(ctx, VarlenForwardArgs), include/attnlab/serving.h), B sequences of q_len new tokens each
// (packed queries) against S keys per sequence, packed end to end (contiguous) or in a paged cache whose pages
// come in a shuffled order (decode_inputs.h). Decode reads the whole KV cache for a handful of queries, so what a
// row says is how fast that read goes: µs per call, tokens/s (B·q_len per call) and the KV read rate in GB/s
// (B·S·K·H·2 tensors·element size per call), next to which the GPU's memory bandwidth is the ceiling. Small shapes
// are checked against cpu-naive on a host copy first; a path that refuses the call (the GPU kernels for these
// layouts are being written) leaves its reason as the row's note, and the grid goes on.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
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
#include "progress.h"
#include "table.h"
#include "timing.h"

namespace lab {
namespace {

// The grid's defaults: a GPU's decode contexts run to 128k keys; the CPU paths take one sequence at a time, so
// their default stays at sizes a laptop answers in seconds.
const std::vector<std::int64_t> kGpuContexts = {1024, 4096, 16384, 32768, 131072};
const std::vector<std::int64_t> kCpuContexts = {256, 1024};
// Memory a shape may take: a share of what the GPU has free (the library's workspace and the next shape's
// allocations need the rest), or a fixed amount of host memory.
constexpr double kGpuShare = 0.6;
constexpr double kHostBudget = 4.0 * (1 << 30);
// The check runs cpu-naive on a host copy; past these sizes that takes longer than the timing it guards.
constexpr std::int64_t kCheckMaxS = 4096, kCheckMaxB = 4;

struct DecodeFlags {
  std::vector<std::int64_t> batch = {1, 64};
  std::vector<std::int64_t> context;  // empty: kGpuContexts on cuda, kCpuContexts on cpu
  std::vector<std::string> heads = {"32/8"};
  std::int64_t head_dim = 128;
  std::int64_t q_len = 1;
  std::vector<std::string> layouts = {"contiguous", "paged"};
  std::int64_t page_size = 64;
  std::string dtype;  // empty: bf16 on cuda, f32 on cpu
  std::vector<std::string> paths = {"auto"};
  std::string device;  // empty: cuda when a CUDA path is available here, else cpu
  std::uint64_t seed = 0;
  int threads = 0;
  std::string json_file;  // --json FILE; bare --json leaves it empty (json_option says it was given)
  std::string jsonl;
  CLI::Option* json_option = nullptr;
  TimingPlan plan;
};

struct Heads {
  std::int64_t N, K;
  std::string label() const {
    return fmt::format("{}/{} {}", N, K, K == N ? "MHA" : K == 1 ? "MQA" : "GQA");
  }
};

// "32/8" (N query heads over K KV heads), or "32" for K = N.
Heads parse_heads(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return attnlab::Error(attnlab::ErrorCode::invalid_argument,
                          fmt::format("--heads: '{}' {} (N/K pairs such as 32/8, comma-separated)", text, why));
  };
  const std::size_t slash = text.find('/');
  Heads h{};
  try {
    std::size_t used = 0;
    h.N = std::stoll(text.substr(0, slash), &used);
    if (used != (slash == std::string::npos ? text.size() : slash)) throw bad("is not a pair of whole numbers");
    h.K = slash == std::string::npos ? h.N : std::stoll(text.substr(slash + 1), &used);
    if (slash != std::string::npos && used != text.size() - slash - 1) throw bad("is not a pair of whole numbers");
  } catch (const std::logic_error&) {  // std::stoll's invalid_argument / out_of_range
    throw bad("is not a pair of whole numbers");
  }
  if (h.N < 1 || h.K < 1) throw bad("needs N, K >= 1");
  if (h.N % h.K != 0) throw bad("needs N to be a multiple of K");
  return h;
}

// Path names are the user's to fix: stop before anything runs rather than in the grid's first row.
void check_path_names(const std::vector<std::string>& paths) {
  std::vector<std::string> known = {"auto"};
  for (const attnlab::PathInfo& p : attnlab::list_paths()) {
    if (p.name.starts_with("flash-") && std::find(known.begin(), known.end(), "flash") == known.end())
      known.push_back("flash");  // the library's name for whichever flash-sm* runs the call
    known.push_back(p.name);
  }
  for (const std::string& p : paths)
    if (std::find(known.begin(), known.end(), p) == known.end())
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("--path: unknown path '{}': this build has {}", p, fmt::join(known, ", ")));
}

// compare's tolerances (the codelab's): f32 atol 1e-3 with rtol 1e-5, the half types 1e-2 both.
struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance_for(attnlab::DType dtype) {
  return dtype == attnlab::DType::f32 ? Tolerance{1e-3, 1e-5} : Tolerance{1e-2, 1e-2};
}

struct DecodeRow {
  DecodeShape shape;
  std::string asked, path;  // the path asked for, and the one that ran (auto resolved)
  attnlab::Device device = attnlab::Device::cpu;
  std::optional<double> ms, ms_min, ms_max;
  std::optional<double> host_ms;  // the host's time to issue one call (near ms: launch-bound)
  std::string check;  // "passed", "failed", "reference", "skipped: …"; empty when the call did not run
  std::optional<double> max_abs_err;
  int sets = 1;
  bool ran = false;
  bool refused = false;  // the library said unsupported (note: its message)
  bool skipped = false;  // over the memory budget: not run (note: why)
  std::string note;      // the refusal, the error, or why the shape was skipped

  bool ok() const { return ran && check != "failed"; }
  std::optional<double> tokens_per_s() const {
    if (!ms) return std::nullopt;
    return double(shape.B * shape.q_len) / (*ms * 1e-3);
  }
  std::optional<double> kv_gbps() const {
    if (!ms) return std::nullopt;
    return shape.kv_read_bytes() / (*ms * 1e-3) / 1e9;
  }
};

// The keys of docs/design.md §4 that decode shares, then decode's own; a value not measured is null.
std::string to_json_line(const DecodeRow& r) {
  using Json = nlohmann::ordered_json;
  const auto number = [](const std::optional<double>& v) { return v && std::isfinite(*v) ? Json(*v) : Json(nullptr); };
  const DecodeShape& s = r.shape;
  Json j;
  j["experiment"] = "decode";
  j["path"] = r.path;
  j["asked"] = r.asked;
  j["device"] = device_label(r.device);
  j["dtype"] = std::string(attnlab::to_string(s.dtype));
  j["layout"] = std::string(to_string(s.layout));
  j["B"] = s.B, j["S"] = s.S, j["N"] = s.N, j["K"] = s.K, j["H"] = s.H, j["q_len"] = s.q_len;
  j["page_size"] = s.layout == KvLayout::paged ? Json(s.page_size) : Json(nullptr);
  j["ms"] = number(r.ms);
  j["ms_min"] = number(r.ms_min);
  j["ms_max"] = number(r.ms_max);
  j["host_ms"] = number(r.host_ms);
  j["tokens_per_s"] = number(r.tokens_per_s());
  j["kv_read_GBps"] = number(r.kv_gbps());
  j["check"] = r.check.empty() ? Json(nullptr) : Json(r.check);
  j["max_abs_err"] = number(r.max_abs_err);
  j["input_sets"] = r.sets;
  j["ok"] = r.ok();
  j["note"] = r.note;
  // Replace invalid UTF-8 instead of throwing: notes carry library messages verbatim.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Why `s` is not run on `device`, or nullopt: int32 offsets that cannot address its keys, or more memory than the
// budget (all `sets` copies of its tensors together).
std::optional<std::string> over_budget(const DecodeShape& s, attnlab::Device device, int sets) {
  const double rows = s.layout == KvLayout::paged ? double(s.B * s.pages_per_sequence()) * double(s.page_size)
                                                  : double(s.B) * double(s.S);
  if (rows > double(INT32_MAX)) return fmt::format("{:.0f} cache rows: past what int32 offsets can address", rows);
  const double need = s.footprint_bytes() * sets;
  const double gib = double(1 << 30);
  if (device == attnlab::Device::cpu) {
    if (need > kHostBudget)
      return fmt::format("needs {:.1f} GiB of host memory, over the {:.0f} GiB budget", need / gib, kHostBudget / gib);
    return std::nullopt;
  }
  const std::optional<std::size_t> free = free_gpu_bytes();
  if (free && need > kGpuShare * double(*free))
    return fmt::format("needs {:.1f} GiB, over {:.0f}% of the {:.1f} GiB free on the GPU", need / gib,
                       kGpuShare * 100, double(*free) / gib);
  return std::nullopt;
}

// One shape's tensors on one device, made when the first path that runs there needs them.
struct Placed {
  std::vector<std::unique_ptr<DecodeInputs>> sets;
  std::string problem;  // why they could not be made (over budget, out of memory); sets then empty
  bool budget = false;  // the problem is the budget: the shape was skipped, not failed
};

std::uint64_t set_seed(std::uint64_t seed, int set) { return seed + 17 * std::uint64_t(set); }

// Times `path` on the placed inputs, after one checked call.
void run_path(DecodeRow& row, const Placed& placed, const TimingPlan& plan, int threads,
              std::optional<std::vector<float>>& reference, std::uint64_t seed) {
  const DecodeShape& s = row.shape;
  attnlab::Context ctx;
  ctx.set_num_threads(threads);
  std::vector<attnlab::VarlenForwardArgs> calls;
  for (const auto& set : placed.sets) calls.push_back(set->args(row.asked));
  try {
    row.path = attnlab::forward(ctx, calls.front()).path;
    row.ran = true;
    if (s.S > kCheckMaxS || s.B > kCheckMaxB) {
      row.check = fmt::format("skipped: {}", s.S > kCheckMaxS ? fmt::format("S > {}", kCheckMaxS)
                                                              : fmt::format("B > {}", kCheckMaxB));
    } else if (row.device == attnlab::Device::cpu && row.path == "cpu-naive") {
      row.check = "reference";
    } else {
      if (!reference) {  // once per shape: every path of it is checked against the same output
        DecodeInputs host(s, attnlab::Device::cpu, set_seed(seed, 0));
        attnlab::Context ref_ctx;
        ref_ctx.set_num_threads(threads);
        attnlab::forward(ref_ctx, host.args("cpu-naive"));
        reference = host.output();
      }
      const std::vector<float> out = placed.sets.front()->output();
      const Tolerance tol = tolerance_for(s.dtype);
      double worst = 0;
      bool close = true;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const double d = std::fabs(double(out[i]) - double((*reference)[i]));
        if (!(d <= tol.atol + tol.rtol * std::fabs(double((*reference)[i])))) close = false;  // NaN included
        worst = std::isnan(d) ? d : std::max(worst, d);
        if (std::isnan(worst)) break;
      }
      row.max_abs_err = worst;
      row.check = close ? "passed" : "failed";
    }
    const Timing t = measure(
        row.device, [&](int i) { attnlab::forward(ctx, calls[std::size_t(i) % calls.size()]); }, plan);
    row.ms = t.ms_median, row.ms_min = t.ms_min, row.ms_max = t.ms_max;
    if (t.host_ms_median > 0) row.host_ms = t.host_ms_median;
  } catch (const attnlab::Error& e) {
    if (e.code() == attnlab::ErrorCode::invalid_argument) throw;  // the arguments are the lab's: a bug to see
    row.ran = false;
    row.check.clear();
    row.max_abs_err.reset();
    row.refused = e.code() == attnlab::ErrorCode::unsupported;
    row.note = e.what();
  }
}

std::string si(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

// Library messages are long and repeat over the grid: the table names each once, as a footnote.
class Footnotes {
 public:
  std::string mark(const std::string& text) {
    auto it = std::find(texts_.begin(), texts_.end(), text);
    if (it == texts_.end()) it = texts_.insert(texts_.end(), text);
    return fmt::format("[{}]", it - texts_.begin() + 1);
  }
  void print() const {
    for (std::size_t i = 0; i < texts_.size(); ++i) fmt::print("[{}] {}\n", i + 1, texts_[i]);
  }

 private:
  std::vector<std::string> texts_;
};

std::vector<std::string> cells(const DecodeRow& r, Footnotes& notes) {
  const DecodeShape& s = r.shape;
  const std::string layout =
      s.layout == KvLayout::paged ? fmt::format("paged {}", s.page_size) : std::string("contiguous");
  const std::string path = !r.ran || r.path == r.asked ? r.asked : fmt::format("{} → {}", r.asked, r.path);
  std::vector<std::string> out = {std::to_string(s.B), std::to_string(s.S), Heads{s.N, s.K}.label(), layout, path};
  if (!r.ran) {
    const std::string note = r.skipped ? fmt::format("skipped: {}", r.note)
                                                   : fmt::format("{} {}", r.refused ? "refused" : "failed",
                                                                 notes.mark(r.note));
    out.insert(out.end(), {"did not run", "—", "—", "—", note});
    return out;
  }
  std::string check = r.check;
  if (r.max_abs_err) check = fmt::format("{} {:.1e}", r.check == "passed" ? "ok" : "FAIL", *r.max_abs_err);
  out.insert(out.end(), {fmt_opt(r.ms ? std::optional<double>(*r.ms * 1e3) : std::nullopt, "{:.1f}"),
                         si(*r.tokens_per_s()), fmt_opt(r.kv_gbps(), "{:.1f}"), check,
                         r.sets > 1 ? fmt::format("{} input sets", r.sets) : std::string()});
  return out;
}

int run_decode(const DecodeFlags& f) {
  // The device as every lab command resolves it (an unusable --device cuda is refused here, in the same words).
  CaseFlags device_flags;
  device_flags.device = f.device;
  const attnlab::Device device = resolve(device_flags, [](attnlab::Device) {
    return std::vector<std::string>{"auto"};
  }).device;
  const bool gpu = device == attnlab::Device::cuda;
  const attnlab::DType dtype = attnlab::parse_dtype(f.dtype.empty() ? (gpu ? "bf16" : "f32") : f.dtype);
  const std::vector<std::int64_t>& contexts = !f.context.empty() ? f.context : gpu ? kGpuContexts : kCpuContexts;
  std::vector<Heads> heads;
  for (const std::string& h : f.heads) heads.push_back(parse_heads(h));
  std::vector<KvLayout> layouts;
  for (const std::string& l : f.layouts) layouts.push_back(l == "paged" ? KvLayout::paged : KvLayout::contiguous);
  check_path_names(f.paths);

  // Rows on stdout (bare --json) replace the table; rows appended to a file (--json FILE, --jsonl FILE) do not.
  const bool json = f.json_option != nullptr && f.json_option->count() > 0 && f.json_file.empty();
  std::vector<std::ofstream> files;
  for (const std::string& name : {f.json_file, f.jsonl}) {
    if (name.empty()) continue;
    files.emplace_back(name, std::ios::app);
    if (!files.back()) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "cannot write '" + name + "'");
  }

  std::vector<DecodeRow> rows;
  {
    Progress bar("decode", int(heads.size() * f.batch.size() * contexts.size() * layouts.size() * f.paths.size()));
    for (const Heads& h : heads)
      for (std::int64_t B : f.batch)
        for (std::int64_t S : contexts)
          for (KvLayout layout : layouts) {
            const DecodeShape s{B, S, h.N, h.K, f.head_dim, f.q_len, f.page_size, dtype, layout};
            std::optional<Placed> placed[2];  // [device]: cpu, cuda
            std::optional<std::vector<float>> reference;
            for (const std::string& path : f.paths) {
              bar.step(fmt::format("B={} S={} {} {} {}", B, S, h.label(), to_string(layout), path));
              DecodeRow row;
              row.shape = s, row.asked = row.path = path, row.device = path_device(path, device);
              // Rotate input sets where one would sit in the GPU's L2 between calls, as bench does (bench_core.h).
              row.sets = input_sets(Workload{"", "decode", B, f.q_len, S, h.N, h.K, f.head_dim, f.head_dim, dtype},
                                    row.device);
              std::optional<Placed>& p = placed[row.device == attnlab::Device::cuda];
              if (!p) {
                p.emplace();
                if (auto why = over_budget(s, row.device, row.sets)) {
                  p->problem = *why, p->budget = true;
                } else {
                  try {
                    for (int i = 0; i < row.sets; ++i)
                      p->sets.push_back(std::make_unique<DecodeInputs>(s, row.device, set_seed(f.seed, i)));
                  } catch (const attnlab::Error& e) {
                    if (e.code() == attnlab::ErrorCode::invalid_argument) throw;
                    p->sets.clear();
                    p->problem = e.what();
                  } catch (const std::bad_alloc&) {
                    p->sets.clear();
                    p->problem = "out of host memory";
                  }
                }
              }
              if (p->sets.empty()) {
                row.note = p->problem, row.skipped = p->budget;
              } else {
                run_path(row, *p, f.plan, f.threads, reference, f.seed);
              }
              for (std::ofstream& file : files) file << to_json_line(row) << "\n" << std::flush;
              if (json) fmt::print("{}\n", to_json_line(row));
              rows.push_back(std::move(row));
            }
          }
  }

  const bool passed = std::none_of(rows.begin(), rows.end(), [](const DecodeRow& r) { return r.check == "failed"; });
  if (json) return passed ? 0 : 1;

  const Tolerance tol = tolerance_for(dtype);
  Table table(fmt::format("Decode attention through attnlab::forward(ctx, VarlenForwardArgs) on {}: H={}, q_len={}{}, "
                          "{}; time per call, median of groups ({})",
                          device_label(device), f.head_dim, f.q_len, f.q_len > 1 ? " (bottom-right causal)" : "",
                          attnlab::to_string(dtype), gpu ? "CUDA events" : "steady clock"));
  table.columns({"B", "S", "heads", "layout", "path", "µs/call", "tokens/s", "KV GB/s", "check", "note"},
                {Align::right, Align::right, Align::left, Align::left, Align::left, Align::right, Align::right,
                 Align::right, Align::left, Align::left});
  Footnotes notes;
  for (const DecodeRow& r : rows) table.row(cells(r, notes));
  table.print();
  notes.print();
  fmt::print("tokens/s = B·q_len / time per call; KV GB/s = the K and V one call must read (B·S·K·H·2·{} "
             "bytes) / time per call\n",
             attnlab::size_of(dtype));
  fmt::print("paged: pages of {} keys, each sequence's pages in a shuffled order; check: max |diff| against "
             "cpu-naive on a host copy of the same inputs (rtol={:g}, atol={:g}), where S ≤ {} and B ≤ {}\n",
             f.page_size, tol.rtol, tol.atol, kCheckMaxS, kCheckMaxB);
  if (!passed) fmt::print("check failed: a path's output differs from cpu-naive's beyond the tolerance (FAIL rows)\n");
  return passed ? 0 : 1;
}

}  // namespace

Action attach_decode(CLI::App& cmd) {
  auto f = std::make_shared<DecodeFlags>();
  // CLI::PositiveNumber prints its range up to DBL_MAX; this says the rule in words (as case.cpp's does).
  const CLI::Validator positive(
      [](std::string& text) -> std::string {
        try {
          if (std::stoll(text) >= 1) return "";
        } catch (const std::exception&) {
          return "expects a whole number >= 1, got '" + text + "'";
        }
        return "must be >= 1, got " + text;
      },
      "POSITIVE");
  const char* grid = "Grid (queries (B·q_len, N, H) packed; keys (B·S, K, H) packed, or paged)";
  cmd.add_option("--batch", f->batch, "comma-separated batch sizes B (sequences per call)")
      ->delimiter(',')->check(positive)->capture_default_str()->group(grid);
  cmd.add_option("--context", f->context, "comma-separated context lengths S (keys per sequence; default "
                                          "1024,4096,16384,32768,131072 on cuda, 256,1024 on cpu)")
      ->delimiter(',')->check(positive)->group(grid);
  cmd.add_option("--heads", f->heads, "comma-separated N/K pairs: query heads over KV heads, e.g. 32/32,32/8,32/1 "
                                      "(MHA, GQA, MQA)")
      ->delimiter(',')->capture_default_str()->group(grid);
  cmd.add_option("--head-dim", f->head_dim, "head dimension H")->check(positive)->capture_default_str()->group(grid);
  cmd.add_option("--q-len", f->q_len, "new tokens per sequence (above 1: bottom-right causal, the decode "
                                      "convention)")->check(positive)->capture_default_str()->group(grid);
  cmd.add_option("--layout", f->layouts, "comma-separated KV layouts: contiguous (packed, cu_seqlens_k), paged "
                                         "(block table over shuffled pages)")
      ->delimiter(',')->check(CLI::IsMember({"contiguous", "paged"}))->capture_default_str()->group(grid);
  cmd.add_option("--page-size", f->page_size, "keys per page of the paged layout")->check(positive)
      ->capture_default_str()->group(grid);

  const char* run = "Run";
  cmd.add_option("--dtype", f->dtype, "element type of Q, K, V and O (default: bf16 on cuda, f32 on cpu)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))->group(run);
  cmd.add_option("--path", f->paths, "comma-separated paths to time; 'auto' lets the library choose")
      ->delimiter(',')->capture_default_str()->group(run);
  cmd.add_option("--device", f->device, "where the tensors live (default: cuda when a CUDA path is available); "
                                        "a CPU path named with --path gets host tensors either way")
      ->check(CLI::IsMember({"cpu", "cuda"}))->group(run);
  cmd.add_option("--seed", f->seed, "seed of the random inputs")->capture_default_str()->group(run);
  cmd.add_option("--threads", f->threads, "threads for CPU paths (0 = all)")->check(CLI::NonNegativeNumber)
      ->capture_default_str()->group(run);
  f->json_option = cmd.add_option("--json", f->json_file, "result rows as JSON, one object per line: on stdout "
                                                          "instead of the table, or with FILE appended to FILE")
                      ->expected(0, 1)->type_name("[FILE]")->group(run);
  cmd.add_option("--jsonl", f->jsonl, "append result rows (JSON lines) to this file (as bench's --jsonl)")
      ->group(run);

  const char* timing = "Timing";
  add_timing_flags(cmd, f->plan, timing);
  cmd.add_option_function<int>("--iters", [f](const int& n) { f->plan.repeats = n; },
                               "calls per timed group (another name for --repeats)")
      ->check(positive)->excludes(cmd.get_option("--repeats"))->group(timing);
  cmd.footer("A path that refuses a call (the GPU kernels for these layouts are being written) gets its reason as "
             "a footnote and the grid goes on; the exit status is 1 only when a check fails.");
  return [f] { return run_decode(*f); };
}

}  // namespace lab
