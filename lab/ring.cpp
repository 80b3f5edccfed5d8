// attnlab ring — context parallelism (include/attnlab/ring.h, docs/ring.md): one long sequence cut into R slices,
// its attention run as a ring over R ranks, timed for each R of --ranks beside the plain single-device call of the
// whole sequence. On GPUs the ranks are one process driving several GPUs through NCCL (rank i on GPU i) when this
// machine has a GPU per rank, else a loopback ring on one GPU (every rank on the same device: the exchange is a
// device copy and the ranks' work shares one GPU, so it shows the ring's overheads, not a speed-up). Each row
// reports the time of a ring call (until every rank's stream is done), TFLOP/s of the whole sequence's
// attention, the speed-up over the single call, and the share of the ranks' time spent waiting for transfers
// (RingOptions::measure_waits). Each ring's O (and dQ) is checked against the single call's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>
#include <attnlab/ring.h>

#include "experiment.h"
#include "gpu.h"
#include "ring_ranks.h"
#include "serving_lab.h"
#include "table.h"
#include "timing.h"

namespace lab {
namespace {

struct RingFlags : ServingFlags {
  std::vector<int> ranks = {1, 2, 4};
  std::string comm = "auto";
  std::string layout = "zigzag";
  bool no_causal = false;
  bool forward_only = false;
  std::int64_t B = 1, T = 0, H = 128;
  std::string heads = "32/8";
  std::string path = "auto";
  std::string backward_path = "auto";
  int warmup = 1, repeats = 3;
};

struct Times {
  double ms = 0, wait_share = 0;
};

struct RingRow {
  int ranks = 0;  // 0: the single-device call
  std::string comm, path;
  std::optional<Times> fwd, bwd;
  std::optional<double> o_err, dq_err;
  bool close = true;
  std::string note;
};

// Median over `repeats` timed calls after `warmup`: the wall clock of one call until every rank's stream is done
// (`call` waits). On the GPU one more call then measures the waits (RingOptions::measure_waits records events
// around each and synchronizes, so it is not one of the timed calls): the share of the ranks' stream time spent
// waiting for transfers (none for the single call).
template <class Call>
Times time_calls(Call&& call, attnlab::Device device, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) call(false);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call(false);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  Times times{ms[ms.size() / 2], 0};
  if (device == attnlab::Device::cuda) {
    const attnlab::RingRunInfo info = call(true);
    double waits = 0, totals = 0;
    for (std::size_t r = 0; r < info.total_ms.size(); ++r) waits += info.wait_ms[r], totals += info.total_ms[r];
    times.wait_share = totals > 0 ? waits / totals : 0;
  }
  return times;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, Tolerance tol, bool& close) {
  Closeness c(tol);
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (!c.add(a[i], b[i])) break;
  close = close && c.close();
  return c.max_abs_err();
}

std::unique_ptr<attnlab::RingCommunicator> make_comm(const RingFlags& f, int R, attnlab::Device device,
                                                     std::string& kind) {
  const int gpus = device == attnlab::Device::cuda ? int(gpu::inventory().devices.size()) : 0;
  const bool nccl = f.comm == "nccl" || (f.comm == "auto" && device == attnlab::Device::cuda && R > 1 && R <= gpus);
  if (!nccl) {
    kind = "loopback";
    return attnlab::loopback_communicator(R, device, 0);
  }
  if (R > gpus)
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("--comm nccl: {} ranks need {} GPUs, this machine has {}", R, R, gpus));
  std::vector<int> devices;
  for (int d = 0; d < R; ++d) devices.push_back(d);
  kind = "nccl";
  return attnlab::nccl_communicator(devices);
}

