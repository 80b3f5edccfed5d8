// cpu-flash: FlashAttention on the CPU. K/V stream past a block of queries in blocks of Bc keys with an online
// softmax, so no T×S matrix is ever stored (extra memory is per-thread tiles, plus B·N·T floats in backward); key
// blocks the causal / window / length masks hide from a whole query block are skipped. The kernels are compiled for
// AVX-512, AVX2+FMA and the baseline ISA (flash_isa_*.cpp); the widest one this CPU supports runs.
//
// Files: flash_plan.h (tiles, scratch layout, kernel table) · flash_tiles.h (SIMD micro-kernel, online softmax,
// exp/tanh, masks, dtype loads) · flash_forward_kernel.h / flash_backward_kernel.h (one block of work) ·
// flash_forward.cpp / flash_backward.cpp (tasks and threads) · flash_isa_*.cpp (one build per ISA).
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/context_impl.h"
#include "core/path.h"
#include "cpu/flash_plan.h"

namespace attnlab::cpu {
namespace flash {

// ATTNLAB_CPU_FLASH_ISA=avx2|sse2 caps the kernel set (to test or time the narrower kernels on a wider CPU); it
// never raises it above what the CPU reports.
const Kernels& select_kernels() {
  static const Kernels* const chosen = [] {
    const char* cap = std::getenv("ATTNLAB_CPU_FLASH_ISA");
    const bool allow512 = cap == nullptr || std::strcmp(cap, "avx512") == 0 || std::strcmp(cap, "avx512f") == 0;
    const bool allow256 = allow512 || std::strcmp(cap, "avx2") == 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (allow512 && __builtin_cpu_supports("avx512f") && kernels_avx512() != nullptr) return kernels_avx512();
    if (allow256 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kernels_avx2() != nullptr)
      return kernels_avx2();
#else
    (void)allow512;
    (void)allow256;
#endif
    return kernels_baseline();
  }();
  return *chosen;
}

namespace {

class FlashPath final : public core::SimplePath {
 public:
  std::string_view name() const override { return "cpu-flash"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return fmt::format(
        "FlashAttention-style CPU kernel ({} here), forward and backward: blocked online softmax, O(T) memory, "
        "f32/f16/bf16 with f32 accumulation, every mask, bias, softcap, GQA, multi-threaded",
        select_kernels().isa);
  }
  std::optional<std::string> why_not(const core::Problem& p) const override {
    // Reasons carry no "cpu-flash:" prefix: dispatch puts the path's name in front of them.
    if (p.dtype == DType::e4m3 || p.dtype == DType::e5m2)
      return fmt::format("fp8 ({}) inputs unsupported; use bf16/fp16/f32", to_string(p.dtype));
    if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
      return fmt::format("{} inputs unsupported; use bf16/fp16/f32", to_string(p.dtype));
    // Scratch is tiles × head dim, so every practical head dim runs; the cap only keeps 32-bit tile indices exact.
    if (std::max(p.dims.Hqk, p.dims.Hv) > (1 << 20))
      return fmt::format("head dim {} exceeds 2^20 (tile indices are 32-bit)",
                         std::max(p.dims.Hqk, p.dims.Hv));
    return std::nullopt;
  }

 protected:
  void run(Context::Impl& ctx, const core::Problem& p) const override {
    const Kernels& kernels = select_kernels();
    if (p.direction == core::Direction::forward)
      run_forward(kernels, ctx, p);
    else
      run_backward(kernels, ctx, p);
  }
};

}  // namespace
}  // namespace flash

const core::Path& flash_path() {
  static const flash::FlashPath path;
  return path;
}

}  // namespace attnlab::cpu
