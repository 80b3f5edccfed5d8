// attnlab — scaled dot-product attention, one API over several paths.
//
// This is the public C++ API. Everything a user needs is here; the C ABI (attnlab.h) mirrors it for FFI.
//
// Layout (docs/design.md §2): Q (B, T, N, Hqk), K (B, S, K, Hqk), V (B, S, K, Hv), O (B, T, N, Hv), element strides per
// dimension, last dimension contiguous. Query head n reads KV head n / (N / K) (MHA, GQA, MQA).
//
//   s[i][j] = scale · <q_i, k_j>
//   s[i][j] = softcap · tanh(s[i][j] / softcap)          if softcap > 0
//   s[i][j] += bias[b, n, i, j]                           if a bias is given
//   s[i][j] = −inf   where the mask hides key j from query i
//   o_i = Σ_j softmax_j(s[i][·]) · v_j,   lse_i = log Σ_j exp(s[i][j])   (natural log)
//
// A query row that sees no key gets o_i = 0 and lse_i = −inf, never NaN.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#if defined(_WIN32)
#define ATTNLAB_API __declspec(dllexport)
#else
#define ATTNLAB_API __attribute__((visibility("default")))
#endif

namespace attnlab {

// ---------------------------------------------------------------------------------------------------------------
// Element types and devices
// ---------------------------------------------------------------------------------------------------------------
enum class DType : std::uint8_t {
  f32,
  f16,
  bf16,
  e4m3,   // FP8 E4M3 (forward FP8 paths)
  e5m2,   // FP8 E5M2
  i32,    // sequence lengths
  u8,     // boolean masks: non-zero = key visible
};

enum class Device : std::uint8_t { cpu, cuda };

ATTNLAB_API std::string_view to_string(DType dtype);
ATTNLAB_API std::string_view to_string(Device device);
ATTNLAB_API std::size_t size_of(DType dtype);
// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"float16", "bf16"/"bfloat16", "e4m3", "e5m2". Throws on anything else.
ATTNLAB_API DType parse_dtype(std::string_view name);

// ---------------------------------------------------------------------------------------------------------------
// Tensor views: a pointer, a dtype, a device, a shape and element strides. attnlab never owns tensor memory.
// ---------------------------------------------------------------------------------------------------------------
inline constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int device_index = 0;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // in elements, not bytes

  // A densely packed row-major view (last dimension contiguous).
  ATTNLAB_API static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                                           Device device = Device::cpu, int device_index = 0);
  // True when the view refers to no tensor (optional arguments left out).
  bool empty() const { return data == nullptr && rank == 0; }
  ATTNLAB_API std::int64_t numel() const;
};

// ---------------------------------------------------------------------------------------------------------------
// Options: everything of docs/design.md §2 that is not a tensor of the problem itself.
// ---------------------------------------------------------------------------------------------------------------

// Which diagonal the causal mask and the sliding window are measured from. With per-batch sequence lengths,
// T and S below are that batch's q_len and kv_len.
enum class MaskAlign : std::uint8_t {
  top_left,      // diagonal j = i            (JAX / PyTorch default for causal)
  bottom_right,  // diagonal j = i + S − T    (the KV-cache convention: the last query sees every key)
};

struct MaskOptions {
  bool causal = false;  // hide keys right of the diagonal (same as window_right = 0)
  MaskAlign align = MaskAlign::top_left;
  // Sliding window around the diagonal d(i): key j is visible iff d(i) − window_left ≤ j ≤ d(i) + window_right.
  // −1 means unbounded on that side.
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
};

