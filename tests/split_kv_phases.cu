// Where a decode step's time goes, block by block: the split-KV kernels with phase stamps
// (src/cuda/serving/split_kv_phase_stamps.cuh), and the check that the stamps change nothing else. A plain program
// that includes the kernels' headers, so that it can instantiate them with PhaseStamps; it times exactly the
// library's kernels and plan (split_kv_splits.h), launched as split_kv_launch.cuh launches them.
//
//   split_kv_phases check
//       A packed decode batch (bf16, Hqk 128, GQA 8/2, one query token per sequence, lengths 1000, 1, 4100 and 70)
//       through attnlab::forward (path flash-sm80), the stamped kernels and the unstamped ones: the three outputs
//       must be equal byte for byte, and every block's record complete — its block index, its SM, its key tiles
//       (the plan's run for its split), its marks (those its kernel makes, no other) in order on both clocks.
//   split_kv_phases measure [--batch B] [--context S] [--heads N/K] [--calls C] [--groups G] [--out FILE]
//       The serving issue's decode step (bf16, Hqk 128, one query token per sequence, packed keys; defaults B = 1,
//       S = 32768, 32/8, C = 50, G = 7): C calls back to back on a non-blocking stream, timed with CUDA events in
//       G groups, first with the unstamped kernels and then with the stamped ones (the stamps' own cost is the
//       difference), then every stamped call's records to FILE (default split_kv_phases.csv), one CSV line per
//       block, for bench/decode_phases.py.
// Both plan the split count as the library does, ATTNLAB_SPLIT_KV_SPLITS included (Tuning::split_kv_splits).
//
// Exit status: 0 passed or measured; 1 failed; 2 bad arguments; 77 no GPU here (ctest: skipped).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "cuda/serving/split_kv.h"
#include "cuda/serving/split_kv_launch.cuh"
#include "cuda/serving/split_kv_phase_stamps.cuh"
#include "cuda/serving/split_kv_splits.h"

namespace {

using namespace attnlab::cuda::serving;
using Element = __nv_bfloat16;
constexpr int kHeadDim = 128;
using Layout = PhaseStampLayout;

constexpr int kSkip = 77, kFailed = 1, kUsage = 2;

struct Failure {
  std::string why;
};

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(status)};
}

