#include "case.h"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "gpu.h"

namespace lab {

namespace {
// CLI::PositiveNumber prints its range up to DBL_MAX; this says the rule in words.
const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      try {
        if (std::stoll(text) >= 1) return "";
      } catch (const std::exception&) {
        return "expects a whole number >= 1, got '" + text + "'";
      }
      return "must be >= 1, got " + text;
    },
    "POSITIVE");
}  // namespace

void add_case_flags(CLI::App& cmd, CaseFlags& f, bool fp8) {
  const char* shape = "Shape (Q is (B, T, N, H), K and V are (B, S, K, H))";
  cmd.add_option("-B,--batch", f.batch, "batch size B")->check(kPositive)->capture_default_str()
      ->group(shape);
  cmd.add_option("-T,--seq", f.seq, "query length T")->check(kPositive)->capture_default_str()
      ->group(shape);
  f.kv_seq_option = cmd.add_option("-S,--kv-seq", f.kv_seq, "key/value length S (default: T)")
                        ->check(kPositive)->group(shape);
  cmd.add_option("-N,--heads", f.heads, "query heads N")->check(kPositive)->capture_default_str()
      ->group(shape);
  f.kv_heads_option = cmd.add_option("-K,--kv-heads", f.kv_heads, "key/value heads K, N % K == 0 (default: N)")
                          ->check(kPositive)->group(shape);
  cmd.add_option("-H,--head-dim", f.head_dim, "head dimension H")->check(kPositive)
      ->capture_default_str()->group(shape);

  const char* run = "Run";
  const std::vector<std::string> dtypes = fp8 ? std::vector<std::string>{"f32", "f16", "bf16", "e4m3"}
                                             : std::vector<std::string>{"f32", "f16", "bf16"};
  cmd.add_option("--dtype", f.dtype, fp8 ? "element type of Q, K, V and O (e4m3: FP8 inputs quantized with scale 1, "
                                           "O in e4m3 with scale_o, forward only)"
                                         : "element type of Q, K, V and O")
      ->check(CLI::IsMember(dtypes))->capture_default_str()->group(run);
  cmd.add_flag("--causal", f.causal, "causal mask (key j visible to query i iff j <= i)")->group(run);
  cmd.add_option("--device", f.device, "where the tensors live (default: cuda when a CUDA path is available)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->group(run);
  cmd.add_option("--paths", f.paths, "comma-separated paths to run, the first is the reference; 'auto' lets the "
                                     "library choose (default: the device's available paths, naive first; on "
                                     "cuda, cpu-naive leads as the reference)")
      ->delimiter(',')->group(run);
  cmd.add_option("--seed", f.seed, "seed of the random inputs")->capture_default_str()->group(run);
  cmd.add_option("--threads", f.threads, "threads for CPU paths (0 = all)")->check(CLI::NonNegativeNumber)
      ->capture_default_str()->group(run);
  cmd.add_flag("--json", f.json, "print result rows as JSON, one object per line, instead of tables")->group(run);
}

void add_timing_flags(CLI::App& cmd, TimingPlan& plan, const char* group) {
  cmd.add_option("--warmup", plan.warmup, "calls before timing")->capture_default_str()->group(group);
  cmd.add_option("--repeats", plan.repeats, "back-to-back calls per timed group")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(group);
  cmd.add_option("--groups", plan.groups, "timed groups (median, min, max over them)")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(group);
}

std::vector<std::string> available_paths(attnlab::Device device) {
  std::vector<std::string> names;
  for (const attnlab::PathInfo& p : attnlab::list_paths())
    if (p.device == device && p.available) names.push_back(p.name);
  return names;
}

// The codelab compares the naive version with the fused one(s): the naive one goes first so it is the reference
// whatever the registration order. On a GPU the CPU reference (fp64 accumulation, docs/design.md §2) leads
// instead: every GPU path, naive included, is checked against it on the same inputs, and a GPU path that refuses
// the case (cudnn with f32, say) still leaves something to compare.
std::vector<std::string> default_paths(attnlab::Device device) {
  std::vector<std::string> paths = available_paths(device);
  std::stable_partition(paths.begin(), paths.end(), [](const std::string& p) { return p.ends_with("-naive"); });
  if (device == attnlab::Device::cuda) paths.insert(paths.begin(), "cpu-naive");
  return paths;
}

attnlab::Device default_device() {
  return available_paths(attnlab::Device::cuda).empty() ? attnlab::Device::cpu : attnlab::Device::cuda;
}

Case resolve(const CaseFlags& f, PathsFor paths_for) {
  Case c{};
  c.B = f.batch;
  c.T = f.seq;
  c.S = f.kv_seq_option != nullptr && f.kv_seq_option->count() > 0 ? f.kv_seq : f.seq;
  c.N = f.heads;
  c.K = f.kv_heads_option != nullptr && f.kv_heads_option->count() > 0 ? f.kv_heads : f.heads;
  c.Hqk = c.Hv = f.head_dim;
  c.dtype = attnlab::parse_dtype(f.dtype);
  c.causal = f.causal;
  c.seed = f.seed;
  c.threads = f.threads;
  c.json = f.json;

  if (f.device.empty()) c.device = default_device();
  else c.device = f.device == "cuda" ? attnlab::Device::cuda : attnlab::Device::cpu;
  if (c.device == attnlab::Device::cuda) {
    // Say why up front rather than failing on the first allocation.
    const gpu::Inventory inv = gpu::inventory();
    if (!gpu::compiled_in())
      throw attnlab::Error(attnlab::ErrorCode::unsupported,
                           "--device cuda: no CUDA support compiled in (build with the 'cuda' or 'default' preset "
                           "on a machine with the CUDA toolkit)");
    if (inv.devices.empty())
      throw attnlab::Error(attnlab::ErrorCode::unsupported, fmt::format("--device cuda: {}", inv.problem));
  }

  for (const std::string& p : f.paths) {
    const auto b = p.find_first_not_of(" \t");
    if (b != std::string::npos) c.paths.push_back(p.substr(b, p.find_last_not_of(" \t") - b + 1));
  }
  if (c.paths.empty()) c.paths = paths_for(c.device);
  if (c.paths.empty())
    throw attnlab::Error(attnlab::ErrorCode::unsupported,
                         fmt::format("no path of this build is available on {}; see 'attnlab check'",
                                     attnlab::to_string(c.device)));
  return c;
}

}  // namespace lab
