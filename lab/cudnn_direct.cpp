// cudnn_direct: cuDNN's own SDPA forward, called through cudnn-frontend with no attnlab in between — the peer
// the cudnn path is held to ("within 5% of cuDNN's own FP8", docs/perf-notes.md, FP8). It builds the graph of one
// shape (e4m3 Q, K, V and O with per-tensor scales, or bf16), times every engine plan cuDNN's heuristics offer
// (mode A, then the fallback list; the cudnn path runs the first one that builds), and prints one JSON line per plan.
//
//   cudnn_direct B N T Hqk [--causal] [--bf16] [--lse] [--layout bshd|bhsd] [--warmup-ms MS] [--data normal|wide]
//
// Layout bshd is attnlab's (B, T, N, H) memory; bhsd is (B, N, T, H). Data "normal" is N(0, 1) rounded to e4m3 (or
// bf16), what `attnlab bench` feeds; "wide" is random e4m3 codes of magnitude 1/8…3.75. The warm-up runs the plan
// back to back for MS milliseconds before timing: an H200 under FP8 load sits at its 700 W limit and lowers its
// clock from 1980 MHz to 1.5–1.8 GHz within a second, so a short burst measures a clock the GPU does not hold
// (`attnlab bench` warms up for its own warmup_ms, lab/timing.cpp). Timing: 5 rounds of 20 calls between CUDA
// events, the median round.
#include <cudnn_frontend.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cudnn_direct: %s\n", what.c_str());
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(fe::error_object e, const char* what) {
  if (e.is_bad()) die(std::string(what) + ": " + e.get_message());
}

struct Options {
  std::int64_t B = 0, N = 0, T = 0, H = 0;
  bool causal = false, fp8 = true, lse = false, bhsd = false, normal = true;
  double warmup_ms = 3000;
};

Options parse(int argc, char** argv) {
  if (argc < 5) die("usage: cudnn_direct B N T Hqk [--causal] [--bf16] [--lse] [--layout bshd|bhsd] "
                    "[--warmup-ms MS] [--data normal|wide]");
  Options o;
  o.B = std::atoll(argv[1]), o.N = std::atoll(argv[2]), o.T = std::atoll(argv[3]), o.H = std::atoll(argv[4]);
  if (o.B <= 0 || o.N <= 0 || o.T <= 0 || o.H <= 0) die("B, N, T and Hqk must be positive");
  for (int i = 5; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--causal") o.causal = true;
    else if (a == "--bf16") o.fp8 = false;
    else if (a == "--lse") o.lse = true;
    else if (a == "--layout" && has_value) o.bhsd = std::string(argv[++i]) == "bhsd";
    else if (a == "--warmup-ms" && has_value) o.warmup_ms = std::atof(argv[++i]);
    else if (a == "--data" && has_value) o.normal = std::string(argv[++i]) != "wide";
    else die("unknown argument " + a);
  }
  return o;
}

// Round to the nearest e4m3 code, saturating at 448 (ties away from zero: these are timing inputs, not a
// reference; include/attnlab/fp8.h's quantize is the exact one).
std::uint8_t to_e4m3(float x) {
  const std::uint8_t sign = x < 0 ? 0x80 : 0;
  const float a = std::min(std::fabs(x), 448.0f);
  if (a < 0x1p-10f) return sign;
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1)
  int biased = e - 1 + 7;
  if (biased < 1) return sign | std::uint8_t(std::lround(a / 0x1p-9f));  // subnormal: multiples of 2^-9
  int mantissa = int(std::lround((2 * m - 1) * 8));
  if (mantissa == 8) mantissa = 0, ++biased;
  if (biased > 15 || (biased == 15 && mantissa > 6)) biased = 15, mantissa = 6;
  return sign | std::uint8_t(biased << 3) | std::uint8_t(mantissa);
}

