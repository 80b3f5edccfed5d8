// attnlab bench — the codelab's timing step: each path at a shape (the codelab default (4, 128, 8, 64) unless
// flags say otherwise) or at every workload of a file (bench/workloads.json: DESIGN §5's shapes, forward and
// backward), timed the lab's way (timing.h), with TFLOP/s, GB/s, the first call at the new shape, and the
// path's workspace. Rows go to the terminal as a table, and with --jsonl to a file peers' rows can join.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <attnlab/attention.h>

#include "case.h"
#include "experiment.h"
#include "gpu.h"
#include "results.h"
#include "table.h"
#include "tensors.h"
#include "timing.h"

namespace lab {
namespace {

struct Workload {
  std::string name, experiment = "bench";
  std::int64_t B, T, S, N, K, Hqk, Hv;
  attnlab::DType dtype;
  bool causal = false;
  bool backward = false;
};

std::vector<Workload> load_workloads(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, fmt::format("cannot read '{}'", file));
  nlohmann::json spec;
  try {
    in >> spec;
  } catch (const std::exception& e) {
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument, fmt::format("'{}' is not JSON: {}", file, e.what()));
  }
  const nlohmann::json& items = spec.is_object() ? spec.at("workloads") : spec;
  std::vector<Workload> out;
  for (const auto& it : items) {
    try {
      Workload w;
      w.name = it.value("name", "");
      w.experiment = it.value("experiment", "bench");
      w.B = it.at("B"), w.T = it.at("T"), w.N = it.at("N"), w.Hqk = it.at("Hqk");
      w.S = it.value("S", w.T), w.K = it.value("K", w.N), w.Hv = it.value("Hv", w.Hqk);
      w.dtype = attnlab::parse_dtype(it.value("dtype", std::string("bf16")));
      w.causal = it.value("causal", false);
      w.backward = it.value("direction", std::string("fwd")) == "bwd";
      out.push_back(w);
    } catch (const nlohmann::json::exception& e) {
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("'{}': workload {}: {}", file, out.size(), e.what()));
    }
  }
  return out;
}

// Bytes a call must move at least: each input read once, each output written once.
double io_bytes(const Workload& w) {
  const double elem = double(attnlab::size_of(w.dtype));
  const double q = double(w.B * w.T * w.N * w.Hqk), k = double(w.B * w.S * w.K * w.Hqk);
  const double v = double(w.B * w.S * w.K * w.Hv), o = double(w.B * w.T * w.N * w.Hv);
  return elem * (w.backward ? 2 * (q + k + v + o) + o : q + k + v + o);
}

// One buffer on the host or the GPU.
class Buffer {
 public:
  Buffer(attnlab::Device device, std::size_t bytes) : device_(device) {
    if (device == attnlab::Device::cuda)
      gpu_ = std::make_unique<gpu::DeviceBuffer>(bytes);
    else
      host_.resize(bytes);
  }
  void* data() { return gpu_ ? gpu_->data() : static_cast<void*>(host_.data()); }
  void fill(const std::vector<std::byte>& bytes) {
    if (gpu_)
      gpu_->upload(bytes.data(), bytes.size());
    else
      std::copy(bytes.begin(), bytes.end(), host_.begin());
  }

 private:
  attnlab::Device device_;
  std::unique_ptr<gpu::DeviceBuffer> gpu_;
  std::vector<std::byte> host_;
};

// One set of the call's tensors; the bench rotates several when they fit in the cache.
struct CallSet {
  std::vector<std::unique_ptr<Buffer>> buffers;
  attnlab::ForwardArgs fwd;
  attnlab::BackwardArgs bwd;

  attnlab::TensorView make(attnlab::Device device, attnlab::DType dtype, const Shape& shape,
                           std::optional<std::uint64_t> seed = std::nullopt) {
    const std::int64_t count = element_count(shape);
    buffers.push_back(std::make_unique<Buffer>(device, std::size_t(count) * attnlab::size_of(dtype)));
    Buffer& b = *buffers.back();
    if (seed) b.fill(encode(random_normal(count, *seed, buffers.size()), dtype));
    attnlab::TensorView view;
    view.data = b.data();
    view.dtype = dtype;
    view.device = device;
    view.rank = int(shape.size());
    std::int64_t stride = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
      view.shape[d] = shape[d];
      view.strides[d] = stride;
      stride *= shape[d];
    }
    return view;
  }
};