template <class T>
struct DeviceArray {
  T* data = nullptr;
  std::size_t count = 0;
  explicit DeviceArray(std::size_t n) : count(n) {
    cuda_ok(cudaMalloc(&data, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data); }
  void upload(const std::vector<T>& host) {
    cuda_ok(cudaMemcpy(data, host.data(), count * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(count);
    cuda_ok(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
};

// One packed decode batch on the device, one query token per sequence, and the kernels' parameters and plan for
// it as split_kv.cpp makes them.
struct Batch {
  int B, N, K;
  std::vector<int> kv_lens;
  int total_k = 0, max_k = 0;
  DeviceArray<Element> q, k, v, o;
  DeviceArray<std::int32_t> cu_q, cu_k;
  SplitKvPlan plan;
  std::unique_ptr<DeviceArray<float>> part;  // part_o then part_lse
  SplitKvParams params;

  unsigned seed;  // of the inputs, fresh for every run (printed by check)

  Batch(std::vector<int> lens, int n, int kv_heads, int device)
      : B(int(lens.size())), N(n), K(kv_heads), kv_lens(std::move(lens)), total_k(sum(kv_lens)),
        max_k(*std::max_element(kv_lens.begin(), kv_lens.end())), q(std::size_t(B) * N * kHeadDim),
        k(std::size_t(total_k) * K * kHeadDim), v(k.count), o(q.count), cu_q(B + 1), cu_k(B + 1) {
    seed = std::random_device{}();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (auto* t : {&q, &k, &v}) {
      std::vector<Element> host(t->count);
      for (auto& x : host) x = __float2bfloat16(uniform(rng));
      t->upload(host);
    }
    std::vector<std::int32_t> offsets_q(B + 1), offsets_k(B + 1);
    for (int b = 0; b < B; ++b) offsets_q[b + 1] = b + 1, offsets_k[b + 1] = offsets_k[b] + kv_lens[b];
    cu_q.upload(offsets_q);
    cu_k.upload(offsets_k);

    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    const int group = N / K;
    plan.device = device;
    plan.row_warps = 1;  // group ≤ 16 rows: one warp of rows (split_kv.cpp's plan for one token)
    plan.q_tiles = 1;
    plan.dependent_launch = prop.major >= 9;
    // As a context made now plans it: ATTNLAB_SPLIT_KV_SPLITS (Tuning::split_kv_splits) forces a count.
    plan.splits = split_kv_splits(std::int64_t(K) * B, std::int64_t(prop.multiProcessorCount) *
                                                           split_kv_blocks_per_sm(kHeadDim),
                                  max_k, attnlab::Tuning::from_environment().split_kv_splits);
    SplitKvParams& p = params;
    p.q = q.data, p.q_row = std::int64_t(N) * kHeadDim, p.q_head = kHeadDim;
    p.o = o.data, p.o_row = p.q_row, p.o_head = kHeadDim;
    p.cu_q = cu_q.data, p.total_q = B;
    p.k = k.data, p.v = v.data;
    p.k_row = p.v_row = std::int64_t(K) * kHeadDim, p.k_head = p.v_head = kHeadDim;
    p.cu_k = cu_k.data, p.total_k = total_k;
    p.B = B, p.N = N, p.K = K, p.group = group, p.max_q = 1;
    p.scale = float(1.0 / std::sqrt(double(kHeadDim)));  // the library's default scale (split_kv.cpp)
    p.splits = plan.splits;
    if (plan.splits > 1) {
      const std::size_t rows = std::size_t(plan.splits) * B * N;
      part = std::make_unique<DeviceArray<float>>(rows * kHeadDim + rows);
      p.part_o = part->data, p.part_lse = part->data + rows * kHeadDim;
    }
    p.combine_stamps_offset = split_blocks();
    // The uploads went to the legacy stream, which the calls' non-blocking stream does not wait for.
    cuda_ok(cudaDeviceSynchronize(), "uploads");
  }

  static int sum(const std::vector<int>& v) {
    int s = 0;
    for (int x : v) s += x;
    return s;
  }
  std::int64_t split_blocks() const { return std::int64_t(plan.q_tiles) * plan.splits * K * B; }
  std::int64_t combine_blocks() const { return plan.splits > 1 ? std::int64_t(B) * N : 0; }
  std::int64_t records() const { return split_blocks() + combine_blocks(); }

  template <class Stamps>
  void launch(cudaStream_t stream, std::uint64_t* stamps) {
    SplitKvParams p = params;
    p.phase_stamps = stamps;
    launch_split_kv_rows<SplitKvTraits<Element, kHeadDim, 1>, Stamps>(p, plan, stream);
    if (p.splits > 1) launch_split_kv_combine<Element, kHeadDim, Stamps>(p, plan, stream);
  }

  // The same batch through the library's public call.
  void run_library(attnlab::Context& ctx, void* o_out) {
    using attnlab::DType;
    using attnlab::TensorView;
    const auto gpu = attnlab::Device::cuda;
    attnlab::VarlenForwardArgs a;
    a.q = TensorView::contiguous(q.data, DType::bf16, {B, N, kHeadDim}, gpu, plan.device);
    a.cu_seqlens_q = TensorView::contiguous(cu_q.data, DType::i32, {B + 1}, gpu, plan.device);
    a.max_seqlen_q = 1;
    a.k = TensorView::contiguous(k.data, DType::bf16, {total_k, K, kHeadDim}, gpu, plan.device);
    a.v = TensorView::contiguous(v.data, DType::bf16, {total_k, K, kHeadDim}, gpu, plan.device);
    a.cu_seqlens_k = TensorView::contiguous(cu_k.data, DType::i32, {B + 1}, gpu, plan.device);
    a.max_seqlen_k = max_k;
    a.o = TensorView::contiguous(o_out, DType::bf16, {B, N, kHeadDim}, gpu, plan.device);
    a.options.path = "flash-sm80";
    attnlab::forward(ctx, a);
  }
};

// A record's key tiles (split_kv_phase_stamps.cuh stores them plus one): −1 for a block without rows.
std::int64_t tiles_of(const std::uint64_t* record) { return std::int64_t(record[Layout::kTiles]) - 1; }

// The key tiles the plan gives block (split, kv_head, b): its split's run of the sequence's tiles.
int expected_tiles(const Batch& batch, int split, int b) {
  const int tiles = (batch.kv_lens[b] + kSplitKvBlockKeys - 1) / kSplitKvBlockKeys;
  const int per_split = (tiles + batch.plan.splits - 1) / batch.plan.splits;
  return std::min(tiles, (split + 1) * per_split) - std::min(tiles, split * per_split);
}

int check(int device) {
  Batch batch({1000, 1, 4100, 70}, 8, 2, device);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // Every slot starts as all ones, so that a slot the kernels did not write is told from a written 0 (SM 0, a
  // split without tiles).
  DeviceArray<std::uint64_t> stamps(std::size_t(batch.records()) * Layout::kSlots);
  cuda_ok(cudaMemsetAsync(stamps.data, 0xff, stamps.count * sizeof(std::uint64_t), stream), "cudaMemset");
  DeviceArray<Element> o_library(batch.o.count);

  const std::size_t bytes = batch.o.count * sizeof(Element);
  cuda_ok(cudaMemsetAsync(batch.o.data, 0xff, bytes, stream), "poison");
  batch.launch<NoPhaseStamps>(stream, nullptr);
  cuda_ok(cudaStreamSynchronize(stream), "unstamped kernels");
  const auto plain = batch.o.download();
  cuda_ok(cudaMemsetAsync(batch.o.data, 0xff, bytes, stream), "poison");
  batch.launch<PhaseStamps>(stream, stamps.data);
  cuda_ok(cudaStreamSynchronize(stream), "stamped kernels");
  const auto stamped = batch.o.download();
  {
    attnlab::Context ctx;
    ctx.set_stream(stream);
    cuda_ok(cudaMemsetAsync(o_library.data, 0xff, bytes, stream), "poison");
    batch.run_library(ctx, o_library.data);
    cuda_ok(cudaStreamSynchronize(stream), "library call");
  }
  const auto library = o_library.download();
  cudaStreamDestroy(stream);

  auto same = [&](const std::vector<Element>& a, const std::vector<Element>& b) {
    return std::memcmp(a.data(), b.data(), bytes) == 0;
  };
  if (!same(plain, library)) throw Failure{"the unstamped kernels' output differs from attnlab::forward's"};
  if (!same(plain, stamped)) throw Failure{"the stamped kernels' output differs from the unstamped ones'"};
  for (const Element x : plain)
    if (!std::isfinite(__bfloat162float(x))) throw Failure{"a non-finite output (poison left unwritten?)"};

  constexpr std::uint64_t kUnwritten = ~std::uint64_t(0);
  const auto records = stamps.download();
  auto fail_at = [](std::int64_t r, const std::string& what) {
    throw Failure{"record " + std::to_string(r) + ": " + what};
  };
  for (std::int64_t r = 0; r < batch.records(); ++r) {
    const std::uint64_t* rec = &records[r * Layout::kSlots];
    const bool split_kernel = r < batch.split_blocks();
    const std::int64_t block = split_kernel ? r : r - batch.split_blocks();
    if (rec[Layout::kBlock] != std::uint64_t(block)) fail_at(r, "block index not recorded");
    if (rec[Layout::kSm] == kUnwritten || rec[Layout::kTiles] == kUnwritten)
      fail_at(r, "SM or tiles not recorded");
    const std::int64_t tiles = tiles_of(rec);
    // The marks each kind of block makes: a split block whose run has no key tile never reaches the loop (no
    // first-tile mark); one without rows returns after its lengths; the combine marks entry, the wait and its
    // stores, or only the first two for a row past the batch.
    const bool no_rows = tiles == -1, no_tiles = split_kernel && tiles == 0;
    static const std::vector<int> all = {0, 1, 2, 3, 4, 5}, no_tile = {0, 1, 2, 4, 5}, rowless = {0, 1, 2},
                                  combine = {0, 1, 5}, combine_rowless = {0, 1};
    const std::vector<int>& expected = split_kernel ? (no_rows ? rowless : no_tiles ? no_tile : all)
                                                    : (no_rows ? combine_rowless : combine);
    const int* begin = expected.data();
    const int count = int(expected.size());
    int written = 0;
    for (int m = 0; m < Layout::kMarks; ++m) written += rec[Layout::kNs + m] != kUnwritten;
    if (written != count)
      fail_at(r, std::to_string(written) + " marks written, " + std::to_string(count) + " expected");
    for (int i = 0; i < count; ++i) {
      if (rec[Layout::kNs + begin[i]] == kUnwritten || rec[Layout::kCycles + begin[i]] == kUnwritten)
        fail_at(r, "a mark missing");
      if (i > 0 && (rec[Layout::kNs + begin[i]] < rec[Layout::kNs + begin[i - 1]] ||
                    rec[Layout::kCycles + begin[i]] < rec[Layout::kCycles + begin[i - 1]]))
        fail_at(r, "marks out of order");
    }
    if (split_kernel) {
      // Grid (splits, K, B), one query tile: blockIdx.x is the split.
      const int split = int(block % batch.plan.splits), b = int(block / (batch.plan.splits * batch.K));
      if (tiles != expected_tiles(batch, split, b)) fail_at(r, "key tiles differ from the plan's");
    } else if (tiles != batch.plan.splits) {
      fail_at(r, "the combine's splits differ from the plan's");
    }
  }
  std::printf("split_kv_phases check: passed (%d splits, %lld split blocks, %lld combine blocks; outputs equal "
              "byte for byte to attnlab::forward's; input seed %u)\n",
              batch.plan.splits, static_cast<long long>(batch.split_blocks()),
              static_cast<long long>(batch.combine_blocks()), batch.seed);
  return 0;
}

struct MeasureArgs {
  int B = 1, S = 32768, N = 32, K = 8, calls = 50, groups = 7;
  std::string out = "split_kv_phases.csv";
};

// Median over `groups` of the event time of `calls` back-to-back calls, per call, in µs.
template <class Launch>
double time_per_call(cudaStream_t stream, int calls, int groups, Launch launch) {
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> per_call;
  for (int g = 0; g < groups; ++g) {
    cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int c = 0; c < calls; ++c) launch(c);
    cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "kernels");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    per_call.push_back(1000.0 * ms / calls);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

int measure(int device, const MeasureArgs& m) {
  Batch batch(std::vector<int>(m.B, m.S), m.N, m.K, device);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::int64_t per_call = batch.records() * Layout::kSlots;
  DeviceArray<std::uint64_t> stamps(std::size_t(per_call) * m.calls);
  cuda_ok(cudaMemsetAsync(stamps.data, 0, stamps.count * sizeof(std::uint64_t), stream), "cudaMemset");

  for (int c = 0; c < m.calls; ++c) batch.launch<NoPhaseStamps>(stream, nullptr);  // warm-up
  const double plain_us =
      time_per_call(stream, m.calls, m.groups, [&](int) { batch.launch<NoPhaseStamps>(stream, nullptr); });
  const double stamped_us = time_per_call(stream, m.calls, m.groups, [&](int c) {
    batch.launch<PhaseStamps>(stream, stamps.data + c * per_call);
  });
  cudaStreamDestroy(stream);
  const auto records = stamps.download();  // the last group's calls

  const double kv_bytes = 2.0 * m.B * double(m.S) * m.K * kHeadDim * sizeof(Element);
  std::FILE* f = std::fopen(m.out.c_str(), "w");
  if (f == nullptr) throw Failure{"cannot write " + m.out};
  std::fprintf(f, "# split_kv_phases B=%d S=%d N=%d K=%d H=%d bf16 splits=%d calls=%d groups=%d plain_us=%.3f "
                  "stamped_us=%.3f kv_bytes=%.0f\n",
               m.B, m.S, m.N, m.K, kHeadDim, batch.plan.splits, m.calls, m.groups, plain_us, stamped_us, kv_bytes);
  std::fprintf(f, "call,kernel,block,sm,tiles");
  for (int i = 0; i < Layout::kMarks; ++i) std::fprintf(f, ",ns%d", i);
  for (int i = 0; i < Layout::kMarks; ++i) std::fprintf(f, ",cycles%d", i);
  std::fprintf(f, "\n");
  for (int c = 0; c < m.calls; ++c)
    for (std::int64_t r = 0; r < batch.records(); ++r) {
      const std::uint64_t* rec = &records[(c * batch.records() + r) * Layout::kSlots];
      std::fprintf(f, "%d,%s,%llu,%llu,%lld", c, r < batch.split_blocks() ? "split" : "combine",
                   static_cast<unsigned long long>(rec[Layout::kBlock]),
                   static_cast<unsigned long long>(rec[Layout::kSm]), static_cast<long long>(tiles_of(rec)));
      for (int i = 0; i < 2 * Layout::kMarks; ++i) std::fprintf(f, ",%llu", static_cast<unsigned long long>(rec[i]));
      std::fprintf(f, "\n");
    }
  std::fclose(f);
  std::printf("split_kv_phases: B=%d S=%d %d/%d H=%d bf16, %d splits: %.2f µs per call unstamped (%.2f TB/s), "
              "%.2f stamped; %lld records per call in %s\n",
              m.B, m.S, m.N, m.K, kHeadDim, batch.plan.splits, plain_us, kv_bytes / plain_us * 1e-6, stamped_us,
              static_cast<long long>(batch.records()), m.out.c_str());
  return 0;
}

bool parse_measure(int argc, char** argv, MeasureArgs& m) {
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[i + 1];
    if (flag == "--batch") m.B = std::atoi(value);
    else if (flag == "--context") m.S = std::atoi(value);
    else if (flag == "--heads") {
      if (std::sscanf(value, "%d/%d", &m.N, &m.K) != 2) return false;
    } else if (flag == "--calls") m.calls = std::atoi(value);
    else if (flag == "--groups") m.groups = std::atoi(value);
    else if (flag == "--out") m.out = value;
    else return false;
  }
  return m.B > 0 && m.S > 0 && m.K > 0 && m.N >= m.K && m.N % m.K == 0 && m.N / m.K <= 16 && m.calls > 0 &&
         m.groups > 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  MeasureArgs m;
  if (mode != "check" && !(mode == "measure" && parse_measure(argc, argv, m))) {
    std::fprintf(stderr, "usage: split_kv_phases check | measure [--batch B] [--context S] [--heads N/K (N/K ≤ 16)] "
                         "[--calls C] [--groups G] [--out FILE]\n");
    return kUsage;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("split_kv_phases: no GPU here: skipped\n");
    return kSkip;
  }
  try {
    return mode == "check" ? check(0) : measure(0, m);
  } catch (const Failure& f) {
    std::fprintf(stderr, "split_kv_phases: FAILED: %s\n", f.why.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "split_kv_phases: FAILED: %s\n", e.what());
  }
  return kFailed;
}
