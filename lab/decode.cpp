// attnlab decode — decode attention as an inference engine calls it: through the serving API
// (attnlab::forward(ctx, VarlenForwardArgs), include/attnlab/serving.h), B sequences of q_len new tokens each
// (packed queries) against S keys per sequence, packed end to end (contiguous) or in a paged cache whose pages
// come in a shuffled order (decode_inputs.h). Decode reads the whole KV cache for a handful of queries, so what a
// row says is how fast that read goes: µs per call, tokens/s (B·q_len per call) and the KV read rate in GB/s
// (B·S·K·H·2 tensors·element size per call), next to which the GPU's memory bandwidth is the ceiling. Small shapes
// are checked against cpu-naive on a host copy first; a path that refuses the call (the GPU kernels for these
// layouts are being written) leaves its reason as the row's note, and the grid goes on.
#include <algorithm>
#include <memory>
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
#include "timing.h"

namespace lab {
namespace {

// The grid's defaults: a GPU's decode contexts run to 128k keys; the CPU paths take one sequence at a time, so
// their default stays at sizes a laptop answers in seconds.
const std::vector<std::int64_t> kGpuContexts = {1024, 4096, 16384, 32768, 131072};
const std::vector<std::int64_t> kCpuContexts = {256, 1024};
// The check runs cpu-naive on a host copy; past these sizes that takes longer than the timing it guards.
constexpr std::int64_t kCheckMaxS = 4096, kCheckMaxB = 4;

struct DecodeFlags : ServingFlags {
  std::vector<std::int64_t> batch = {1, 64};
  std::vector<std::int64_t> context;  // empty: kGpuContexts on cuda, kCpuContexts on cpu
  std::vector<std::string> heads = {"32/8"};
  std::int64_t head_dim = 128;
  std::int64_t q_len = 1;
  std::vector<std::string> layouts = {"contiguous", "paged"};
  std::int64_t page_size = 64;
  std::vector<std::string> paths = {"auto"};
  bool append = false;  // also time append_kv of the q_len new rows, and a device copy of the same bytes
  // "context": the calls take their scratch from the context (which orders it between streams with an event
  // recorded after each call); "caller": from one device buffer of workspace_size() bytes, as an engine embedding
  // the library passes it (args.workspace), so that nothing but the kernels goes onto the stream.
  std::string workspace = "context";
  // "legacy": the context's default stream; "own": a blocking stream of the lab's set on the context, as an
  // engine runs on a stream of its own (some overlaps between kernels, such as programmatic dependent launch, are
  // the stream's to allow).
  std::string stream = "legacy";
};

struct DecodeRow : ServingRow {
  DecodeShape shape;
  std::string check;  // "passed", "failed", "reference", "skipped: …"; empty when the call did not run
  // --append: append_kv of the new rows and cudaMemcpyAsync of the same bytes (GPU), ms per call
  std::optional<double> append_ms, copy_ms;
  double new_row_bytes = 0;
  std::optional<double> max_abs_err;

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
  const DecodeShape& s = r.shape;
  Json j;
  j["experiment"] = "decode";
  put_run(j, r, s.dtype);
  j["layout"] = std::string(to_string(s.layout));
  j["B"] = s.B, j["S"] = s.S, j["N"] = s.N, j["K"] = s.K, j["H"] = s.H, j["q_len"] = s.q_len;
  j["page_size"] = s.layout == KvLayout::paged ? Json(s.page_size) : Json(nullptr);
  put_times(j, r);
  j["tokens_per_s"] = number(r.tokens_per_s());
  j["kv_read_GBps"] = number(r.kv_gbps());
  if (r.append_ms || r.copy_ms) {
    j["append_ms"] = number(r.append_ms), j["copy_ms"] = number(r.copy_ms);
    j["append_bytes"] = r.new_row_bytes;
  }
  j["check"] = r.check.empty() ? Json(nullptr) : Json(r.check);
  j["max_abs_err"] = number(r.max_abs_err);
  put_outcome(j, r, r.ok());
  return json_line(j);
}

// Why `s` is not run on `device`, or nullopt: int32 offsets that cannot address its keys, or more memory than the
// budget (all `sets` copies of its tensors together).
std::optional<std::string> over_budget(const DecodeShape& s, attnlab::Device device, int sets) {
  const double rows = s.layout == KvLayout::paged ? double(s.B * s.pages_per_sequence()) * double(s.page_size)
                                                  : double(s.B) * double(s.S);
  if (rows > double(INT32_MAX)) return fmt::format("{:.0f} cache rows: past what int32 offsets can address", rows);
  return over_memory_budget(s.footprint_bytes() * sets, device);
}

// One shape's tensors on one device, made when the first path that runs there needs them.
struct Placed {
  std::vector<std::unique_ptr<DecodeInputs>> sets;
  std::string problem;  // why they could not be made (over budget, out of memory); sets then empty
  bool budget = false;  // the problem is the budget: the shape was skipped, not failed
};

// Times `path` on the placed inputs, after one checked call.
// --append: the decode loop's append_kv of the new rows into the same cache, timed like the attention call, and on
// the GPU the copy engine moving the same bytes (one cudaMemcpyAsync each for K and V: what an append costs at
// copy speed).
void time_append(DecodeRow& row, const Placed& placed, const TimingPlan& plan, attnlab::Context& ctx) {
  std::vector<attnlab::AppendKVArgs> appends;
  for (const auto& set : placed.sets) appends.push_back(set->append_args());
  row.new_row_bytes = placed.sets.front()->new_row_bytes();
  row.append_ms = measure(row.device, [&](int i) { attnlab::append_kv(ctx, appends[std::size_t(i) % appends.size()]); },
                          plan).ms_median;
  if (row.device != attnlab::Device::cuda) return;
  const std::size_t half = std::size_t(row.new_row_bytes / 2);
  gpu::DeviceBuffer k_copy(half), v_copy(half);
  row.copy_ms = measure(row.device,
                        [&](int i) {
                          const attnlab::AppendKVArgs& a = appends[std::size_t(i) % appends.size()];
                          gpu::copy_on_device(k_copy.data(), a.k_new.data, half);
                          gpu::copy_on_device(v_copy.data(), a.v_new.data, half);
                        },
                        plan).ms_median;
}

void run_path(DecodeRow& row, const Placed& placed, const TimingPlan& plan, int threads,
              std::optional<std::vector<float>>& reference, std::uint64_t seed, bool append, bool caller_workspace,
              bool own_stream) {
  const DecodeShape& s = row.shape;
  std::optional<gpu::Stream> stream;  // before ctx: it outlives the context's work on it
  attnlab::Context ctx;
  ctx.set_num_threads(threads);
  if (own_stream && row.device == attnlab::Device::cuda) {
    stream.emplace(0, /*blocking=*/true);
    ctx.set_stream(stream->get());
  }
  std::vector<attnlab::VarlenForwardArgs> calls;
  for (const auto& set : placed.sets) calls.push_back(set->args(row.asked));
  gpu::DeviceBuffer workspace;
  try {
    if (caller_workspace && row.device == attnlab::Device::cuda) {
      std::size_t bytes = 0;
      for (const auto& call : calls) bytes = std::max(bytes, attnlab::workspace_size(ctx, call));
      if (bytes > 0) {
        workspace = gpu::DeviceBuffer(bytes);
        for (auto& call : calls) call.workspace = attnlab::DeviceBuffer{workspace.data(), workspace.size()};
      }
      row.note = fmt::format("caller workspace, {} bytes", bytes);
    }
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
      Closeness c(tolerance_for(s.dtype));
      for (std::size_t i = 0; i < out.size(); ++i)
        if (!c.add(out[i], (*reference)[i])) break;
      row.max_abs_err = c.max_abs_err();
      row.check = c.close() ? "passed" : "failed";
    }
    const Timing t = measure(
        row.device, [&](int i) { attnlab::forward(ctx, calls[std::size_t(i) % calls.size()]); }, plan);
    row.record(t);
    if (append && s.q_len <= s.S) time_append(row, placed, plan, ctx);
  } catch (const attnlab::Error& e) {
    row.record_failure(e);
    row.check.clear();
    row.max_abs_err.reset();
  }
}

std::string si(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::vector<std::string> cells(const DecodeRow& r, Footnotes& notes, bool append) {
  const DecodeShape& s = r.shape;
  const std::string layout =
      s.layout == KvLayout::paged ? fmt::format("paged {}", s.page_size) : std::string("contiguous");
  std::vector<std::string> out = {std::to_string(s.B), std::to_string(s.S), Heads{s.N, s.K}.label(), layout,
                                  r.path_cell()};
  if (!r.ran) {
    out.insert(out.end(), {"did not run", "—", "—", "—"});
    if (append) out.insert(out.end(), {"—", "—", "—"});
    out.push_back(r.not_run_cell(notes));
    return out;
  }
  std::string check = r.check;
  if (r.max_abs_err) check = fmt::format("{} {:.1e}", r.check == "passed" ? "ok" : "FAIL", *r.max_abs_err);
  out.insert(out.end(), {fmt_opt(r.ms ? std::optional<double>(*r.ms * 1e3) : std::nullopt, "{:.1f}"),
                         si(*r.tokens_per_s()), fmt_opt(r.kv_gbps(), "{:.1f}"), check});
  if (append) {
    const auto us = [](const std::optional<double>& ms) { return ms ? std::optional<double>(*ms * 1e3) : ms; };
    const auto gbps = [&](const std::optional<double>& ms) {
      return ms && *ms > 0 ? std::optional<double>(r.new_row_bytes / (*ms * 1e-3) / 1e9) : std::nullopt;
    };
    out.insert(out.end(), {fmt_opt(us(r.append_ms), "{:.1f}"), fmt_opt(gbps(r.append_ms), "{:.1f}"),
                           fmt_opt(gbps(r.copy_ms), "{:.1f}")});
  }
  std::string note = r.sets > 1 ? fmt::format("{} input sets", r.sets) : std::string();
  if (!r.note.empty()) note += (note.empty() ? "" : "; ") + r.note;
  out.push_back(note);
  return out;
}

int run_decode(const DecodeFlags& f) {
  const attnlab::Device device = resolve_device(f.device);
  const bool gpu = device == attnlab::Device::cuda;
  const attnlab::DType dtype = resolve_dtype(f.dtype, device);
  const std::vector<std::int64_t>& contexts = !f.context.empty() ? f.context : gpu ? kGpuContexts : kCpuContexts;
  std::vector<Heads> heads;
  for (const std::string& h : f.heads) heads.push_back(parse_heads(h, "N/K pairs such as 32/8, comma-separated"));
  std::vector<KvLayout> layouts;
  for (const std::string& l : f.layouts) layouts.push_back(l == "paged" ? KvLayout::paged : KvLayout::contiguous);
  for (const std::string& p : f.paths) check_path_name("--path", p);

  // Rows on stdout (bare --json) replace the table; rows appended to a file (--json FILE, --jsonl FILE) do not.
  RowSinks sinks(f);
  const bool json = sinks.on_stdout();

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
                run_path(row, *p, f.plan, f.threads, reference, f.seed, f.append, f.workspace == "caller",
                         f.stream == "own");
              }
              sinks.write(to_json_line(row));
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
  std::vector<std::string> headers = {"B", "S", "heads", "layout", "path", "µs/call", "tokens/s", "KV GB/s", "check"};
  std::vector<Align> align = {Align::right, Align::right, Align::left,  Align::left, Align::left,
                              Align::right, Align::right, Align::right, Align::left};
  if (f.append) {
    headers.insert(headers.end(), {"append µs", "append GB/s", "copy GB/s"});
    align.insert(align.end(), {Align::right, Align::right, Align::right});
  }
  headers.push_back("note"), align.push_back(Align::left);
  table.columns(headers, align);
  Footnotes notes;
  for (const DecodeRow& r : rows) table.row(cells(r, notes, f.append));
  table.print();
  notes.print();
  fmt::print("tokens/s = B·q_len / time per call; KV GB/s = the K and V one call must read (B·S·K·H·2·{} "
             "bytes) / time per call\n",
             attnlab::size_of(dtype));
  fmt::print("paged: pages of {} keys, each sequence's pages in a shuffled order; check: max |diff| against "
             "cpu-naive on a host copy of the same inputs (rtol={:g}, atol={:g}), where S ≤ {} and B ≤ {}\n",
             f.page_size, tol.rtol, tol.atol, kCheckMaxS, kCheckMaxB);
  if (f.append)
    fmt::print("append: append_kv of q_len new rows per sequence into the same cache (positions S − q_len …); GB/s = "
               "the new rows' K and V bytes (B·q_len·K·H·2·{}) / time per call; copy: cudaMemcpyAsync of the same "
               "bytes, one copy each for K and V\n",
               attnlab::size_of(dtype));
  if (!passed) fmt::print("check failed: a path's output differs from cpu-naive's beyond the tolerance (FAIL rows)\n");
  return passed ? 0 : 1;
}

}  // namespace

