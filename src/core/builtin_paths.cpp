// The registration list: one line per path. Each path's folder defines its factory.
#include "attnlab/version.h"
#include "core/path.h"

namespace attnlab {
namespace cpu {
const core::Path& naive_path();
const core::Path& flash_path();
}  // namespace cpu
#if ATTNLAB_WITH_CUDA
namespace cuda {
const core::Path& naive_path();
const core::Path& cudnn_path();
const core::Path& flash_path();
}  // namespace cuda
#endif
}  // namespace attnlab

namespace attnlab::core {

const std::vector<const Path*>& registered_paths() {
  static const std::vector<const Path*> paths = {
      &cpu::naive_path(),
      &cpu::flash_path(),
#if ATTNLAB_WITH_CUDA
      &cuda::naive_path(),
      &cuda::cudnn_path(),
      &cuda::flash_path(),
#endif
  };
  return paths;
}

const Path* find_path(std::string_view name) {
  for (const Path* p : registered_paths())
    if (p->name() == name) return p;
  return nullptr;
}

}  // namespace attnlab::core