int run_ring(const RingFlags& f) {
  const attnlab::Device device = resolve_device(f.device);
  RingShape s;
  s.dtype = resolve_dtype(f.dtype, device);
  const Heads heads = parse_heads(f.heads, "N/K, e.g. 32/8");
  s.B = f.B, s.N = heads.N, s.K = heads.K, s.H = f.H, s.causal = !f.no_causal, s.path = f.path;
  s.backward_path = f.backward_path;
  s.layout = f.layout == "contiguous" ? attnlab::RingLayout::contiguous : attnlab::RingLayout::zigzag;
  s.T = f.T > 0 ? f.T : (device == attnlab::Device::cuda ? 131072 : 256);
  check_path_name("--path", f.path);
  check_path_name("--backward-path", f.backward_path);
  for (int R : f.ranks) {
    const std::int64_t unit = s.layout == attnlab::RingLayout::zigzag ? 2 * R : R;
    if (R < 1 || s.T % unit != 0)
      throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                           fmt::format("--ranks {}: T = {} must be a multiple of {} ({} layout)", R, s.T, unit,
                                       f.layout));
  }
  const bool backward = !f.forward_only;
  RowSinks sinks(f);
  const double flops_fwd = attention_flops(s.B, s.N, s.T, s.T, s.H, s.H, s.causal, false);
  const double flops_bwd = attention_flops(s.B, s.N, s.T, s.T, s.H, s.H, s.causal, true);

  // The single-device call of the whole sequence (attnlab::forward / backward on one rank's tensors, which hold all
  // of it): the reference of every ring's output and the baseline of its speed-up.
  std::vector<RingRow> rows;
  std::vector<float> o_single, dq_single;
  {
    RingRow row;
    row.comm = "single call";
    auto comm = attnlab::loopback_communicator(1, device, 0);
    RingShape one = s;
    one.layout = attnlab::RingLayout::contiguous;  // the whole sequence in order: the reference for every ring
    RingRanks ranks(one, *comm, backward, f.seed);
    row.fwd = time_calls([&](bool) { return ranks.single_forward(); }, device, f.warmup, f.repeats);
    if (backward) row.bwd = time_calls([&](bool) { return ranks.single_backward(); }, device, f.warmup, f.repeats);
    row.path = ranks.single_forward().path;
    if (backward) ranks.single_backward();
    ranks.synchronize();
    o_single = ranks.gather_o();
    if (backward) dq_single = ranks.gather_dq();
    rows.push_back(row);
  }
  for (int R : f.ranks) {
    RingRow row;
    row.ranks = R;
    auto comm = make_comm(f, R, device, row.comm);
    RingRanks ranks(s, *comm, backward, f.seed);
    row.fwd = time_calls([&](bool m) { return ranks.forward(m); }, device, f.warmup, f.repeats);
    if (backward) row.bwd = time_calls([&](bool m) { return ranks.backward(m); }, device, f.warmup, f.repeats);
    row.path = ranks.forward(false).path;
    if (backward) ranks.backward(false);
    ranks.synchronize();
    const Tolerance tol = tolerance_for(s.dtype);
    row.o_err = max_abs_diff(ranks.gather_o(), o_single, tol, row.close);
    if (backward) row.dq_err = max_abs_diff(ranks.gather_dq(), dq_single, tol, row.close);
    rows.push_back(row);
  }

  const RingRow& single = rows.front();
  bool all_close = true;
  Table table(fmt::format("Ring attention on {}: B {}, T {}, heads {}, H {}, {}{}, {} layout, path {}",
                          device == attnlab::Device::cuda ? gpu::inventory().devices.at(0).name : "cpu", s.B, s.T,
                          heads.label(), s.H, attnlab::to_string(s.dtype), s.causal ? ", causal" : "", f.layout,
                          f.path));
  table.columns({"ranks", "comm", "fwd ms", "TFLOP/s", "speed-up", "wait", "fwd+bwd ms", "TFLOP/s", "speed-up",
                 "wait", "vs single call"},
                {Align::right, Align::left, Align::right, Align::right, Align::right, Align::right, Align::right,
                 Align::right, Align::right, Align::right, Align::left});
  for (const RingRow& r : rows) {
    all_close = all_close && r.close;
    const auto tf = [](double flops, double ms) { return fmt::format("{:.3g}", flops / (ms * 1e-3) / 1e12); };
    const auto pct = [](double share) { return fmt::format("{:.1f} %", share * 100); };
    std::vector<std::string> cells = {r.ranks == 0 ? "—" : std::to_string(r.ranks), r.comm,
                                      fmt::format("{:.2f}", r.fwd->ms), tf(flops_fwd, r.fwd->ms),
                                      fmt::format("{:.2f}×", single.fwd->ms / r.fwd->ms),
                                      r.ranks == 0 ? "—" : pct(r.fwd->wait_share)};
    if (r.bwd) {
      const double both = r.fwd->ms + r.bwd->ms, single_both = single.fwd->ms + single.bwd->ms;
      cells.insert(cells.end(), {fmt::format("{:.2f}", both), tf(flops_fwd + flops_bwd, both),
                                 fmt::format("{:.2f}×", single_both / both),
                                 r.ranks == 0 ? "—" : pct((r.fwd->wait_share * r.fwd->ms + r.bwd->wait_share *
                                                           r.bwd->ms) / both)});
    } else {
      cells.insert(cells.end(), {"—", "—", "—", "—"});
    }
    cells.push_back(r.ranks == 0 ? "reference"
                                 : fmt::format("{} O {:.1e}{}", r.close ? "ok" : "FAIL", *r.o_err,
                                               r.dq_err ? fmt::format(", dQ {:.1e}", *r.dq_err) : ""));
    table.row(cells);

    Json j;
    j["experiment"] = "ring";
    j["ranks"] = r.ranks, j["comm"] = r.comm, j["path"] = r.path, j["asked"] = f.path;
    j["device"] = device == attnlab::Device::cuda ? gpu::inventory().devices.at(0).name : "cpu";
    j["dtype"] = std::string(attnlab::to_string(s.dtype));
    j["B"] = s.B, j["T"] = s.T, j["S"] = s.T, j["N"] = s.N, j["K"] = s.K, j["Hqk"] = s.H, j["Hv"] = s.H;
    j["causal"] = s.causal, j["layout"] = f.layout;
    j["fwd_ms"] = r.fwd->ms, j["fwd_tflops"] = flops_fwd / (r.fwd->ms * 1e-3) / 1e12;
    j["fwd_wait_share"] = r.fwd->wait_share;
    j["bwd_ms"] = number(r.bwd ? std::optional<double>(r.bwd->ms) : std::nullopt);
    j["bwd_wait_share"] = number(r.bwd ? std::optional<double>(r.bwd->wait_share) : std::nullopt);
    j["speedup_fwd"] = single.fwd->ms / r.fwd->ms;
    j["o_max_abs_diff"] = number(r.o_err), j["dq_max_abs_diff"] = number(r.dq_err);
    j["ok"] = r.close;
    sinks.write(json_line(j));
  }
  if (!sinks.on_stdout()) {
    table.print();
    fmt::print("time: one call until every rank's stream is done (wall clock), median of {}; "
               "TFLOP/s: the whole sequence's attention (causal counts half); speed-up: the single call's time over "
               "the ring's; wait: the ranks' share of time spent waiting for a transfer\n",
               f.repeats);
    if (device == attnlab::Device::cuda && std::any_of(rows.begin(), rows.end(), [](const RingRow& r) {
          return r.comm == "loopback" && r.ranks > 1;
        }))
      fmt::print("loopback: every rank on one GPU (their work shares it), so no speed-up is expected there; the "
                 "ring's overheads and the hidden exchange are what it shows. NCCL rows need a GPU per rank.\n");
  }
  return all_close ? 0 : 1;
}

}  // namespace

