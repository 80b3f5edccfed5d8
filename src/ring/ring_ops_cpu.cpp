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

  void merge(float* o_acc, float* lse_acc, const void* o_part, DType dtype, const float* lse_part, const Rows& r,
             bool first, const TensorView* out, const TensorView* out_lse) override {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const std::int64_t N = r.heads, Hv = r.H;
    for (std::int64_t b = 0; b < r.B; ++b)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t t = r.begin; t < r.begin + r.count; ++t) {
          const std::int64_t l = (b * N + n) * r.total + t;
          const float part = lse_part[l], acc = first ? neg_inf : lse_acc[l];
          const float m = std::max(part, acc);
          float merged = neg_inf, w_acc = 0, w_part = 0;
          if (m > neg_inf) {
            merged = m + std::log(std::exp(acc - m) + std::exp(part - m));
            w_acc = std::exp(acc - merged), w_part = std::exp(part - merged);
          }
          const std::int64_t o = ((b * r.total + t) * N + n) * Hv;
          for (std::int64_t h = 0; h < Hv; ++h) {
            const float own = w_part > 0.0f ? core::load_float(o_part, dtype, o + h) * w_part : 0.0f;
            const float x = own + (first ? 0.0f : o_acc[o + h] * w_acc);
            if (out)
              core::store_float(out->data, out->dtype, core::offset_of(*out, b, t, n, h), x);
            else
              o_acc[o + h] = x;
          }
          if (out == nullptr)
            lse_acc[l] = merged;
          else if (out_lse != nullptr && !out_lse->empty())
            static_cast<float*>(out_lse->data)[core::offset_of(*out_lse, b, n, t)] = merged;
        }
  }

  void accumulate(float* acc, const void* part, DType dtype, const Rows& r, bool first,
                  const TensorView* out) override {
    const std::int64_t width = r.heads * r.H;
    for (std::int64_t b = 0; b < r.B; ++b)
      for (std::int64_t t = r.begin; t < r.begin + r.count; ++t)
        for (std::int64_t e = 0; e < width; ++e) {
          const std::int64_t i = (b * r.total + t) * width + e;
          const float x = core::load_float(part, dtype, i) + (first ? 0.0f : acc[i]);
          if (out)
            core::store_float(out->data, out->dtype, core::offset_of(*out, b, t, e / r.H, e % r.H), x);
          else
            acc[i] = x;
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
