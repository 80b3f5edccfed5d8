// Placeholder while cpu-flash is written: registers the path so the build links.
#include <fmt/format.h>
#include "core/context_impl.h"
#include "core/path.h"
namespace attnlab::cpu {
namespace {
class Placeholder final : public core::Path {
 public:
  std::string_view name() const override { return "cpu-flash"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override { return "placeholder"; }
  std::optional<std::string> why_not(const core::Problem&) const override { return "not written yet"; }
  int auto_rank() const override { return 0; }
  void run(Context::Impl&, const core::Problem&) const override {}
};
}  // namespace
const core::Path& flash_path() { static const Placeholder p; return p; }
}  // namespace attnlab::cpu