Action attach_ring(CLI::App& cmd) {
  auto f = std::make_shared<RingFlags>();
  const CLI::Validator positive = positive_number();
  const char* shape = "Shape (one sequence of T tokens, cut into a slice per rank)";
  cmd.add_option("-B,--batch", f->B, "batch size")->check(positive)->capture_default_str()->group(shape);
  cmd.add_option("-T,--tokens", f->T, "sequence length (default 131072 on cuda, 256 on cpu)")->check(positive)
      ->group(shape);
  cmd.add_option("--heads", f->heads, "query heads over KV heads, N/K")->capture_default_str()->group(shape);
  cmd.add_option("-H,--head-dim", f->H, "head dimension")->check(positive)->capture_default_str()->group(shape);
  cmd.add_flag("--no-causal", f->no_causal, "no mask (default: causal)")->group(shape);

  const char* ring = "Ring";
  cmd.add_option("--ranks", f->ranks, "comma-separated rank counts to time")->delimiter(',')->check(positive)
      ->capture_default_str()->group(ring);
  cmd.add_option("--comm", f->comm, "communicator: nccl (rank i on GPU i), loopback (every rank on one device), or "
                                    "auto (nccl where there is a GPU per rank)")
      ->check(CLI::IsMember({"auto", "nccl", "loopback"}))->capture_default_str()->group(ring);
  cmd.add_option("--layout", f->layout, "slices: zigzag (balanced under a causal mask) or contiguous")
      ->check(CLI::IsMember({"zigzag", "contiguous"}))->capture_default_str()->group(ring);
  cmd.add_flag("--forward-only", f->forward_only, "time the forward call only")->group(ring);

  const char* run = "Run";
  add_dtype_flag(cmd, *f, run);
  cmd.add_option("--path", f->path, "path of the forward block calls")->capture_default_str()->group(run);
  cmd.add_option("--backward-path", f->backward_path, "path of the backward block calls (flash has no backward)")
      ->capture_default_str()->group(run);
  add_run_flags(cmd, *f, "where the ranks' tensors live (default: cuda when a CUDA path is available)", run);
  cmd.add_option("--warmup", f->warmup, "untimed calls first")->capture_default_str()->group("Timing");
  cmd.add_option("--repeats", f->repeats, "timed calls (median)")->check(positive)->capture_default_str()
      ->group("Timing");
  cmd.footer("Exits 1 when a ring's output differs from the single call's beyond the dtype's tolerance.");
  return [f] { return run_ring(*f); };
}

}  // namespace lab
