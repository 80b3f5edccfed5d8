#include "bench_core.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "call_set.h"
#include "gpu.h"

namespace lab {

// Bytes a call must move at least: each input read once, each output written once.
double io_bytes(const Workload& w) {
  const double elem = double(attnlab::size_of(w.dtype));
  const double q = double(w.B * w.T * w.N * w.Hqk), k = double(w.B * w.S * w.K * w.Hqk);
  const double v = double(w.B * w.S * w.K * w.Hv), o = double(w.B * w.T * w.N * w.Hv);
  return elem * (w.backward ? 2 * (q + k + v + o) + o : q + k + v + o);
}

attnlab::Device path_device(const std::string& path, attnlab::Device fallback) {
  for (const attnlab::PathInfo& p : attnlab::list_paths())
    if (p.name == path) return p.device;
  return fallback;
}

std::string device_label(attnlab::Device device) {
  if (device == attnlab::Device::cpu) return "cpu";
  const gpu::Inventory inv = gpu::inventory();
  return inv.devices.empty() ? "cuda" : inv.devices.front().name;
}

ResultRow workload_row(const Workload& w, const std::string& path, attnlab::Device device) {
  ResultRow row;
  row.experiment = w.experiment;
  row.path = path;
  row.device = device_label(device);
  row.dtype = std::string(attnlab::to_string(w.dtype));
  row.B = w.B, row.T = w.T, row.S = w.S, row.N = w.N, row.K = w.K, row.Hqk = w.Hqk, row.Hv = w.Hv;
  row.causal = w.causal;
  if (w.softcap > 0.0f) row.softcap = double(w.softcap);
  row.direction = w.backward ? "bwd" : "fwd";
  return row;
}

int input_sets(const Workload& w, attnlab::Device device) {
  std::size_t cache = 0;
  if (device == attnlab::Device::cuda) {
    const gpu::Inventory inv = gpu::inventory();
    cache = inv.devices.empty() ? 0 : inv.devices.front().l2_bytes;
  }
  const double bytes = io_bytes(w);
  return bytes < double(cache) ? int(std::clamp(std::ceil(2.0 * double(cache) / bytes), 1.0, 8.0)) : 1;
}

ResultRow bench_one(const Workload& w, const std::string& path, attnlab::Device device, const TimingPlan& plan,
                    int threads) {
  ResultRow row = workload_row(w, path, device);
  const int sets = input_sets(w, device);

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
        plan);
    row.ms_median = t.ms_median, row.ms_min = t.ms_min, row.ms_max = t.ms_max;
    row.tflops = attention_flops(w.B, w.N, w.T, w.S, w.Hqk, w.Hv, w.causal, w.backward) / (t.ms_median * 1e-3) / 1e12;
    row.gbps = io_bytes(w) / (t.ms_median * 1e-3) / 1e9;
    row.first_call_ms = t.first_call_ms;
    if (device == attnlab::Device::cuda) row.host_ms = t.host_ms_median;
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

}  // namespace lab
