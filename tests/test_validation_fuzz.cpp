// Random breakage of valid calls on CPU tensors (docs/design.md §2: every precondition is checked before any
// launch, nothing is written when a call fails; the README's "no crash on any input"): each iteration takes a
// valid forward, backward, packed (serving) or append call, breaks one to three things at random — a tensor's rank, a
// dimension, a stride, its dtype, device or alignment; the scale, softcap and window; the values of lengths,
// offsets and block tables; the maximum lengths; the path — and makes the call. It must either run or throw
// attnlab::Error with a code other than `internal`, and a refused call must leave every buffer as it was. Views are
// kept inside their buffers (a view past its memory is the caller's breach, which no check can see), so a call
// that runs reads and writes only memory it was given; sanitizer builds (-fsanitize=address,undefined) turn any
// other access into a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnlab/serving.h"
#include "serving_batch.h"
#include "validation.h"

namespace attnlab_test {
namespace {

using attnlab::BackwardArgs;
using attnlab::ErrorCode;
using attnlab::ForwardArgs;
using attnlab::VarlenForwardArgs;

std::int64_t element_bytes(DType d) {
  switch (d) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    default: return 1;
  }
}

// Breaks views, options and integer values at random, and knows which memory a view may address: `buffers`.
class Breaker {
 public:
  Breaker(Rng& rng, std::vector<HostTensor*> buffers) : rng_(rng), buffers_(std::move(buffers)) {}

  // Whether every byte `v` can address lies inside one of the buffers (a view without elements addresses none).
  bool inside(const TensorView& v) const {
    if (v.data == nullptr || v.rank <= 0 || v.rank > attnlab::kMaxRank) return true;
    __int128 low = 0, high = 0;
    for (int d = 0; d < v.rank; ++d) {
      if (v.shape[d] <= 0) return true;
      const __int128 reach = __int128(v.shape[d] - 1) * v.strides[d];
      (reach < 0 ? low : high) += reach;
    }
    const std::int64_t bytes = element_bytes(v.dtype);
    const auto* first = static_cast<const std::byte*>(v.data);
    for (const HostTensor* t : buffers_) {
      const std::byte* begin = t->allocation_begin();
      const std::byte* end = t->allocation_end();
      if (first < begin || first >= end) continue;
      const __int128 offset = first - begin;
      return offset + low * bytes >= 0 && offset + (high + 1) * bytes <= end - begin;
    }
    return false;  // points at none of the buffers
  }

  void view(TensorView& v) {
    // A dimension of the view that exists (a rank broken past kMaxRank has no more).
    const int dims = std::min(v.rank, attnlab::kMaxRank);
    auto dim = [&] { return std::size_t(rng_.integer(0, dims - 1)); };
    switch (rng_.integer(0, 7)) {
      case 0: v.rank = int(rng_.integer(0, 5)); break;
      case 1: {  // a dimension smaller, zero or negative: never past the buffer
        if (dims <= 0) break;
        std::int64_t& s = v.shape[dim()];
        const std::int64_t smaller = s > 0 ? s - 1 : s;
        const std::int64_t choices[] = {-1, 0, 1, smaller, std::numeric_limits<std::int64_t>::min()};
        s = choices[rng_.integer(0, 4)];
        break;
      }
      case 2: {  // a stride zero, negative, doubled or absurd
        if (dims <= 0) break;
        std::int64_t& s = v.strides[dim()];
        const bool small = s > -(1LL << 40) && s < (1LL << 40);
        const std::int64_t choices[] = {0, -1, small ? -s : 0, small ? 2 * s : 1,
                                        std::numeric_limits<std::int64_t>::max()};
        s = choices[rng_.integer(0, 4)];
        break;
      }
      case 3: v.dtype = DType(rng_.integer(0, 6)); break;
      case 4: v.device = Device::cuda; break;
      case 5: v.data = static_cast<char*>(v.data) + 1; break;  // misaligned (and one byte further)
      case 6: v.data = nullptr; break;
      default: v = TensorView{}; break;  // left out
    }
  }

