// The registration list: one line per path. Each path's folder defines its factory.
#include "attnlab/version.h"
#include "core/dispatch_policy.h"
#include "core/path.h"
#if ATTNLAB_WITH_CUDA
#include "cuda/common/device.h"
#endif

namespace attnlab {
namespace cpu {
const core::Path& naive_path();
const core::Path& flash_path();
}  // namespace cpu
#if ATTNLAB_WITH_CUDA
namespace cuda {
const core::Path& naive_path();
const core::Path& cudnn_path();
const core::Path& flash_path();  // the family: flash-sm90 where it runs the call, else flash-sm80
const core::Path& flash_sm80_path();
const core::Path& flash_sm90_path();
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
      &cuda::flash_sm80_path(),
      &cuda::flash_sm90_path(),
#endif
  };
  return paths;
}

int device_compute_capability(int index) {
#if ATTNLAB_WITH_CUDA
  if (cuda::cuda_unavailable()) return 0;
  try {
    const cuda::DeviceProperties& p = cuda::device_properties(index);  // a table read once per process
    return p.cc_major * 10 + p.cc_minor;
  } catch (const Error&) {
    return 0;  // no such device: every CUDA path refuses the call with the reason
  }
#else
  (void)index;
  return 0;
#endif
}

const Path* find_path(std::string_view name) {
  for (const Path* p : registered_paths())
    if (p->name() == name) return p;
  return nullptr;
}

}  // namespace attnlab::core
