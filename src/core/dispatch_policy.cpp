// The dispatch policy: which path `auto` tries first, second, ... for each kind of call. Each row cites the
// measurement it rests on; a row for hardware nobody measured says so. To change auto's choice, change a row and
// its evidence together. Pure: no device is asked here (call_traits() in dispatch.cpp does that), so the table is
// also compiled into its own test.
#include "core/dispatch_policy.h"

#include <iterator>

namespace attnlab::core {
namespace {

bool half(DType d) { return d == DType::f16 || d == DType::bf16; }

// A forward call this small costs what its launch and host work cost, not its FLOPs: 2^30 FLOPs is ≈ 3.5 µs of the
// flash kernel on an H200, below one call's fixed cost on either fused path.
constexpr double kSmallForwardFlops = double(1 << 30);

const PolicyRow kRows[] = {
    {"CPU tensors", [](const CallTraits& t) { return t.device == Device::cpu; },
     {"cpu-flash", "cpu-naive"},
     "same results; cpu-flash keeps O(T) extra memory where cpu-naive stores the B·N·T·S scores, and runs at "
     "164–214 GFLOP/s on 2 cores (docs/perf-notes.md, CPU: cpu-flash, Result and Memory)"},
    {"GPU forward, f16/bf16, at most 2^30 FLOPs",
     [](const CallTraits& t) {
       return t.direction == Direction::forward && half(t.dtype) && t.flops <= kSmallForwardFlops;
     },
     {"flash", "cudnn", "cuda-naive"},
     "codelab default (4, 128, 8, 64) on an H200: flash 5.3–6.8 µs per call, cudnn 11.9–12.1 µs (docs/design.md §5; "
     "docs/perf-notes-flash-sm80.md, The codelab's default shape). Launch-bound, so the order holds on any GPU"},
    {"GPU forward, f16/bf16, above 2^30 FLOPs, compute capability 9.0, causal only, head dim 128 or 256 with T and "
     "S ≥ 2048, or 192 and 192/128 with T and S ≥ 8192",
     [](const CallTraits& t) {
       const bool long_enough =
           (t.Hqk == 256 && t.Hv == 256 && t.T >= 2048 && t.S >= 2048) ||
           (t.Hqk == 128 && t.Hv == 128 && t.T >= 2048 && t.S >= 2048) ||
           (t.Hqk == 192 && (t.Hv == 192 || t.Hv == 128) && t.T >= 8192 && t.S >= 8192);
       return t.direction == Direction::forward && half(t.dtype) && t.cc == 90 && t.causal_only && long_enough;
     },
     {"flash-sm90", "cudnn", "flash", "cuda-naive"},
     "H200, one run each (docs/results/h200/sm90-s5-h64-h128.jsonl, sm90-s3-causal-s2.jsonl, sm90-h192.jsonl): "
     "flash-sm90 (s5) 541 / 580 / 600 TFLOP/s against cudnn's 521 / 554 / 569 at head dim 128, T = 4k / 8k / 16k, "
     "causal (1.04–1.05×; 1.01× at 2k); s26 (the default at 128 since) on H100s, two runs: 1.09 / 1.14 / 1.16 / "
     "1.18× and 1.10 / 1.18 / 1.19 / 1.16× cudnn at T = 2k / 4k / 8k / 16k, 0.97–0.98× at 1k "
     "(docs/results/h100/sm90-s26-ab.jsonl, sm90-s26-table-attnlab.jsonl); at head dim 256 s4 1.03 / 1.08 / 1.11 / "
     "1.11× cudnn at T = 2k / 4k / 8k / 16k, 0.86 / 0.92× at 512 / 1k (two rounds, "
     "docs/results/h200/sm90-s4-h256.jsonl), s13 (the default there since) 1.02 / 1.10 / 1.13 / 1.11× and 0.84 / "
     "0.92× (sm90-s13-ab-s13.jsonl, sm90-s13-ab-s4.jsonl); 627 / 628 against 559 / 587 at 192 (1.07–1.12×); 608 / "
     "631 against 506 / 562 at 192/128 (1.12–1.20×); at head dim 64 cudnn leads (0.92–0.96×). flash-sm90 is named, "
     "not flash, so that a call it refuses goes to cudnn rather than to flash-sm80"},
    {"GPU forward, f16/bf16, above 2^30 FLOPs, compute capability 9.0, head dim 128, no mask, T and S ≥ 4096",
     [](const CallTraits& t) {
       return t.direction == Direction::forward && half(t.dtype) && t.cc == 90 && t.Hqk == 128 && t.Hv == 128 &&
              t.unmasked && t.T >= 4096 && t.S >= 4096;
     },
     {"flash-sm90", "cudnn", "flash", "cuda-naive"},
     "H100s, two runs (docs/results/h100/sm90-s26-ab.jsonl, sm90-s26-table-attnlab.jsonl): flash-sm90 (s26) 1.06 / "
     "1.07 / 1.04× and 1.07 / 1.06 / 1.04× cudnn at T = 4k / 8k / 16k, GQA 32/8 at 4k 1.03× and 1.07×; at 2k "
     "1.06× and 1.00×, at 512–1k 0.93–1.02×, so cudnn stays first below 4k. The H200 has not run s26. flash-sm90 is "
     "named, not flash, so that a call it refuses goes to cudnn"},
    {"GPU forward, f16/bf16, above 2^30 FLOPs, compute capability 9.0, head dim 96, no mask or causal only, T and "
     "S ≥ 2048",
     [](const CallTraits& t) {
       return t.direction == Direction::forward && half(t.dtype) && t.cc == 90 && t.Hqk == 96 && t.Hv == 96 &&
              (t.unmasked || t.causal_only) && t.T >= 2048 && t.S >= 2048;
     },
     {"flash-sm90", "cudnn", "flash", "cuda-naive"},
     "H200, one run (docs/results/h200/sm90-h96.jsonl; N = 20, B·T = 16k): flash-sm90 476 / 529 / 538 TFLOP/s "
     "against cudnn's 440 / 468 / 473 at T = 2k / 8k / 16k (1.08–1.14×), causal 397 / 495 / 514 against 372 / 415 "
     "/ 447 (1.07–1.19×). flash-sm90 is named, not flash, so that a call it refuses goes to cudnn"},
    {"GPU forward, f16/bf16, above 2^30 FLOPs, compute capability 9.x",
     [](const CallTraits& t) { return t.direction == Direction::forward && half(t.dtype) && t.cc / 10 == 9; },
     {"cudnn", "flash", "cuda-naive"},
     "H200: cudnn 445–655 TFLOP/s on every forward shape of docs/design.md §5; flash-sm80 at most 383, flash-sm90 "
     "0.82–1.01× cudnn without a mask (s5 at head dims 64 and 128, s2 at 256; 0.88–1.04× at 192 and 192/128) and "
     "0.92–1.01× causal below the rows above (docs/results/h200/sm90-s5-h64-h128.jsonl, sm90-s3-s2.jsonl, "
     "sm90-s3-causal-s2.jsonl, sm90-h192.jsonl); head dim 96 below T = 2048 and with windows or other masks not "
     "measured"},
    {"GPU forward, f16/bf16, above 2^30 FLOPs, other compute capabilities",
     [](const CallTraits& t) { return t.direction == Direction::forward && half(t.dtype); },
     {"cudnn", "flash", "cuda-naive"},
     "not measured on these GPUs: the H200's order (flash is an FA2-class kernel; cuDNN's kernels at least match FA2 "
     "on sm_80/sm_89 in NVIDIA's published figures, not ours)"},
    {"GPU forward, f32",
     [](const CallTraits& t) { return t.direction == Direction::forward && t.dtype == DType::f32; },
     {"flash", "cuda-naive"},
     "H200, B = 4, N = 8, H = 64, T = 64…1024: flash (3xTF32) 2.2–3.6× faster than cuda-naive; cudnn has no f32 "
     "(docs/perf-notes-flash-sm80.md, f32 inputs)"},
    {"GPU backward, f16/bf16",
     [](const CallTraits& t) { return t.direction == Direction::backward && half(t.dtype); },
     {"cudnn", "cuda-naive"},
     "H200: cudnn backward 430–548 TFLOP/s at T = 16k (docs/design.md §5); flash has no backward"},
    {"GPU, FP8 inputs (e4m3 / e5m2)",
     [](const CallTraits& t) { return t.dtype == DType::e4m3 || t.dtype == DType::e5m2; },
     {"cudnn"},
     "cudnn is the only path with FP8 attention (cuDNN's FP8 SDPA, cc ≥ 9.0; docs/design.md §7); the other paths "
     "refuse FP8 inputs by their rules"},
    {"anything else (GPU backward f32)", [](const CallTraits&) { return true; },
     {"cuda-naive", "cudnn", "flash"},
     "cuda-naive is the only GPU path with an f32 backward"},
};

}  // namespace

namespace {
// Some sequence with at least 128 queries, and at least one 128-row block of queries per SM.
bool prefill_shaped(const VarlenTraits& t) { return t.max_seqlen_q >= 128 && t.query_blocks >= t.sm_count; }
}  // namespace

bool varlen_prefers_sm90(const VarlenTraits& t) { return !t.paged && prefill_shaped(t); }

bool varlen_prefers_cudnn(const VarlenTraits& t) { return t.paged && prefill_shaped(t); }

const char* const kVarlenPolicy =
    "packed keys, some sequence with at least 128 queries, and at least one 128-row block of queries per SM: the "
    "sm_90a kernel (where it takes the call); a paged cache with such queries: under auto cudnn (where it takes the "
    "call), under flash the split-KV kernel; otherwise the split-KV kernel. H200, `attnlab prefill` "
    "(docs/results/h200/serving-prefill-sm90-v2.jsonl): the split-KV kernel runs prefill at 205–228 useful TFLOP/s, "
    "the sm_90a kernel at 450–560; `attnlab decode --q-len 128…2048` on a paged cache "
    "(docs/results/h200/serving-chunked-prefill.jsonl): cudnn 1.52–1.57× the split-KV kernel, but 0.43× at 16 "
    "queries; decode (1–16 queries per sequence) stays on the split-KV kernel, which packs a KV head's query heads "
    "into one tile and splits the keys when the batch cannot fill the GPU";

const PolicyRow& policy_row(const CallTraits& traits) {
  for (const PolicyRow& row : kRows)
    if (row.matches(traits)) return row;
  return kRows[std::size(kRows) - 1];
}

}  // namespace attnlab::core