struct BenchFlags {
  CaseFlags shape;
  std::string workloads;
  std::string jsonl;
  bool backward = false;
  TimingPlan plan;
};

std::unique_ptr<CallSet> make_set(const Workload& w, attnlab::Device device, const std::string& path,
                                  std::uint64_t seed) {
  auto set = std::make_unique<CallSet>();
  const auto dt = w.dtype;
  attnlab::Options options;
  options.path = path;
  options.mask.causal = w.causal;
  set->fwd.q = set->make(device, dt, {w.B, w.T, w.N, w.Hqk}, seed);
  set->fwd.k = set->make(device, dt, {w.B, w.S, w.K, w.Hqk}, seed);
  set->fwd.v = set->make(device, dt, {w.B, w.S, w.K, w.Hv}, seed);
  set->fwd.o = set->make(device, dt, {w.B, w.T, w.N, w.Hv});
  set->fwd.options = options;
  if (w.backward) {
    set->fwd.lse = set->make(device, attnlab::DType::f32, {w.B, w.N, w.T});
    auto& b = set->bwd;
    b.q = set->fwd.q, b.k = set->fwd.k, b.v = set->fwd.v, b.o = set->fwd.o, b.lse = set->fwd.lse;
    b.d_o = set->make(device, dt, {w.B, w.T, w.N, w.Hv}, seed + 1);
    b.dq = set->make(device, dt, {w.B, w.T, w.N, w.Hqk});
    b.dk = set->make(device, dt, {w.B, w.S, w.K, w.Hqk});
    b.dv = set->make(device, dt, {w.B, w.S, w.K, w.Hv});
    b.options = options;
  }
  return set;
}

attnlab::Device device_of(const std::string& path, attnlab::Device fallback) {
  for (const attnlab::PathInfo& p : attnlab::list_paths())
    if (p.name == path) return p.device;
  return fallback;
}

std::string device_label(attnlab::Device device) {
  if (device == attnlab::Device::cpu) return "cpu";
  const gpu::Inventory inv = gpu::inventory();
  return inv.devices.empty() ? "cuda" : inv.devices.front().name;
}

ResultRow bench_one(const Workload& w, const std::string& path, attnlab::Device device, const BenchFlags& flags,
                    int threads) {
  ResultRow row;
  row.experiment = w.experiment;
  row.path = path;
  row.device = device_label(device);
  row.dtype = std::string(attnlab::to_string(w.dtype));
  row.B = w.B, row.T = w.T, row.S = w.S, row.N = w.N, row.K = w.K, row.Hqk = w.Hqk, row.Hv = w.Hv;
  row.causal = w.causal;
  row.direction = w.backward ? "bwd" : "fwd";

  // Rotate input sets when one set would sit in the GPU's L2 between calls (timing the cache, not the path).
  std::size_t cache = 0;
  if (device == attnlab::Device::cuda) {
    const gpu::Inventory inv = gpu::inventory();
    cache = inv.devices.empty() ? 0 : inv.devices.front().l2_bytes;
  }
  const double bytes = io_bytes(w);
  const int sets = bytes < double(cache) ? int(std::clamp(std::ceil(2.0 * double(cache) / bytes), 1.0, 8.0)) : 1;

  attnlab::Context ctx;
  ctx.set_num_threads(threads);
  std::vector<std::unique_ptr<CallSet>> calls;
  attnlab::RunInfo info;
  try {
    for (int s = 0; s < sets; ++s) calls.push_back(make_set(w, device, path, 1000 + 17 * std::uint64_t(s)));
    if (w.backward)
      for (auto& c : calls) attnlab::forward(ctx, c->fwd);  // O and LSE for the backward calls
    const Timing t = measure(
        device,
        [&](int i) {
          CallSet& c = *calls[std::size_t(i % sets)];
          info = w.backward ? attnlab::backward(ctx, c.bwd) : attnlab::forward(ctx, c.fwd);
        },
        flags.plan);
    row.ms_median = t.ms_median, row.ms_min = t.ms_min, row.ms_max = t.ms_max;
    row.tflops = attention_flops(w.B, w.N, w.T, w.S, w.Hqk, w.causal, w.backward) / (t.ms_median * 1e-3) / 1e12;
    row.gbps = bytes / (t.ms_median * 1e-3) / 1e9;
    row.first_call_ms = t.first_call_ms;
    row.workspace_bytes = double(info.workspace_bytes);
    row.ok = true;
    row.note = fmt::format("{} input set{}", sets, sets > 1 ? "s" : "");
    if (!w.name.empty()) row.note = w.name + "; " + row.note;
  } catch (const attnlab::Error& e) {
    if (e.code() == attnlab::ErrorCode::invalid_argument) throw;
    row.ok = false;
    row.note = e.what();
  }
  return row;
}