  void options(attnlab::Options& o, const HostTensor& mask) {
    const float odd[] = {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), 1e-30f};
    const std::int64_t windows[] = {-2, -1, 0, 1, 1000, std::numeric_limits<std::int32_t>::max()};
    const char* paths[] = {"auto", "cpu-flash", "cpu-naive", "flash", "flash-sm90", "cudnn", "cuda-naive", "", "x"};
    switch (rng_.integer(0, 6)) {
      case 0: o.scale = odd[rng_.integer(0, 5)]; break;
      case 1: o.softcap = odd[rng_.integer(0, 5)]; break;
      case 2: o.mask.window_left = windows[rng_.integer(0, 5)]; break;
      case 3: o.mask.window_right = windows[rng_.integer(0, 5)]; break;
      case 4: o.mask.causal = !o.mask.causal; break;
      case 5: o.bool_mask = mask.view(); break;  // a mask where the call may have none, or beside a bias
      default: o.path = paths[rng_.integer(0, 8)]; break;
    }
  }

  // One element of an int32 tensor (lengths, offsets, a block table) set to an odd or a plausible value.
  void value(HostTensor& t, std::int64_t plausible) {
    if (t.numel() <= 0) return;
    const double values[] = {-1, 0, 1, double(plausible), double(plausible + 1), 1e9};
    t.set(rng_.integer(0, t.numel() - 1), values[rng_.integer(0, 5)]);
  }

  Rng& rng() { return rng_; }

 private:
  Rng& rng_;
  std::vector<HostTensor*> buffers_;
};

// Counts of one test's calls, and the check of each: it runs, or fails with attnlab::Error (not `internal`) and
// every watched buffer as it was.
struct Outcomes {
  int ran = 0, refused = 0, skipped = 0;

  void call(const std::function<void()>& run, const std::vector<HostTensor*>& watched, const std::string& what) {
    std::vector<std::vector<std::uint8_t>> before;
    for (HostTensor* t : watched) before.push_back(t->snapshot());
    try {
      run();
      ++ran;
    } catch (const attnlab::Error& e) {
      ++refused;
      EXPECT_NE(int(e.code()), int(ErrorCode::internal)) << what << ": " << e.what();
      for (std::size_t i = 0; i < watched.size(); ++i)
        EXPECT_TRUE(watched[i]->same_bytes(before[i])) << what << ": buffer " << i << " changed by a refused call";
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": threw something other than attnlab::Error: " << e.what();
    }
  }
  // The breakage must reach both outcomes, or the test checks nothing.
  void expect_both(const char* name, int calls) const {
    EXPECT_GT(refused, calls / 4) << name;
    EXPECT_GT(ran, calls / 100) << name;
    std::printf("%s: %d ran, %d refused, %d skipped (a view past its buffer)\n", name, ran, refused, skipped);
  }
};

constexpr int kCalls = 10000;

std::vector<const TensorView*> views(const ForwardArgs& a) {
  return {&a.q, &a.k, &a.v, &a.o, &a.lse, &a.options.q_seqlens, &a.options.kv_seqlens, &a.options.bias,
          &a.options.bool_mask};
}
std::vector<const TensorView*> views(const BackwardArgs& a) {
  return {&a.q,  &a.k,  &a.v,  &a.o,  &a.d_o, &a.lse, &a.dq, &a.dk, &a.dv, &a.options.q_seqlens,
          &a.options.kv_seqlens, &a.options.bias, &a.options.bool_mask};
}
std::vector<const TensorView*> views(const VarlenForwardArgs& a) {
  std::vector<const TensorView*> v = {&a.q, &a.cu_seqlens_q, &a.k, &a.v, &a.cu_seqlens_k, &a.o, &a.lse, &a.sinks,
                                      &a.options.q_seqlens, &a.options.bias};
  if (a.paged) v.insert(v.end(), {&a.paged->k_cache, &a.paged->v_cache, &a.paged->block_table, &a.paged->seqlens});
  return v;
}

std::vector<const TensorView*> views(const attnlab::AppendKVArgs& a) {
  std::vector<const TensorView*> v = {&a.k_new, &a.v_new, &a.cu_seqlens_new, &a.k_cache, &a.v_cache, &a.seqlens};
  if (a.paged) v.insert(v.end(), {&a.paged->k_cache, &a.paged->v_cache, &a.paged->block_table, &a.paged->seqlens});
  return v;
}