std::vector<std::uint8_t> random_tensor(std::size_t elements, bool fp8, bool normal, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::uint8_t> bytes(elements * (fp8 ? 1 : 2));
  for (std::size_t i = 0; i < elements; ++i) {
    if (fp8) {
      bytes[i] = normal ? to_e4m3(nd(rng)) : std::uint8_t((rng() & 0x87) | (((rng() % 5) + 4) << 3));
    } else {
      const float x = normal ? nd(rng) : std::ldexp(1.0f + float(rng() % 8) / 8, int(rng() % 5) - 3);
      std::uint32_t b;
      std::memcpy(&b, &x, 4);
      const std::uint16_t h = std::uint16_t(b >> 16);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  return bytes;
}

// UIDs of the variant pack.
enum Uid : std::int64_t { q = 1, k, v, o, stats, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
                          amax_s, amax_o };

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) die("cudnnCreate failed (no GPU or no cuDNN)");

  const std::vector<std::int64_t> dims = {opt.B, opt.N, opt.T, opt.H};
  const std::vector<std::int64_t> strides =
      opt.bhsd ? std::vector<std::int64_t>{opt.N * opt.T * opt.H, opt.T * opt.H, opt.H, 1}
               : std::vector<std::int64_t>{opt.T * opt.N * opt.H, opt.H, opt.N * opt.H, 1};
  const auto io = opt.fp8 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::BFLOAT16;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(
      fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, std::int64_t uid) {
    return g->tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides).set_data_type(io));
  };
  auto scalar = [&](const char* name, std::int64_t uid) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, 1, 1, 1}).set_stride(
        {1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
  };
  auto mark_scalar = [](const TensorPtr& t, std::int64_t uid) {
    t->set_output(true).set_uid(uid).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(
        fe::DataType_t::FLOAT);
  };
  const TensorPtr tq = tensor("Q", Uid::q), tk = tensor("K", Uid::k), tv = tensor("V", Uid::v);
  const float attn_scale = 1.0f / std::sqrt(float(opt.H));
  TensorPtr to, tstats;
  if (opt.fp8) {
    auto a = fe::graph::SDPA_fp8_attributes().set_name("direct_fp8").set_generate_stats(opt.lse).set_attn_scale(
        attn_scale);
    if (opt.causal) a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    auto [o, st, amax_s, amax_o] =
        g->sdpa_fp8(tq, tk, tv, scalar("descale_q", Uid::descale_q), scalar("descale_k", Uid::descale_k),
                    scalar("descale_v", Uid::descale_v), scalar("descale_s", Uid::descale_s),
                    scalar("scale_s", Uid::scale_s), scalar("scale_o", Uid::scale_o), a);
    to = o, tstats = st;
    mark_scalar(amax_s, Uid::amax_s);
    mark_scalar(amax_o, Uid::amax_o);
  } else {
    auto a = fe::graph::SDPA_attributes().set_name("direct_bf16").set_generate_stats(opt.lse).set_attn_scale(
        attn_scale);
    if (opt.causal) a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    auto [o, st] = g->sdpa(tq, tk, tv, a);
    to = o, tstats = st;
  }
  to->set_output(true).set_uid(Uid::o).set_dim(dims).set_stride(strides).set_data_type(io);
  if (opt.lse)
    tstats->set_output(true).set_uid(Uid::stats).set_dim({opt.B, opt.N, opt.T, 1}).set_stride(
        {opt.N * opt.T, opt.T, 1, 1}).set_data_type(fe::DataType_t::FLOAT);

  check(g->validate(), "validate");
  check(g->build_operation_graph(handle), "operation graph");
  check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "heuristics");
  check(g->check_support(handle), "support");
  // Every plan that builds; those that do not fail at execution below and are reported as such.
  (void)g->build_plans(handle, fe::BuildPlanPolicy_t::ALL);

  const std::size_t elements = std::size_t(opt.B * opt.N * opt.T * opt.H);
  const std::size_t bytes = elements * (opt.fp8 ? 1 : 2);
  void *dq, *dk, *dv, *dout, *dstats = nullptr;
  float* dscalars;
  check(cudaMalloc(&dq, bytes), "cudaMalloc"), check(cudaMalloc(&dk, bytes), "cudaMalloc");
  check(cudaMalloc(&dv, bytes), "cudaMalloc"), check(cudaMalloc(&dout, bytes), "cudaMalloc");
  if (opt.lse) check(cudaMalloc(&dstats, elements / std::size_t(opt.H) * 4), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&dscalars), 16 * sizeof(float)), "cudaMalloc");
  void* inputs[] = {dq, dk, dv};
  for (int i = 0; i < 3; ++i) {
    const auto host = random_tensor(elements, opt.fp8, opt.normal, 1000 + 17 * std::uint32_t(i));
    check(cudaMemcpy(inputs[i], host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  // `attnlab bench`'s scales (lab/call_set.cpp): Q, K, V hold their values (descale 1), P quantized with 448, O
  // with 1.
  const float scalars[8] = {1.0f, 1.0f, 1.0f, 1.0f / 448, 448.0f, 1.0f, 0.0f, 0.0f};
  check(cudaMemcpy(dscalars, scalars, sizeof scalars, cudaMemcpyHostToDevice), "cudaMemcpy");
  std::unordered_map<std::int64_t, void*> pack = {{Uid::q, dq}, {Uid::k, dk}, {Uid::v, dv}, {Uid::o, dout}};
  if (opt.lse) pack[Uid::stats] = dstats;
  if (opt.fp8) {
    const std::int64_t order[] = {Uid::descale_q, Uid::descale_k, Uid::descale_v, Uid::descale_s,
                                  Uid::scale_s,   Uid::scale_o,   Uid::amax_s,    Uid::amax_o};
    for (int i = 0; i < 8; ++i) pack[order[i]] = dscalars + i;
  }

  const double flops = 4.0 * double(opt.B * opt.N) * double(opt.T) * double(opt.T) * double(opt.H) *
                       (opt.causal ? 0.5 : 1.0);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event"), check(cudaEventCreate(&stop), "event");
  for (std::int64_t plan = 0; plan < g->get_execution_plan_count(); ++plan) {
    std::string name;
    (void)g->get_plan_name_at_index(plan, name);
    std::int64_t workspace_bytes = 0;
    (void)g->get_workspace_size_plan_at_index(plan, workspace_bytes);
    void* workspace = nullptr;
    if (workspace_bytes > 0) check(cudaMalloc(&workspace, std::size_t(workspace_bytes)), "cudaMalloc");
    auto run = [&] { return g->execute_plan_at_index(handle, pack, workspace, plan).is_good(); };
    bool ok = run() && run();
    check(cudaDeviceSynchronize(), "first calls");
    if (ok && opt.warmup_ms > 0) {
      float elapsed = 0;
      check(cudaEventRecord(start), "event");
      while (ok && elapsed < opt.warmup_ms) {
        for (int i = 0; i < 20; ++i) ok = run() && ok;
        check(cudaEventRecord(stop), "event"), check(cudaEventSynchronize(stop), "event");
        check(cudaEventElapsedTime(&elapsed, start, stop), "event");
      }
    }
    std::vector<float> rounds;
    for (int r = 0; ok && r < 5; ++r) {
      check(cudaEventRecord(start), "event");
      for (int i = 0; i < 20; ++i) ok = run() && ok;
      check(cudaEventRecord(stop), "event"), check(cudaEventSynchronize(stop), "event");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "event");
      rounds.push_back(ms / 20);
    }
    if (workspace != nullptr) cudaFree(workspace);
    std::printf("{\"B\": %lld, \"N\": %lld, \"T\": %lld, \"Hqk\": %lld, \"causal\": %s, \"dtype\": \"%s\", "
                "\"layout\": \"%s\", \"lse\": %s, \"warmup_ms\": %.0f, \"plan\": %lld, \"engine\": \"%s\"",
                (long long)opt.B, (long long)opt.N, (long long)opt.T, (long long)opt.H, opt.causal ? "true" : "false",
                opt.fp8 ? "e4m3" : "bf16", opt.bhsd ? "bhsd" : "bshd", opt.lse ? "true" : "false", opt.warmup_ms,
                (long long)plan, name.c_str());
    if (!ok) {
      std::printf(", \"ok\": false}\n");
      continue;
    }
    std::sort(rounds.begin(), rounds.end());
    const double ms = rounds[rounds.size() / 2];
    std::printf(", \"ok\": true, \"ms\": %.4f, \"tflops\": %.1f}\n", ms, flops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
  return 0;
}