struct Options {
  std::optional<float> scale;  // default 1 / sqrt(Hqk)
  float softcap = 0.0f;        // 0 = off; else s = softcap · tanh(s / softcap), applied before bias and masks
  MaskOptions mask;
  // Per-batch valid lengths, int32, shape (B). Query rows i ≥ q_seqlens[b] and keys j ≥ kv_seqlens[b] are out:
  // padded query rows produce O = 0 and LSE = −inf. Host tensors are range-checked before any work; device tensors
  // are the caller's responsibility (values are clamped to [0, T] / [0, S]).
  TensorView q_seqlens;
  TensorView kv_seqlens;
  // Additive bias (f32 or the inputs' dtype), or boolean mask (u8, non-zero = visible), of shape (B|1, N|1, T, S).
  // A dimension of size 1 broadcasts. At most one of the two.
  TensorView bias;
  TensorView bool_mask;
  // "auto" or a path name: "cpu-naive", "cpu-flash", "cuda-naive", "cudnn", "flash" (attnlab's kernels:
  // "flash-sm90" where it runs the call, else "flash-sm80"; either can be named), see list_paths().
  std::string path = "auto";
};

// ---------------------------------------------------------------------------------------------------------------
// Errors: every failure is an attnlab::Error carrying a code and a message that names the rule that failed.
// ---------------------------------------------------------------------------------------------------------------
enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,  // a precondition of the call failed (shapes, strides, dtypes, pointers, options)
  unsupported = 2,       // the arguments are valid, but the chosen path (or every path, for auto) cannot run them
  out_of_memory = 3,     // host or device memory for a workspace could not be had
  device_error = 4,      // the CUDA runtime or a CUDA library failed
  internal = 5,          // a bug in attnlab
};

class ATTNLAB_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// ---------------------------------------------------------------------------------------------------------------
// Tuning: the knobs that steer paths for tests and tuning, never for correctness. A new context takes
// Tuning::from_environment(), which reads the ATTNLAB_* variables once per process; set_tuning() changes one
// context's copy (tests do this instead of changing the process environment while threads run).
// ---------------------------------------------------------------------------------------------------------------
struct Tuning {
  // ATTNLAB_FLASH_SMEM_LIMIT: bytes of shared memory a flash-sm80 launch may use (−1 = the device's). A lower limit
  // stands for a smaller GPU (101376 runs the sm_86/sm_89 configurations on any GPU).
  std::int64_t flash_smem_limit = -1;
  // ATTNLAB_FLASH_CONFIG: on flash-sm80, forces the i-th tile configuration of a head dim's list (−1 = chosen per
  // call); on flash-sm90, kernel version s<i> (1 … 7). Path `flash` with either field set
  // runs flash-sm80, which both describe.
  int flash_config = -1;
  // ATTNLAB_FLASH_SECTION_HEADS: (batch, head) pairs per longest-first scheduling section (0 = chosen per call;
  // ignored unless it divides B·N).
  int flash_section_heads = 0;
  // ATTNLAB_FLASH_PACK_QUERY_HEADS: flash-sm90's packing of a KV head's query heads into one block (GQA/MQA at
  // T ≤ 64): 0 = never; −1 (the default) or 1 = wherever the call allows it. For measurements.
  int flash_pack_query_heads = -1;
  // ATTNLAB_SPLIT_KV_SPLITS: splits of every block's keys in the serving calls' split-KV kernel (0 = chosen per
  // call from the GPU's occupancy; at most 128). For measurements.
  int split_kv_splits = 0;
  // ATTNLAB_SPLIT_KV_CLUSTER_MERGE: on sm_90, merge a call's splits inside a thread-block cluster instead of the
  // combine kernel where src/cuda/serving/split_kv_splits.h's rule says so (each split one key tile, or a forced
  // count of 2–16): 1 (the default) = where the rule says, 0 = never. For measurements.
  int split_kv_cluster_merge = 1;
  // Fault injection for tests: every cuDNN graph build of this context fails as "unsupported", so that auto's
  // fallback and why_not's agreement with the call can be shown on any GPU.
  bool cudnn_fail_graph_builds = false;

  // The process's defaults: the environment as it was at the first call of this function.
  ATTNLAB_API static const Tuning& from_environment();
};

