// ring::Ops on the CPU: plain loops, on the calling thread (the ring's element work is O(T·N·H) per step against
// the attention's O(T²·N·H)).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/numeric.h"
#include "ring/ring_ops.h"

namespace attnlab::ring {
namespace {

class CpuOps final : public Ops {
 public:
  void pack(void* dst, const TensorView& src) override {
    const std::size_t elem = size_of(src.dtype);
    const std::int64_t row = src.shape[3];
    auto* out = static_cast<std::byte*>(dst);
    const auto* in = static_cast<const std::byte*>(src.data);
    for (std::int64_t a = 0; a < src.shape[0]; ++a)
      for (std::int64_t b = 0; b < src.shape[1]; ++b)
        for (std::int64_t c = 0; c < src.shape[2]; ++c) {
          std::memcpy(out, in + std::size_t(core::offset_of(src, a, b, c)) * elem, std::size_t(row) * elem);
          out += std::size_t(row) * elem;
        }
  }

  void fill(float* dst, std::int64_t count, float value) override {
    for (std::int64_t i = 0; i < count; ++i) dst[i] = value;
  }

  void merge(float* o_acc, float* lse_acc, const void* o_part, DType dtype, const float* lse_part, std::int64_t B,
             std::int64_t T, std::int64_t N, std::int64_t Hv, std::int64_t row_begin, std::int64_t rows) override {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t t = row_begin; t < row_begin + rows; ++t) {
          const std::int64_t l = (b * N + n) * T + t;
          const float part = lse_part[l], acc = lse_acc[l];
          if (!(part > neg_inf)) continue;
          const float m = std::max(part, acc);
          const float merged = m + std::log(std::exp(acc - m) + std::exp(part - m));
          const float w_acc = std::exp(acc - merged), w_part = std::exp(part - merged);
          const std::int64_t o = ((b * T + t) * N + n) * Hv;
          for (std::int64_t h = 0; h < Hv; ++h)
            o_acc[o + h] = o_acc[o + h] * w_acc + core::load_float(o_part, dtype, o + h) * w_part;
          lse_acc[l] = merged;
        }
  }

  void accumulate(float* acc, const void* part, DType dtype, std::int64_t B, std::int64_t T, std::int64_t width,
                  std::int64_t row_begin, std::int64_t rows) override {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t first = (b * T + row_begin) * width;
      for (std::int64_t i = first; i < first + rows * width; ++i) acc[i] += core::load_float(part, dtype, i);
    }
  }

  void store(const TensorView& dst, const float* src) override {
    std::int64_t shape[4] = {1, 1, 1, 1};
    const int lead = 4 - dst.rank;  // a rank-3 view is stored as (1, d0, d1, d2)
    for (int d = 0; d < dst.rank; ++d) shape[lead + d] = dst.shape[d];
    std::int64_t i = 0;
    for (std::int64_t a = 0; a < shape[0]; ++a)
      for (std::int64_t b = 0; b < shape[1]; ++b)
        for (std::int64_t c = 0; c < shape[2]; ++c)
          for (std::int64_t d = 0; d < shape[3]; ++d, ++i) {
            const std::int64_t idx[4] = {a, b, c, d};
            std::int64_t offset = 0;
            for (int k = 0; k < dst.rank; ++k) offset += idx[lead + k] * dst.strides[k];
            core::store_float(dst.data, dst.dtype, offset, src[i]);
          }
  }
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace attnlab::ring
