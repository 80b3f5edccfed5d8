#include "decode_inputs.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "gpu.h"
#include "tensors.h"

#if ATTNLAB_LAB_CUDA
#include <cuda_runtime_api.h>
#endif

namespace lab {

std::string_view to_string(KvLayout layout) { return layout == KvLayout::paged ? "paged" : "contiguous"; }

double DecodeShape::kv_read_bytes() const {
  return 2.0 * double(B) * double(S) * double(K) * double(H) * double(attnlab::size_of(dtype));
}

double DecodeShape::footprint_bytes() const {
  const double elem = double(attnlab::size_of(dtype));
  const double rows = layout == KvLayout::paged ? double(B) * double(pages_per_sequence()) * double(page_size)
                                                : double(B) * double(S);
  const double q_and_o = 2.0 * double(B) * double(q_len) * double(N) * double(H) * elem;
  const double new_rows = 2.0 * double(B) * double(q_len) * double(K) * double(H) * elem;  // append_args()
  const double lengths = 4.0 * double(2 * (B + 1) + B * pages_per_sequence() + 2 * B);
  return q_and_o + new_rows + 2.0 * rows * double(K) * double(H) * elem + lengths;
}

namespace {

// SplitMix64, as tensors.cpp draws with: the page order must not depend on the standard library (std::shuffle's
// algorithm is the implementation's), so that a host copy gets the GPU copy's pages.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Pages 0 … count − 1 in a Fisher–Yates order: a cache whose pages sit in sequence order would let a kernel
// stream them as if they were contiguous, which a serving engine's cache never lets it.
std::vector<std::int32_t> shuffled_pages(std::int64_t count, std::uint64_t seed) {
  std::vector<std::int32_t> pages(static_cast<std::size_t>(count));
  std::iota(pages.begin(), pages.end(), 0);
  std::uint64_t state = seed ^ 0x5851f42d4c957f2dull;
  for (std::size_t i = pages.size(); i > 1; --i) std::swap(pages[i - 1], pages[splitmix64(state) % i]);
  return pages;
}

// Copies bytes [0, filled) of a buffer onto its rest, doubling each time: one pattern upload fills any size.
void repeat_prefix(attnlab::Device device, std::byte* data, std::size_t filled, std::size_t total) {
  while (filled < total) {
    const std::size_t n = std::min(filled, total - filled);
    if (device == attnlab::Device::cpu) {
      std::memcpy(data + filled, data, n);
    } else {
#if ATTNLAB_LAB_CUDA
      // gpu.h's DeviceBuffer uploads to a buffer's start only; the repeats are device-to-device copies on the
      // legacy default stream, which orders them before the calls (a Context's default stream is that stream).
      const cudaError_t status = cudaMemcpy(data + filled, data, n, cudaMemcpyDeviceToDevice);
      if (status != cudaSuccess)
        throw attnlab::Error(attnlab::ErrorCode::device_error,
                             fmt::format("cudaMemcpy on the GPU: {} ({})", cudaGetErrorString(status),
                                         cudaGetErrorName(status)));
#endif
    }
    filled += n;
  }
}

}  // namespace

TensorBuffer::TensorBuffer(attnlab::Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  if (device == attnlab::Device::cuda) gpu_ = std::make_unique<gpu::DeviceBuffer>(bytes);
  else host_.resize(bytes);
}

void TensorBuffer::fill(const std::vector<std::byte>& pattern) {
  const std::size_t first = std::min(pattern.size(), bytes_);
  if (gpu_) gpu_->upload(pattern.data(), first);
  else std::memcpy(host_.data(), pattern.data(), first);
  repeat_prefix(device_, static_cast<std::byte*>(data()), first, bytes_);
}

std::vector<std::byte> TensorBuffer::read() const {
  if (!gpu_) return host_;
  std::vector<std::byte> out(bytes_);
  gpu_->download(out.data(), bytes_);
  return out;
}

attnlab::TensorView DecodeInputs::make(attnlab::DType dtype, std::initializer_list<std::int64_t> shape) {
  const std::int64_t count = element_count(Shape(shape));
  buffers_.push_back(std::make_unique<TensorBuffer>(device_, std::size_t(count) * attnlab::size_of(dtype)));
  return attnlab::TensorView::contiguous(buffers_.back()->data(), dtype, shape, device_);
}

DecodeInputs::DecodeInputs(const DecodeShape& s, attnlab::Device device, std::uint64_t seed)
    : shape_(s), device_(device) {
  std::uint64_t stream = 0;
  // A float tensor of `shape`, random values (the pattern) repeated over it.
  const auto random = [&](std::initializer_list<std::int64_t> shape) {
    attnlab::TensorView t = make(s.dtype, shape);
    const std::int64_t drawn = std::min(t.numel(), kPatternElements);
    buffers_.back()->fill(encode(random_normal(drawn, seed, ++stream), s.dtype));
    return t;
  };
  // An int32 tensor holding `values`.
  const auto ints = [&](const std::vector<std::int32_t>& values, std::initializer_list<std::int64_t> shape) {
    attnlab::TensorView t = make(attnlab::DType::i32, shape);
    std::vector<std::byte> bytes(values.size() * sizeof(std::int32_t));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    buffers_.back()->fill(bytes);
    return t;
  };
  const auto offsets = [&](std::int64_t per_sequence) {
    std::vector<std::int32_t> cu(std::size_t(s.B + 1));
    for (std::int64_t b = 0; b <= s.B; ++b) cu[std::size_t(b)] = std::int32_t(b * per_sequence);
    return ints(cu, {s.B + 1});
  };

  args_.q = random({s.B * s.q_len, s.N, s.H});
  args_.cu_seqlens_q = offsets(s.q_len);
  args_.max_seqlen_q = s.q_len;
  args_.max_seqlen_k = s.S;
  if (s.layout == KvLayout::paged) {
    const std::int64_t per_sequence = s.pages_per_sequence(), pages = s.B * per_sequence;
    attnlab::PagedKV cache;
    cache.k_cache = random({pages, s.page_size, s.K, s.H});
    cache.v_cache = random({pages, s.page_size, s.K, s.H});
    // Sequence b owns pages b·P … b·P + P − 1 of the shuffled order: no two sequences share one.
    cache.block_table = ints(shuffled_pages(pages, seed), {s.B, per_sequence});
    cache.seqlens = ints(std::vector<std::int32_t>(std::size_t(s.B), std::int32_t(s.S)), {s.B});
    args_.paged = cache;
  } else {
    args_.k = random({s.B * s.S, s.K, s.H});
    args_.v = random({s.B * s.S, s.K, s.H});
    args_.cu_seqlens_k = offsets(s.S);
  }
  append_.k_new = random({s.B, s.q_len, s.K, s.H});
  append_.v_new = random({s.B, s.q_len, s.K, s.H});
  const std::vector<std::int32_t> before(std::size_t(s.B), std::int32_t(std::max<std::int64_t>(s.S - s.q_len, 0)));
  if (args_.paged) {
    append_.paged = *args_.paged;
    append_.paged->seqlens = ints(before, {s.B});
  } else {
    append_.k_cache = attnlab::TensorView::contiguous(args_.k.data, s.dtype, {s.B, s.S, s.K, s.H}, device);
    append_.v_cache = attnlab::TensorView::contiguous(args_.v.data, s.dtype, {s.B, s.S, s.K, s.H}, device);
    append_.seqlens = ints(before, {s.B});
  }
  args_.o = make(s.dtype, {s.B * s.q_len, s.N, s.H});  // made last: output() reads the last buffer
  if (s.q_len > 1) {
    args_.options.mask.causal = true;
    args_.options.mask.align = attnlab::MaskAlign::bottom_right;
  }
  if (device == attnlab::Device::cuda) gpu::synchronize();  // the fills are done before anything is timed
}

DecodeInputs::~DecodeInputs() = default;

attnlab::AppendKVArgs DecodeInputs::append_args() const { return append_; }

double DecodeInputs::new_row_bytes() const {
  return 2.0 * double(append_.k_new.numel()) * double(attnlab::size_of(shape_.dtype));
}

attnlab::VarlenForwardArgs DecodeInputs::args(const std::string& path) const {
  attnlab::VarlenForwardArgs a = args_;
  a.options.path = path;
  return a;
}

std::vector<float> DecodeInputs::output() const {
  if (device_ == attnlab::Device::cuda) gpu::synchronize();
  const std::vector<std::byte> bytes = buffers_.back()->read();  // o is made last
  return decode(bytes.data(), args_.o.numel(), shape_.dtype);
}

std::optional<std::size_t> free_gpu_bytes() {
#if ATTNLAB_LAB_CUDA
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();  // a failed query stays the "last error"; clear it so later calls start clean
    return std::nullopt;
  }
  return free;
#else
  return std::nullopt;
#endif
}

}  // namespace lab