Action attach_decode(CLI::App& cmd) {
  auto f = std::make_shared<DecodeFlags>();
  const CLI::Validator positive = positive_number();
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
  cmd.add_flag("--append", f->append, "also time append_kv of the q_len new rows per sequence into the same cache "
                                      "(the decode loop's other call), and on the GPU a device copy of the same bytes")
      ->group(grid);

  const char* run = "Run";
  cmd.add_option("--workspace", f->workspace, "where GPU calls take their scratch: context (the context's own, "
                                              "ordered between streams by an event after each call) or caller (one "
                                              "buffer of workspace_size() bytes in args.workspace, as an engine "
                                              "passes it)")
      ->check(CLI::IsMember({"context", "caller"}))->capture_default_str()->group(run);
  cmd.add_option("--stream", f->stream, "the GPU calls' stream: legacy (the context's default, the legacy default "
                                        "stream) or own (a blocking stream of the lab's, set on the context)")
      ->check(CLI::IsMember({"legacy", "own"}))->capture_default_str()->group(run);
  add_dtype_flag(cmd, *f, run);
  cmd.add_option("--path", f->paths, "comma-separated paths to time; 'auto' lets the library choose")
      ->delimiter(',')->capture_default_str()->group(run);
  add_run_flags(cmd, *f,
                "where the tensors live (default: cuda when a CUDA path is available); a CPU path named with --path "
                "gets host tensors either way",
                run);
  add_timing_group(cmd, f);
  cmd.footer("A path that refuses a call (the GPU kernels for these layouts are being written) gets its reason as "
             "a footnote and the grid goes on; the exit status is 1 only when a check fails.");
  return [f] { return run_decode(*f); };
}

}  // namespace lab