std::string fmt_opt(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("—");
}

// Without --paths: every available path of the device (all GPU paths on cuda).
std::vector<std::string> bench_paths(attnlab::Device device) { return available_paths(device); }

int run_bench(BenchFlags& flags) {
  const Case c = resolve(flags.shape, bench_paths);
  std::vector<Workload> workloads;
  if (!flags.workloads.empty()) {
    workloads = load_workloads(flags.workloads);
  } else {
    Workload w{"", "bench", c.B, c.T, c.S, c.N, c.K, c.Hqk, c.Hv, c.dtype, c.causal, flags.backward};
    workloads.push_back(w);
  }
  std::ofstream jsonl;
  if (!flags.jsonl.empty()) {
    jsonl.open(flags.jsonl, std::ios::app);
    if (!jsonl) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "cannot write '" + flags.jsonl + "'");
  }
  Table table("Time per call (median of groups; CUDA events on a GPU, steady clock on the CPU)");
  table.columns({"workload", "path", "ms median", "min", "max", "TFLOP/s", "GB/s", "first call ms", "workspace MiB"});
  for (const Workload& w : workloads) {
    const std::string label =
        fmt::format("{} {} B={} T={} S={} N={}/{} H={}{}{}", w.backward ? "bwd" : "fwd", attnlab::to_string(w.dtype),
                    w.B, w.T, w.S, w.N, w.K, w.Hqk, w.Hv != w.Hqk ? fmt::format("/{}", w.Hv) : "",
                    w.causal ? " causal" : "");
    for (const std::string& path : c.paths) {
      const ResultRow row = bench_one(w, path, device_of(path, c.device), flags, c.threads);
      if (jsonl.is_open()) jsonl << to_json_line(row) << "\n" << std::flush;
      if (c.json) fmt::print("{}\n", to_json_line(row));
      if (!row.ok) {
        table.row({label, path, "did not run", "", "", "", "", "", row.note.substr(0, 80)});
        continue;
      }
      table.row({label, path, fmt_opt(row.ms_median, "{:.4f}"), fmt_opt(row.ms_min, "{:.4f}"),
                 fmt_opt(row.ms_max, "{:.4f}"), fmt_opt(row.tflops, "{:.1f}"), fmt_opt(row.gbps, "{:.0f}"),
                 fmt_opt(row.first_call_ms, "{:.2f}"),
                 fmt_opt(row.workspace_bytes ? std::optional<double>(*row.workspace_bytes / (1 << 20)) : std::nullopt,
                         "{:.1f}")});
    }
  }
  if (!c.json) table.print();
  return 0;
}

}  // namespace

Action attach_bench(CLI::App& cmd) {
  auto flags = std::make_shared<BenchFlags>();
  flags->shape.dtype = "bf16";
  add_case_flags(cmd, flags->shape);
  const char* timing = "Timing";
  cmd.add_option("--workloads", flags->workloads, "JSON file of workloads (e.g. bench/workloads.json); replaces "
                                                  "the shape flags")->check(CLI::ExistingFile)->group(timing);
  cmd.add_flag("--backward", flags->backward, "time backward calls (dQ, dK, dV) instead of forward")->group(timing);
  cmd.add_option("--warmup", flags->plan.warmup, "calls before timing")->capture_default_str()->group(timing);
  cmd.add_option("--repeats", flags->plan.repeats, "back-to-back calls per timed group")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(timing);
  cmd.add_option("--groups", flags->plan.groups, "timed groups (median, min, max over them)")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(timing);
  cmd.add_option("--jsonl", flags->jsonl, "append result rows (JSON lines) to this file")->group(timing);
  return [flags] { return run_bench(*flags); };
}

}  // namespace lab
