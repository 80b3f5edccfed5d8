// Tuning::from_environment(): the ATTNLAB_* tuning variables (attention.h, README), read once per process. A call
// never reads the environment: each context carries its own copy, which tests change with Context::set_tuning().
#include <cstdlib>
#include <string_view>

#include "attnlab/attention.h"

namespace attnlab {
namespace {

// The variable's value when it is a non-negative integer, else `fallback` (unset, empty or malformed).
long long non_negative(const char* name, long long fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  return *end == '\0' && v >= 0 ? v : fallback;
}

Tuning read_environment() {
  Tuning t;
  t.flash_smem_limit = non_negative("ATTNLAB_FLASH_SMEM_LIMIT", -1);
  t.flash_config = int(non_negative("ATTNLAB_FLASH_CONFIG", -1));
  t.flash_section_heads = int(non_negative("ATTNLAB_FLASH_SECTION_HEADS", 0));
  return t;
}

}  // namespace

const Tuning& Tuning::from_environment() {
  static const Tuning tuning = read_environment();
  return tuning;
}

}  // namespace attnlab
