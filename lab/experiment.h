// The lab's subcommands ("experiments"), one file each. To add one: write lab/<name>.cpp defining
// `Action attach_<name>(CLI::App&)`, declare it below, add one line to the registry in main.cpp and the file to
// lab/CMakeLists.txt. An experiment that `attnlab lab` runs also exposes its run function (runs.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "results.h"

namespace CLI {
class App;
}

namespace lab {

// What a subcommand does once its flags are parsed; returns the process exit status.
using Action = std::function<int()>;

struct Experiment {
  const char* name;
  const char* summary;                  // one line in `attnlab --help`
  Action (*attach)(CLI::App& command);  // declares the command's flags, returns the action bound to them
};

// What an experiment run produced, after printing its tables and observations.
struct Outcome {
  std::vector<ResultRow> rows;
  bool passed = true;       // its correctness checks (compare's allclose, causal's); the exit status follows it
  bool as_expected = true;  // every observation matched the codelab's (timing ones are flagged, never fatal)
  std::string skipped;      // non-empty: the experiment cannot run on this machine (why), which is not a failure
};

Action attach_check(CLI::App& command);
Action attach_compare(CLI::App& command);
Action attach_bench(CLI::App& command);
Action attach_report(CLI::App& command);
Action attach_causal(CLI::App& command);
Action attach_sweep(CLI::App& command);
Action attach_heads(CLI::App& command);
Action attach_decode(CLI::App& command);
Action attach_prefill(CLI::App& command);
Action attach_ring(CLI::App& command);
Action attach_fp8(CLI::App& command);
Action attach_lab(CLI::App& command);

}  // namespace lab
