// bench --graph: the same calls bench_one times, captured into a CUDA graph and replayed. A replay launches all
// its calls with one host call, so the per-call time it gives is the path's GPU time without the host's launch
// overhead: next to the ordinary row it shows the launch floor of small shapes.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_core.h"
#include "call_set.h"
#include "gpu.h"

namespace lab {

ResultRow bench_graph(const Workload& w, const std::string& path, attnlab::Device device, const TimingPlan& plan,
                      int threads) {
  ResultRow row = workload_row(w, path, device);
  row.graph = true;
  if (device != attnlab::Device::cuda) {
    row.note = kGraphNeedsCuda;
    return row;
  }
  const int sets = input_sets(w, device);
  const int per_graph = std::max(plan.repeats, 1);  // calls captured into one graph

  // Declared before the context and the tensors, so it is destroyed after them: nothing still uses its stream.
  std::optional<gpu::GraphCapture> graph;
  attnlab::Context ctx;
  ctx.set_num_threads(threads);
  std::vector<std::unique_ptr<CallSet>> calls;
  const auto call = [&](int i) {
    CallSet& c = *calls[std::size_t(i % sets)];
    if (w.backward) attnlab::backward(ctx, c.bwd);
    else attnlab::forward(ctx, c.fwd);
  };
  try {
    graph.emplace();
    ctx.set_stream(graph->stream());
    for (int s = 0; s < sets; ++s) calls.push_back(make_set(w, device, path, 1000 + 17 * std::uint64_t(s)));
    if (w.backward)
      for (auto& c : calls) attnlab::forward(ctx, c->fwd);  // O and LSE for the backward calls
    // Warm up outside the capture: plan builds, handles and workspace growth (which allocate and synchronize) all
    // happen on the first calls at a shape, and a capture cannot record them.
    for (int i = 0; i < std::max(plan.warmup, 2 * sets); ++i) call(i);
    gpu::synchronize();
  } catch (const attnlab::Error& e) {
    if (e.code() == attnlab::ErrorCode::invalid_argument) throw;
    row.note = e.what();
    return row;
  }

  if (const std::optional<std::string> failure = graph->capture([&] {
        for (int i = 0; i < per_graph; ++i) call(i);
      })) {
    row.note = "graph capture failed: " + *failure;
    return row;
  }

  try {
    // One timed "call" is one replay of per_graph calls; the warm-up counts replays.
    TimingPlan replays = plan;
    replays.warmup = std::max(1, plan.warmup / per_graph);
    replays.repeats = 1;
    const Timing t = measure(device, [&](int) { graph->launch(); }, replays);
    row.ms_median = t.ms_median / per_graph, row.ms_min = t.ms_min / per_graph, row.ms_max = t.ms_max / per_graph;
    row.tflops = attention_flops(w.B, w.N, w.T, w.S, w.Hqk, w.Hv, w.causal, w.backward) / (*row.ms_median * 1e-3) / 1e12;
    row.gbps = io_bytes(w) / (*row.ms_median * 1e-3) / 1e9;
    row.ok = true;
    row.note = fmt::format("graph replay: {} calls per graph, {} input set{}", per_graph, sets, sets > 1 ? "s" : "");
    if (!w.name.empty()) row.note = w.name + "; " + row.note;
  } catch (const attnlab::Error& e) {
    row.note = fmt::format("graph replay failed: {}", e.what());
  }
  return row;
}

}  // namespace lab
