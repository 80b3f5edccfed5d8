#include "core/cpu_features.h"

namespace attnlab::core {

std::string cpu_isa_name() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2+fma";
  return "sse2";
#else
  return "generic";
#endif
}

}  // namespace attnlab::core
