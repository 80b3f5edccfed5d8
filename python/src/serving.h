// The serving calls (include/attnlab/serving.h) in the extension: packed and paged attention, and append_kv.
#pragma once

#include <nanobind/nanobind.h>

namespace attnlab_python {

void bind_serving(nanobind::module_& m);

}  // namespace attnlab_python
