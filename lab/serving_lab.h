// What the two serving-API experiments share, `attnlab decode` (decode.cpp) and `attnlab prefill` (prefill.cpp):
// the flags both take and how they resolve (the device, the dtype's default, N/K --heads pairs, path names), the
// tolerances their checks allow, the memory budget a shape's inputs must fit, and what a row holds and how it is
// written: JSON lines on stdout or appended to files, table cells, footnotes naming each library message once.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <attnlab/attention.h>

#include "timing.h"

namespace lab {

// The flags both commands take (their Run and Timing groups); each command's own flags extend it.
struct ServingFlags {
  std::string dtype;   // empty: bf16 on cuda, f32 on cpu
  std::string device;  // empty: cuda when a CUDA path is available here, else cpu
  std::uint64_t seed = 0;
  int threads = 0;
  std::string json_file;  // --json FILE; bare --json leaves it empty (json_option says it was given)
  std::string jsonl;
  CLI::Option* json_option = nullptr;
  TimingPlan plan;
};

// Whole numbers >= 1. CLI::PositiveNumber prints its range up to DBL_MAX; this says the rule in words (as
// case.cpp's does).
CLI::Validator positive_number();
// --dtype, in `group`.
void add_dtype_flag(CLI::App& cmd, ServingFlags& f, const char* group);
// --device (described by `device_help`), --seed, --threads, --json [FILE] and --jsonl, in that order, in `group`.
void add_run_flags(CLI::App& cmd, ServingFlags& f, const char* device_help, const char* group);
// The Timing group: the lab's timing flags (timing.h) and --iters, another name for --repeats.
void add_timing_group(CLI::App& cmd, const std::shared_ptr<ServingFlags>& f);

// --device as every lab command resolves it (an unusable --device cuda is refused here, in the same words).
attnlab::Device resolve_device(const std::string& device);
// --dtype, or its default on `device`: bf16 on cuda, f32 on cpu.
attnlab::DType resolve_dtype(const std::string& dtype, attnlab::Device device);

// N query heads over K KV heads.
struct Heads {
  std::int64_t N, K;
  std::string label() const;  // "32/8 GQA"; MHA where K = N, MQA where K = 1
};
// "32/8" (N query heads over K KV heads), or "32" for K = N. Throws attnlab::Error (invalid_argument) naming
// --heads and the text, with `usage` (what the flag takes) in parentheses.
Heads parse_heads(const std::string& text, std::string_view usage);

// Path names are the user's to fix: throws attnlab::Error (invalid_argument) before anything runs when `path` is
// neither "auto", "flash" nor a path of this build, naming `flag` and the paths there are.
void check_path_name(const char* flag, const std::string& path);

// compare's tolerances (the codelab's): f32 atol 1e-3 with rtol 1e-5, the half types 1e-2 both.
struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance_for(attnlab::DType dtype);

// A check's answer over (out, ref) pairs as they come: the largest |out − ref|, and whether every pair is within
// atol + rtol·|ref| (a NaN never is).
class Closeness {
 public:
  explicit Closeness(Tolerance tol) : tol_(tol) {}
  // Adds one pair; false once the largest difference is NaN (no later pair changes the answer).
  bool add(float out, float ref);
  bool stopped() const;
  double max_abs_err() const { return worst_; }
  bool close() const { return close_; }

 private:
  Tolerance tol_;
  double worst_ = 0;
  bool close_ = true;
};

// The seed of input set `set` (sets are rotated where one would sit in the GPU's L2, bench_core.h).
std::uint64_t set_seed(std::uint64_t seed, int set);

// Why `need` bytes (all input sets of a shape together) are not placed on `device`, or nullopt: more than a fixed
// amount of host memory, or than a share of what the GPU has free (the library's workspace and the next shape's
// allocations need the rest).
std::optional<std::string> over_memory_budget(double need, attnlab::Device device);

// Library messages are long and repeat: the table names each once, as a footnote.
class Footnotes {
 public:
  std::string mark(const std::string& text);  // "[n]", n counting from 1 in the order texts first come
  void print() const;                          // "[n] text", a line each

 private:
  std::vector<std::string> texts_;
};

// What a row of either command holds besides its shape and its check.
struct ServingRow {
  std::string asked, path;  // the path asked for, and the one that ran (auto resolved)
  attnlab::Device device = attnlab::Device::cpu;
  std::optional<double> ms, ms_min, ms_max;
  std::optional<double> host_ms;  // the host's time to issue one call (near ms: launch-bound)
  int sets = 1;
  bool ran = false;
  bool refused = false;  // the library said unsupported (note: its message)
  bool skipped = false;  // over the memory budget: not run (note: why)
  std::string note;      // the refusal, the error, or why the shape was skipped

  // The times of `t` (host_ms where the device measured one).
  void record(const Timing& t);
  // A call that threw `e`: not run, refused when unsupported, e's message as the note. Call it in the catch
  // block: invalid_argument is rethrown (the arguments are the lab's: a bug to see).
  void record_failure(const attnlab::Error& e);
  // The path cell: the one asked for, with the one that ran after an arrow when they differ.
  std::string path_cell() const;
  // The note cell of a row that did not run: "skipped: why", or "refused [n]" / "failed [n]" (a footnote).
  std::string not_run_cell(Footnotes& notes) const;
};

using Json = nlohmann::ordered_json;
// A measured value, or null when there is none (or it is not finite).
Json number(const std::optional<double>& v);
// The row's "path", "asked", "device" and "dtype" keys.
void put_run(Json& j, const ServingRow& r, attnlab::DType dtype);
// "ms", "ms_min", "ms_max", "host_ms".
void put_times(Json& j, const ServingRow& r);
// "input_sets", "ok", "note": the keys every row ends with.
void put_outcome(Json& j, const ServingRow& r, bool ok);
// One line of JSON; invalid UTF-8 is replaced instead of throwing: notes carry library messages verbatim.
std::string json_line(const Json& j);

// Where rows go: on stdout instead of the table (bare --json), and appended to the files --json FILE and --jsonl
// FILE name, flushed row by row.
class RowSinks {
 public:
  // Opens the files: throws attnlab::Error (invalid_argument) for one that cannot be written.
  explicit RowSinks(const ServingFlags& f);
  bool on_stdout() const { return stdout_; }
  void write(const std::string& line);

 private:
  bool stdout_;
  std::vector<std::ofstream> files_;
};

}  // namespace lab
