// What the lab runs on: the CPU as the lab reports it (the GPU side is in gpu.h).
#pragma once

#include <string>

namespace lab {

struct CpuInfo {
  std::string model;      // "Intel(R) Xeon(R) Platinum 8480+", or the architecture when unknown
  int logical_cpus = 0;   // hardware threads the OS offers (what the CPU paths use by default)
  int physical_cores = 0; // 0 when the OS does not say
};

CpuInfo cpu_info();

}  // namespace lab