template <class Args>
bool every_view_inside(const Args& a, const Breaker& breaker) {
  for (const TensorView* v : views(a))
    if (!breaker.inside(*v)) return false;
  return true;
}

template <class Args>
TensorView& any_view(Args& a, Rng& rng) {
  const std::vector<const TensorView*> all = views(a);
  return *const_cast<TensorView*>(all[std::size_t(rng.integer(0, std::int64_t(all.size()) - 1))]);
}

class ValidationFuzz : public ValidationTest {
 protected:
  // Forward or backward calls of the fixture, broken and made kCalls times.
  template <class Args, class MakeArgs, class Call>
  void run(const char* name, MakeArgs make_args, Call call) {
    SCOPED_TRACE("seed " + std::to_string(rng_.seed()));
    std::fprintf(stderr, "seed %llu\n", static_cast<unsigned long long>(rng_.seed()));  // before a sanitizer stops it
    Breaker breaker(rng_, watched_);
    const std::vector<double> q_lens = t_.q_lens.values(), kv_lens = t_.kv_lens.values();
    Outcomes outcomes;
    for (int i = 0; i < kCalls && !HasFailure(); ++i) {  // the first broken call is the one to read
      t_.q_lens.set_values(q_lens);
      t_.kv_lens.set_values(kv_lens);
      Args a = make_args();
      for (int n = int(rng_.integer(1, 3)); n > 0; --n) {
        const std::int64_t what = rng_.integer(0, 9);
        if (what < 6)
          breaker.view(any_view(a, rng_));
        else if (what < 9)
          breaker.options(a.options, mask_);
        else
          breaker.value(rng_.chance(0.5) ? t_.q_lens : t_.kv_lens, c_.S);
      }
      if (!every_view_inside(a, breaker)) {
        ++outcomes.skipped;
        continue;
      }
      outcomes.call([&] { call(a); }, watched_, std::string(name) + " call " + std::to_string(i));
    }
    outcomes.expect_both(name, kCalls);
  }
};

TEST_F(ValidationFuzz, BrokenForwardCallsRunOrFailCleanly) {
  run<ForwardArgs>("forward", [&] { return forward_args_(); }, [&](const ForwardArgs& a) { attnlab::forward(ctx_, a); });
}

TEST_F(ValidationFuzz, BrokenBackwardCallsRunOrFailCleanly) {
  run<BackwardArgs>("backward", [&] { return backward_args_(); },
                    [&](const BackwardArgs& a) { attnlab::backward(ctx_, a); });
}

