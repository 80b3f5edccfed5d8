// Tuning::from_environment(): the ATTNLAB_* tuning variables (attention.h, README), read once per process. A call
// never reads the environment: each context carries its own copy, which tests change with Context::set_tuning().
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "attnlab/attention.h"

namespace attnlab {
namespace {

// The variable's value when it is an integer in [0, max], else `fallback` (unset, empty, malformed or too large:
// a value cut to fit would steer to something nobody asked for).
long long non_negative(const char* name, long long fallback, long long max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 10);
  return *end == '\0' && errno == 0 && v >= 0 && v <= max ? v : fallback;
}

Tuning read_environment() {
  Tuning t;
  constexpr long long kIntMax = std::numeric_limits<int>::max();
  t.flash_smem_limit = non_negative("ATTNLAB_FLASH_SMEM_LIMIT", -1, std::numeric_limits<std::int64_t>::max());
  t.flash_config = int(non_negative("ATTNLAB_FLASH_CONFIG", -1, kIntMax));
  t.flash_section_heads = int(non_negative("ATTNLAB_FLASH_SECTION_HEADS", 0, kIntMax));
  t.flash_pack_query_heads = int(non_negative("ATTNLAB_FLASH_PACK_QUERY_HEADS", -1, 1));
  t.split_kv_splits = int(non_negative("ATTNLAB_SPLIT_KV_SPLITS", 0, 128));
  t.split_kv_cluster_merge = int(non_negative("ATTNLAB_SPLIT_KV_CLUSTER_MERGE", 1, 1));
  return t;
}

}  // namespace

const Tuning& Tuning::from_environment() {
  static const Tuning tuning = read_environment();
  return tuning;
}

}  // namespace attnlab
