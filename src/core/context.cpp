// Context: stream, CPU thread count and the paths' per-context state.
#include <thread>

#include "core/context_impl.h"
#include "core/error.h"

namespace attnlab {

Context::Context() : impl_(std::make_unique<Impl>()) {}
Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

void Context::set_stream(void* cuda_stream) {
  impl_->stream = cuda_stream;
  ++impl_->stream_epoch;
}
void* Context::stream() const { return impl_->stream; }

void Context::set_num_threads(int threads) {
  if (threads < 0) core::invalid("num_threads must be ≥ 0 (0 = all hardware threads), got {}", threads);
  impl_->num_threads = threads;
}
int Context::num_threads() const { return impl_->num_threads; }

void Context::set_tuning(const Tuning& tuning) { impl_->tuning = tuning; }
const Tuning& Context::tuning() const { return impl_->tuning; }

int Context::Impl::threads() const {
  if (num_threads > 0) return num_threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : int(hw);
}

}  // namespace attnlab
