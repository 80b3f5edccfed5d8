#include "machine.h"

#include <fstream>
#include <set>
#include <thread>
#include <utility>

namespace lab {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string fallback_model() {
#if defined(__x86_64__)
  return "x86-64 CPU";
#elif defined(__aarch64__)
  return "AArch64 CPU";
#else
  return "unknown CPU";
#endif
}

}  // namespace

CpuInfo cpu_info() {
  CpuInfo info;
  info.logical_cpus = int(std::thread::hardware_concurrency());
  // Linux describes each logical CPU in /proc/cpuinfo; (physical id, core id) pairs count the physical cores.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, physical_id = "0";
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    if (key == "model name" && info.model.empty()) info.model = value;
    else if (key == "Model" && info.model.empty()) info.model = value;  // some Arm kernels spell it this way
    else if (key == "physical id") physical_id = value;
    else if (key == "core id") cores.emplace(physical_id, value);
  }
  info.physical_cores = int(cores.size());
  if (info.model.empty()) info.model = fallback_model();
  return info;
}

}  // namespace lab
