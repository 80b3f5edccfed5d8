#include "serving_lab.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "bench_core.h"
#include "case.h"
#include "decode_inputs.h"

namespace lab {

namespace {
// Memory a shape may take: a share of what the GPU has free, or a fixed amount of host memory.
constexpr double kGpuShare = 0.6;
constexpr double kHostBudget = 4.0 * (1 << 30);
}  // namespace

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          if (std::stoll(text) >= 1) return "";
        } catch (const std::exception&) {
          return "expects a whole number >= 1, got '" + text + "'";
        }
        return "must be >= 1, got " + text;
      },
      "POSITIVE");
}

void add_dtype_flag(CLI::App& cmd, ServingFlags& f, const char* group) {
  cmd.add_option("--dtype", f.dtype, "element type of Q, K, V and O (default: bf16 on cuda, f32 on cpu)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))->group(group);
}

void add_run_flags(CLI::App& cmd, ServingFlags& f, const char* device_help, const char* group) {
  cmd.add_option("--device", f.device, device_help)->check(CLI::IsMember({"cpu", "cuda"}))->group(group);
  cmd.add_option("--seed", f.seed, "seed of the random inputs")->capture_default_str()->group(group);
  cmd.add_option("--threads", f.threads, "threads for CPU paths (0 = all)")->check(CLI::NonNegativeNumber)
      ->capture_default_str()->group(group);
  f.json_option = cmd.add_option("--json", f.json_file, "result rows as JSON, one object per line: on stdout "
                                                        "instead of the table, or with FILE appended to FILE")
                      ->expected(0, 1)->type_name("[FILE]")->group(group);
  cmd.add_option("--jsonl", f.jsonl, "append result rows (JSON lines) to this file (as bench's --jsonl)")
      ->group(group);
}

void add_timing_group(CLI::App& cmd, const std::shared_ptr<ServingFlags>& f) {
  const char* timing = "Timing";
  add_timing_flags(cmd, f->plan, timing);
  cmd.add_option_function<int>("--iters", [f](const int& n) { f->plan.repeats = n; },
                               "calls per timed group (another name for --repeats)")
      ->check(positive_number())->excludes(cmd.get_option("--repeats"))->group(timing);
}

attnlab::Device resolve_device(const std::string& device) {
  CaseFlags device_flags;
  device_flags.device = device;
  return resolve(device_flags, [](attnlab::Device) { return std::vector<std::string>{"auto"}; }).device;
}

attnlab::DType resolve_dtype(const std::string& dtype, attnlab::Device device) {
  return attnlab::parse_dtype(dtype.empty() ? (device == attnlab::Device::cuda ? "bf16" : "f32") : dtype);
}

std::string Heads::label() const {
  return fmt::format("{}/{} {}", N, K, K == N ? "MHA" : K == 1 ? "MQA" : "GQA");
}

Heads parse_heads(const std::string& text, std::string_view usage) {
  const auto bad = [&](const std::string& why) {
    return attnlab::Error(attnlab::ErrorCode::invalid_argument,
                          fmt::format("--heads: '{}' {} ({})", text, why, usage));
  };
  const std::size_t slash = text.find('/');
  Heads h{};
  try {
    std::size_t used = 0;
    h.N = std::stoll(text.substr(0, slash), &used);
    if (used != (slash == std::string::npos ? text.size() : slash)) throw bad("is not a pair of whole numbers");
    h.K = slash == std::string::npos ? h.N : std::stoll(text.substr(slash + 1), &used);
    if (slash != std::string::npos && used != text.size() - slash - 1) throw bad("is not a pair of whole numbers");
  } catch (const std::logic_error&) {  // std::stoll's invalid_argument / out_of_range
    throw bad("is not a pair of whole numbers");
  }
  if (h.N < 1 || h.K < 1) throw bad("needs N, K >= 1");
  if (h.N % h.K != 0) throw bad("needs N to be a multiple of K");
  return h;
}

void check_path_name(const char* flag, const std::string& path) {
  std::vector<std::string> known = {"auto"};
  for (const attnlab::PathInfo& p : attnlab::list_paths()) {
    if (p.name.starts_with("flash-") && std::find(known.begin(), known.end(), "flash") == known.end())
      known.push_back("flash");  // the library's name for whichever flash-sm* runs the call
    known.push_back(p.name);
  }
  if (std::find(known.begin(), known.end(), path) == known.end())
    throw attnlab::Error(attnlab::ErrorCode::invalid_argument,
                         fmt::format("{}: unknown path '{}': this build has {}", flag, path, fmt::join(known, ", ")));
}

Tolerance tolerance_for(attnlab::DType dtype) {
  return dtype == attnlab::DType::f32 ? Tolerance{1e-3, 1e-5} : Tolerance{1e-2, 1e-2};
}

bool Closeness::add(float out, float ref) {
  const double d = std::fabs(double(out) - double(ref));
  if (!(d <= tol_.atol + tol_.rtol * std::fabs(double(ref)))) close_ = false;  // NaN included
  worst_ = std::isnan(d) ? d : std::max(worst_, d);
  return !stopped();
}

bool Closeness::stopped() const { return std::isnan(worst_); }

std::uint64_t set_seed(std::uint64_t seed, int set) { return seed + 17 * std::uint64_t(set); }

std::optional<std::string> over_memory_budget(double need, attnlab::Device device) {
  const double gib = double(1 << 30);
  if (device == attnlab::Device::cpu) {
    if (need > kHostBudget)
      return fmt::format("needs {:.1f} GiB of host memory, over the {:.0f} GiB budget", need / gib, kHostBudget / gib);
    return std::nullopt;
  }
  const std::optional<std::size_t> free = free_gpu_bytes();
  if (free && need > kGpuShare * double(*free))
    return fmt::format("needs {:.1f} GiB, over {:.0f}% of the {:.1f} GiB free on the GPU", need / gib,
                       kGpuShare * 100, double(*free) / gib);
  return std::nullopt;
}

std::string Footnotes::mark(const std::string& text) {
  auto it = std::find(texts_.begin(), texts_.end(), text);
  if (it == texts_.end()) it = texts_.insert(texts_.end(), text);
  return fmt::format("[{}]", it - texts_.begin() + 1);
}

void Footnotes::print() const {
  for (std::size_t i = 0; i < texts_.size(); ++i) fmt::print("[{}] {}\n", i + 1, texts_[i]);
}

void ServingRow::record(const Timing& t) {
  ms = t.ms_median, ms_min = t.ms_min, ms_max = t.ms_max;
  if (t.host_ms_median > 0) host_ms = t.host_ms_median;
}

void ServingRow::record_failure(const attnlab::Error& e) {
  if (e.code() == attnlab::ErrorCode::invalid_argument) throw;  // the one being handled
  ran = false;
  refused = e.code() == attnlab::ErrorCode::unsupported;
  note = e.what();
}

std::string ServingRow::path_cell() const {
  return !ran || path == asked ? asked : fmt::format("{} → {}", asked, path);
}

std::string ServingRow::not_run_cell(Footnotes& notes) const {
  return skipped ? fmt::format("skipped: {}", note)
                 : fmt::format("{} {}", refused ? "refused" : "failed", notes.mark(note));
}

Json number(const std::optional<double>& v) { return v && std::isfinite(*v) ? Json(*v) : Json(nullptr); }

void put_run(Json& j, const ServingRow& r, attnlab::DType dtype) {
  j["path"] = r.path;
  j["asked"] = r.asked;
  j["device"] = device_label(r.device);
  j["dtype"] = std::string(attnlab::to_string(dtype));
}

void put_times(Json& j, const ServingRow& r) {
  j["ms"] = number(r.ms);
  j["ms_min"] = number(r.ms_min);
  j["ms_max"] = number(r.ms_max);
  j["host_ms"] = number(r.host_ms);
}

void put_outcome(Json& j, const ServingRow& r, bool ok) {
  j["input_sets"] = r.sets;
  j["ok"] = ok;
  j["note"] = r.note;
}

std::string json_line(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

RowSinks::RowSinks(const ServingFlags& f)
    : stdout_(f.json_option != nullptr && f.json_option->count() > 0 && f.json_file.empty()) {
  for (const std::string& name : {f.json_file, f.jsonl}) {
    if (name.empty()) continue;
    files_.emplace_back(name, std::ios::app);
    if (!files_.back()) throw attnlab::Error(attnlab::ErrorCode::invalid_argument, "cannot write '" + name + "'");
  }
}

void RowSinks::write(const std::string& line) {
  for (std::ofstream& file : files_) file << line << "\n" << std::flush;
  if (stdout_) fmt::print("{}\n", line);
}

}  // namespace lab