// ---------------------------------------------------------------------------------------------------------------
// Context: owns what paths keep between calls (library handles, plan caches, workspace, stream, CPU threads,
// tuning). One context may be used from one thread at a time; use one context per thread for concurrency.
//
// Streams: every GPU call is ordered on the context's stream and nothing else. A call never synchronizes the
// device, the host or another stream; small host data (host sequence lengths) travel in kernel parameters, so a
// host buffer may be rewritten as soon as the call returns. The context's own workspace is reused in the order of
// its stream; when set_stream() changes the stream, the next call that uses that workspace makes the new stream
// wait (cudaStreamWaitEvent, not the host) for the last call that used it.
// ---------------------------------------------------------------------------------------------------------------
class ATTNLAB_API Context {
 public:
  Context();
  ~Context();  // never throws: teardown errors (a sticky CUDA error, a driver already unloaded) are ignored
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;

  // CUDA stream (a cudaStream_t) for GPU paths; nullptr is the legacy default stream.
  void set_stream(void* cuda_stream);
  void* stream() const;
  // Threads used by CPU paths; 0 = all hardware threads. The context keeps a pool of that many worker threads,
  // started at its first multi-threaded call and reused by every later one.
  void set_num_threads(int threads);
  int num_threads() const;
  void set_tuning(const Tuning& tuning);
  const Tuning& tuning() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------------------------------------------
// Device scratch memory a caller lends to one call, e.g. from its own allocator. 256-byte aligned, on the call's
// device, not touched by anything else until the call's work on the context's stream has run.
struct DeviceBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// FP8 scaling of one call (docs/design.md §7). Each pointer is one f32 in the memory of the call's device, read
// and written by the call's work on the context's stream only (never by the host during the call), so that a
// recipe (attnlab::DelayedScaling in fp8.h) can update them on the stream between calls. "descale" multiplies a
// stored FP8 value back to its real value (1 / the scale it was quantized with); "scale" multiplies a real value
// before it is rounded to FP8; "amax" receives max |x| of a tensor before its quantization (overwritten, not
// accumulated). An amax pointer left null is not written.
struct Fp8ForwardScales {
  const float* descale_q = nullptr;  // required: q, k, v are e4m3 (or e5m2)
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  const float* scale_s = nullptr;    // required: P is quantized to e4m3 as p · scale_s before P·V
  const float* descale_s = nullptr;  // required: 1 / scale_s, applied after P·V
  float* amax_s = nullptr;           // max p over visible (i, j)
  const float* scale_o = nullptr;    // required when O is FP8: O = fp8(o · scale_o)
  float* amax_o = nullptr;           // max |o|
};

struct Fp8BackwardScales {
  const float* descale_q = nullptr;   // required, as in the forward call
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  const float* descale_o = nullptr;   // required: O as the forward call stored it (FP8)
  const float* descale_do = nullptr;  // required: d_o is FP8 (e5m2 under the HYBRID format)
  const float* scale_s = nullptr;     // required: the forward call's P scale (P is recomputed and quantized again)
  const float* descale_s = nullptr;   // required: 1 / scale_s
  const float* scale_dp = nullptr;    // required: dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O)) · scale is quantized with it
  const float* descale_dp = nullptr;  // required: 1 / scale_dp
  const float* scale_dq = nullptr;    // required when dq is FP8; likewise dk, dv
  const float* scale_dk = nullptr;
  const float* scale_dv = nullptr;
  float* amax_dp = nullptr;           // max |dS|
  float* amax_dq = nullptr;           // max |dq|, |dk|, |dv| before quantization
  float* amax_dk = nullptr;
  float* amax_dv = nullptr;
};

struct ForwardArgs {
  TensorView q, k, v;
  TensorView o;    // output, written only when the call succeeds
  TensorView lse;  // optional output (B, N, T), f32
  Options options;
  // Optional: when given, GPU paths take all their scratch from it and the call allocates no device memory (a
  // path that needs more than it holds refuses the call, naming workspace_size()); when absent, the context's own
  // workspace serves, grown on the stream when a call needs more.
  std::optional<DeviceBuffer> workspace;
  // Required iff q, k, v are FP8 (e4m3 / e5m2). O is then FP8 with scale_o, or bf16 / f16.
  std::optional<Fp8ForwardScales> fp8;
};

struct BackwardArgs {
  TensorView q, k, v, o;
  TensorView d_o;        // gradient of the loss w.r.t. O, shape and dtype of O
  TensorView lse;        // (B, N, T) f32 from the forward call (required)
  TensorView dq, dk, dv; // outputs, shapes and dtypes of q, k, v
  Options options;       // the forward call's options (bias gets no gradient)
  std::optional<DeviceBuffer> workspace;  // as in ForwardArgs
  // Required iff q, k, v are FP8: o is the forward call's FP8 O, d_o FP8, dq / dk / dv FP8 or bf16 / f16.
  std::optional<Fp8BackwardScales> fp8;
};

// What a call did.
struct RunInfo {
  std::string path;                 // the path that ran (resolves "auto"; for "flash", flash-sm80 or flash-sm90)
  std::size_t workspace_bytes = 0;  // scratch memory the path used (e.g. the naive paths' score matrix)
  // Device allocations the call made: growing the context's workspace, creating a library handle on a device for
  // the first time. 0 in the steady state, and 0 whenever a caller workspace is given once the context holds its
  // handles for the device (the first call that uses a library on a device creates its handle).
  int device_allocations = 0;
};

ATTNLAB_API RunInfo forward(Context& ctx, const ForwardArgs& args);
ATTNLAB_API RunInfo backward(Context& ctx, const BackwardArgs& args);

// The scratch bytes the call would need from a caller workspace: of the path the call would run (auto resolved as
// the call resolves it, the given workspace ignored). Nothing is launched; the cudnn path builds (and caches in
// ctx) the graph the call will use, which is what its size depends on. Throws as the call would when no path can
// run it.
ATTNLAB_API std::size_t workspace_size(Context& ctx, const ForwardArgs& args);
ATTNLAB_API std::size_t workspace_size(Context& ctx, const BackwardArgs& args);

// ---------------------------------------------------------------------------------------------------------------
// Introspection: which paths exist in this build and whether each can run here.
// ---------------------------------------------------------------------------------------------------------------
struct PathInfo {
  std::string name;
  Device device;
  bool available;           // can run on this machine at all
  std::string unavailable;  // why not, when !available
  std::string summary;      // what it is and what it supports
};

ATTNLAB_API std::vector<PathInfo> list_paths();

// The reason a path (or "auto") cannot run the given case, or nullopt when it can (arguments are validated first; a
// validation failure throws). Nothing is launched.
// With a context the answer is the call's: what the call would build is built and cached in ctx (a cuDNN graph),
// so a case cuDNN cannot build is reported here as the call would find it, and auto's answer is the path the call
// will take. Without a context only the paths' rules are asked (with Tuning::from_environment()): nothing is
// built, so a case that passes the rules but fails cuDNN's graph build is not seen.
ATTNLAB_API std::optional<std::string> why_not(Context& ctx, const std::string& path, const ForwardArgs& args);
ATTNLAB_API std::optional<std::string> why_not(Context& ctx, const std::string& path, const BackwardArgs& args);
ATTNLAB_API std::optional<std::string> why_not(const std::string& path, const ForwardArgs& args);

struct BuildInfo {
  std::string version;
  bool cuda;            // CUDA paths compiled in
  std::string compiler;
  std::string cpu_isa;  // the widest SIMD the CPU paths use on this machine
};
ATTNLAB_API BuildInfo build_info();

}  // namespace attnlab