// Packed batches with packed and with paged keys (pages out of order, one shared), sinks: the layout's offsets,
// block table and lengths are read on the host, so every value of them is the library's to check.
TEST(ServingValidationFuzz, BrokenPackedCallsRunOrFailCleanly) {
  ATTNLAB_TEST_RNG(rng);
  std::fprintf(stderr, "seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  attnlab::Context ctx;
  for (const std::int64_t page_size : {0, 4}) {
    Batch b;
    b.q_lens = {3, 1, 0}, b.kv_lens = {5, 9, 2}, b.page_size = page_size, b.with_sinks = true;
    b.make(rng);
    HostTensor mask(DType::u8, {3, 4, 3, 9});
    std::vector<HostTensor*> watched = {&b.q, &b.k, &b.v, &b.o, &b.lse, &b.cu_q, &b.cu_k, &b.k_cache, &b.v_cache,
                                        &b.block_table, &b.seqlens, &b.sinks, &mask};
    watched.erase(std::remove_if(watched.begin(), watched.end(), [](HostTensor* t) { return !t->defined(); }),
                  watched.end());
    Breaker breaker(rng, watched);
    HostTensor* ints[] = {&b.cu_q, &b.cu_k, &b.block_table, &b.seqlens};
    std::vector<std::vector<double>> valid;
    for (HostTensor* t : ints) valid.push_back(t->defined() ? t->values() : std::vector<double>{});
    Outcomes outcomes;
    for (int i = 0; i < kCalls && !::testing::Test::HasFailure(); ++i) {
      for (std::size_t t = 0; t < std::size(ints); ++t)
        if (ints[t]->defined()) ints[t]->set_values(valid[t]);
      VarlenForwardArgs a = b.args({});
      for (int n = int(rng.integer(1, 3)); n > 0; --n) {
        const std::int64_t what = rng.integer(0, 11);
        if (what < 5) {
          breaker.view(any_view(a, rng));
        } else if (what < 8) {
          breaker.options(a.options, mask);
        } else if (what < 10) {
          HostTensor& t = *ints[std::size_t(rng.integer(0, 3))];
          if (t.defined()) breaker.value(t, 9);
        } else {
          const std::int64_t lengths[] = {-1, 0, 1, 2, 9, std::numeric_limits<std::int64_t>::max()};
          (rng.chance(0.5) ? a.max_seqlen_q : a.max_seqlen_k) = lengths[rng.integer(0, 5)];
        }
      }
      if (!every_view_inside(a, breaker)) {
        ++outcomes.skipped;
        continue;
      }
      outcomes.call([&] { attnlab::forward(ctx, a); }, watched,
                    "packed call " + std::to_string(i) + (page_size ? " (paged)" : " (packed keys)"));
    }
    outcomes.expect_both(page_size ? "packed, paged keys" : "packed", kCalls);
  }
}

// append_kv into a contiguous cache (padded new rows) and a paged one (packed new rows, pages out of order): the
// lengths, offsets and block table are read on the host, so every value of them is the library's to check, and a
// refused append writes no byte of the cache.
TEST(ServingValidationFuzz, BrokenAppendsRunOrFailCleanly) {
  ATTNLAB_TEST_RNG(rng);
  std::fprintf(stderr, "seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  attnlab::Context ctx;
  constexpr std::int64_t K = 2, H = 8;
  for (const bool paged : {false, true}) {
    HostTensor k_cache(DType::f32, paged ? std::vector<std::int64_t>{6, 4, K, H} : std::vector<std::int64_t>{2, 12, K, H});
    HostTensor v_cache(DType::f32, k_cache.shape());
    HostTensor lens = int_tensor({3, 5});
    HostTensor table = int_tensor({4, 1, 0, 5, 2, 3}, 3);  // three pages a sequence, out of order
    HostTensor cu = int_tensor({0, 2, 3});
    HostTensor k_new(DType::f32, paged ? std::vector<std::int64_t>{3, K, H} : std::vector<std::int64_t>{2, 2, K, H});
    HostTensor v_new(DType::f32, k_new.shape());
    k_new.fill_random(rng);
    v_new.fill_random(rng);
    std::vector<HostTensor*> watched = {&k_cache, &v_cache, &lens, &table, &cu, &k_new, &v_new};
    Breaker breaker(rng, watched);
    HostTensor* ints[] = {&lens, &table, &cu};
    std::vector<std::vector<double>> valid;
    for (HostTensor* t : ints) valid.push_back(t->values());
    Outcomes outcomes;
    for (int i = 0; i < kCalls && !::testing::Test::HasFailure(); ++i) {
      for (std::size_t t = 0; t < std::size(ints); ++t) ints[t]->set_values(valid[t]);
      attnlab::AppendKVArgs a;
      a.k_new = k_new.view(), a.v_new = v_new.view();
      if (paged) {
        a.cu_seqlens_new = cu.view();
        a.paged = attnlab::PagedKV{k_cache.view(), v_cache.view(), table.view(), lens.view()};
      } else {
        a.k_cache = k_cache.view(), a.v_cache = v_cache.view(), a.seqlens = lens.view();
      }
      for (int n = int(rng.integer(1, 3)); n > 0; --n) {
        if (rng.chance(0.7))
          breaker.view(any_view(a, rng));
        else
          breaker.value(*ints[std::size_t(rng.integer(0, 2))], 10);
      }
      if (!every_view_inside(a, breaker)) {
        ++outcomes.skipped;
        continue;
      }
      outcomes.call([&] { attnlab::append_kv(ctx, a); }, watched,
                    "append " + std::to_string(i) + (paged ? " (paged)" : " (contiguous)"));
    }
    outcomes.expect_both(paged ? "append, paged" : "append, contiguous", kCalls);
  }
}

}  // namespace
}  // namespace attnlab_test
