// The XLA FFI handlers of jax_ffi.cpp, for module.cpp to hand to JAX (compiled in where the build found jaxlib's
// FFI headers: python/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

namespace attnlab_python {

struct JaxHandler {
  std::string target;    // the custom call's name
  std::string platform;  // "cpu" or "CUDA", as jax.ffi.register_ffi_target names them
  void* handler;         // an XLA_FFI_Handler*
};

std::vector<JaxHandler> jax_handlers();

}  // namespace attnlab_python
