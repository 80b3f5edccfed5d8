// ring::Ops and ring::gpu in a build without CUDA: every GPU operation refuses by name (a CPU ring never calls
// them; a GPU tensor cannot get this far, since validation refuses it first).
#include "core/error.h"
#include "ring/ring_ops.h"

namespace attnlab::ring {
namespace {
[[noreturn]] void no_cuda() { core::fail(ErrorCode::unsupported, "ring: this build of attnlab has no CUDA"); }
}  // namespace

std::unique_ptr<Ops> make_cuda_ops(int, void*) { no_cuda(); }

namespace gpu {
void* event_create(int, bool) { no_cuda(); }
void event_destroy(void*) noexcept {}
void record(void*, void*) { no_cuda(); }
void wait(void*, void*) { no_cuda(); }
float elapsed_ms(void*, void*) { no_cuda(); }
void copy_async(void*, const void*, std::size_t, void*) { no_cuda(); }
void set_device(int) { no_cuda(); }
int current_device() { return -1; }
void synchronize(void*) { no_cuda(); }
}  // namespace gpu
}  // namespace attnlab::ring
