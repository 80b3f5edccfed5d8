// attnlab — the lab CLI. This file wires the subcommands together and turns every failure into one line on stderr;
// each experiment lives in its own file (see experiment.h).
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <attnlab/attention.h>

#include "experiment.h"

namespace lab {
namespace {

// The registry: one line per subcommand, in the order of the codelab.
const std::vector<Experiment>& experiments() {
  static const std::vector<Experiment> list = {
      {"check", "machine, build, GPU, and which attention paths can run here", attach_check},
      {"compare", "naive vs fused attention on the same random inputs: max |diff| and allclose", attach_compare},
      {"causal", "full vs causal on the same inputs: the first position changes, the last does not", attach_causal},
      {"bench", "time each path at a shape or at every workload of a file: ms, TFLOP/s, first call", attach_bench},
      {"sweep", "time every path over sequence lengths (seq), batch sizes (batch), or the codelab's causal "
                "TransformerEngine sweep (te)", attach_sweep},
      {"heads", "MHA / GQA / MQA: 8 query heads over 8, 2, 1 KV heads; KV cache size and time", attach_heads},
      {"decode", "decode via the serving API: packed or paged KV caches; µs/call, tokens/s, KV GB/s", attach_decode},
      {"prefill", "a variable-length prefill batch three ways: varlen (serving API), padded with lengths, uniform; "
                  "µs/call, µs per 1k tokens, useful TFLOP/s", attach_prefill},
      {"ring", "ring attention (context parallelism) on 1…N ranks over NCCL or a loopback: time, TFLOP/s, speed-up, "
               "share of time waiting for transfers", attach_ring},
      {"fp8", "FP8 attention with TransformerEngine's DelayedScaling recipe, next to bf16 (the C++ to use it "
              "where the GPU has none)", attach_fp8},
      {"lab", "the codelab's experiments above (check … fp8) in order on one device, then a report (lab-report/ unless "
              "--report says)", attach_lab},
      {"report", "report.html, SVG plots, results.json/.csv from result rows (ours and peers')", attach_report},
  };
  return list;
}

std::string version_line() {
  const attnlab::BuildInfo b = attnlab::build_info();
  return fmt::format("attnlab {} ({}, {})", b.version, b.cuda ? "with CUDA" : "CPU only", b.compiler);
}

int error(std::string_view message) {
  fmt::print(stderr, "attnlab: error: {}\n", message);
  return 1;
}

int run(int argc, char** argv) {
  CLI::App app("attnlab: scaled dot-product attention, one API over several paths, and a lab that runs them side "
               "by side.",
               "attnlab");
  app.set_version_flag("--version", version_line(), "print the version and exit");
  app.require_subcommand(0, 1);
  app.footer("Run 'attnlab <command> --help' for a command's flags.");

  std::vector<std::pair<CLI::App*, Action>> commands;
  for (const Experiment& e : experiments()) {
    CLI::App* sub = app.add_subcommand(e.name, e.summary);
    commands.emplace_back(sub, e.attach(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Point at the help of the subcommand being parsed when there is one.
    std::string help = "attnlab --help";
    for (auto& [sub, action] : commands)
      if (sub->parsed()) help = fmt::format("attnlab {} --help", sub->get_name());
    return error(fmt::format("{} (see '{}')", e.what(), help));
  }

  for (auto& [sub, action] : commands)
    if (sub->parsed()) return action();
  fmt::print("{}", app.help());  // plain `attnlab`: what can I do?
  return 0;
}

}  // namespace
}  // namespace lab

int main(int argc, char** argv) {
  try {
    return lab::run(argc, argv);
  } catch (const attnlab::Error& e) {
    return lab::error(e.what());
  } catch (const std::bad_alloc&) {
    return lab::error("out of host memory (try a smaller shape)");
  } catch (const std::length_error&) {  // a std::vector asked for more than it can ever hold
    return lab::error("out of host memory (try a smaller shape)");
  } catch (const std::exception& e) {
    return lab::error(e.what());
  }
}
