// Which SIMD level the CPU paths run with on this machine (they are compiled for several and pick at run time).
#pragma once

#include <string>

namespace attnlab::core {

std::string cpu_isa_name();

}  // namespace attnlab::core
