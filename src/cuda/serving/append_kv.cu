// append_kv on the GPU (include/attnlab/serving.h): one thread block per new row, copying that row's K heads of k
// and of v into the cache at position seqlens[b] + t, in 16-, 8-, 4- or 2-byte units (the widest every row start
// and head stride allows). Lengths, offsets and block tables are on the device, unread by the host: each block
// checks its own row — a position past the cache's capacity or a page outside the cache is skipped, never written
// (docs/serving.md: device lengths are the caller's to keep in range, and no input may make the kernel write
// outside the cache). Ordered on the context's stream; no allocation, no synchronization.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/context_impl.h"
#include "core/error.h"
#include "core/validate_serving.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device.h"

namespace attnlab::cuda {
namespace {

struct AppendParams {
  // New rows: padded (B, T_new, K, H) with row r = b · T_new + t, or packed with cu_new (B + 1).
  const char* k_new;
  const char* v_new;
  std::int64_t new_row_stride_k, new_row_stride_v;    // bytes between consecutive new rows (packed: dim 0)
  std::int64_t new_batch_stride_k, new_batch_stride_v;  // padded: bytes between batches
  std::int64_t new_head_stride_k, new_head_stride_v;
  const std::int32_t* cu_new;  // packed, or null
  int t_new;                   // padded
  int B, K;
  // The cache: contiguous (B, S_max, K, H), or paged (pages, page_size, K, H) with block_table (B, P).
  char* k_cache;
  char* v_cache;
  std::int64_t cache_outer_k, cache_outer_v;  // bytes per batch (contiguous) or per page (paged)
  std::int64_t cache_row_k, cache_row_v;      // bytes per row
  std::int64_t cache_head_k, cache_head_v;
  const std::int32_t* seqlens;  // (B), stride seqlens_stride
  std::int64_t seqlens_stride;
  const std::int32_t* block_table;  // paged, or null
  std::int64_t table_stride_b, table_stride_p;
  std::int64_t capacity, page_size, pages;
  int row_bytes_k, row_bytes_v;  // one head's bytes
  int unit;                      // copy unit in bytes
};

template <class Unit>
__device__ void copy_heads(char* dst, std::int64_t dst_head, const char* src, std::int64_t src_head, int K,
                           int row_bytes) {
  const int units = row_bytes / int(sizeof(Unit));
  for (int i = int(threadIdx.x); i < K * units; i += int(blockDim.x)) {
    const int kh = i / units, u = i % units;
    reinterpret_cast<Unit*>(dst + kh * dst_head)[u] = reinterpret_cast<const Unit*>(src + kh * src_head)[u];
  }
}

template <class Unit>
__global__ void append_kv_kernel(const AppendParams p) {
  const int r = int(blockIdx.x);
  int b, t;
  if (p.cu_new != nullptr) {
    // The sequence whose packed rows hold r: the last b with cu_new[b] ≤ r (offsets are the caller's; a row that
    // lies in no sequence is skipped).
    b = -1;
    for (int i = 0; i < p.B; ++i)
      if (p.cu_new[i] <= r && r < p.cu_new[i + 1]) b = i;
    if (b < 0) return;
    t = r - p.cu_new[b];
  } else {
    b = r / p.t_new, t = r % p.t_new;
  }
  const std::int64_t pos = std::int64_t(p.seqlens[b * p.seqlens_stride]) + t;
  if (pos < 0 || pos >= p.capacity) return;
  std::int64_t outer = b, row = pos;
  if (p.block_table != nullptr) {
    outer = p.block_table[b * p.table_stride_b + (pos / p.page_size) * p.table_stride_p];
    row = pos % p.page_size;
    if (outer < 0 || outer >= p.pages) return;
  }
  const std::int64_t src_k = p.cu_new != nullptr ? r * p.new_row_stride_k : b * p.new_batch_stride_k + t * p.new_row_stride_k;
  const std::int64_t src_v = p.cu_new != nullptr ? r * p.new_row_stride_v : b * p.new_batch_stride_v + t * p.new_row_stride_v;
  copy_heads<Unit>(p.k_cache + outer * p.cache_outer_k + row * p.cache_row_k, p.cache_head_k, p.k_new + src_k,
                   p.new_head_stride_k, p.K, p.row_bytes_k);
  copy_heads<Unit>(p.v_cache + outer * p.cache_outer_v + row * p.cache_row_v, p.cache_head_v, p.v_new + src_v,
                   p.new_head_stride_v, p.K, p.row_bytes_v);
}

// The widest unit dividing every address and stride the copies use.
int copy_unit(std::initializer_list<std::int64_t> values) {
  for (int unit : {16, 8, 4, 2})
    if ([&] {
          for (std::int64_t v : values)
            if (v % unit != 0) return false;
          return true;
        }())
      return unit;
  return 1;
}

}  // namespace

void append_kv_on_device(Context& ctx, const AppendKVArgs& a, const core::AppendLayout& l) {
  const std::int64_t elem = std::int64_t(size_of(l.dtype));
  const TensorView& kc = l.paged ? a.paged->k_cache : a.k_cache;
  const TensorView& vc = l.paged ? a.paged->v_cache : a.v_cache;
  const TensorView& lengths = l.paged ? a.paged->seqlens : a.seqlens;
  const std::int64_t rows = l.packed_new ? a.k_new.shape[0] : a.k_new.shape[0] * a.k_new.shape[1];
  if (rows > INT32_MAX) core::fail(ErrorCode::unsupported, "append_kv: at most 2^31 − 1 new rows per call, got {}", rows);
  AppendParams p{};
  const int d = l.packed_new ? 0 : 1;  // the new rows' row dimension
  p.k_new = static_cast<const char*>(a.k_new.data);
  p.v_new = static_cast<const char*>(a.v_new.data);
  p.new_row_stride_k = a.k_new.strides[d] * elem, p.new_row_stride_v = a.v_new.strides[d] * elem;
  p.new_batch_stride_k = l.packed_new ? 0 : a.k_new.strides[0] * elem;
  p.new_batch_stride_v = l.packed_new ? 0 : a.v_new.strides[0] * elem;
  p.new_head_stride_k = a.k_new.strides[d + 1] * elem, p.new_head_stride_v = a.v_new.strides[d + 1] * elem;
  p.cu_new = l.packed_new ? static_cast<const std::int32_t*>(a.cu_seqlens_new.data) : nullptr;
  p.t_new = l.packed_new ? 0 : int(a.k_new.shape[1]);
  p.B = int(l.B), p.K = int(l.K);
  p.k_cache = static_cast<char*>(kc.data), p.v_cache = static_cast<char*>(vc.data);
  p.cache_outer_k = kc.strides[0] * elem, p.cache_outer_v = vc.strides[0] * elem;
  p.cache_row_k = kc.strides[1] * elem, p.cache_row_v = vc.strides[1] * elem;
  p.cache_head_k = kc.strides[2] * elem, p.cache_head_v = vc.strides[2] * elem;
  p.seqlens = static_cast<const std::int32_t*>(lengths.data);
  p.seqlens_stride = lengths.strides[0];
  if (l.paged) {
    p.block_table = static_cast<const std::int32_t*>(a.paged->block_table.data);
    p.table_stride_b = a.paged->block_table.strides[0], p.table_stride_p = a.paged->block_table.strides[1];
    p.page_size = l.page_size, p.pages = kc.shape[0];
  }
  p.capacity = l.capacity;
  p.row_bytes_k = int(l.Hqk * elem), p.row_bytes_v = int(l.Hv * elem);
  p.unit = copy_unit({reinterpret_cast<std::intptr_t>(p.k_new), reinterpret_cast<std::intptr_t>(p.v_new),
                      reinterpret_cast<std::intptr_t>(p.k_cache), reinterpret_cast<std::intptr_t>(p.v_cache),
                      p.new_row_stride_k, p.new_row_stride_v, p.new_batch_stride_k, p.new_batch_stride_v,
                      p.new_head_stride_k, p.new_head_stride_v, p.cache_outer_k, p.cache_outer_v, p.cache_row_k,
                      p.cache_row_v, p.cache_head_k, p.cache_head_v, p.row_bytes_k, p.row_bytes_v});
  if (rows == 0) return;
  DeviceGuard guard(a.k_new.device_index);
  const auto stream = static_cast<cudaStream_t>(ctx.impl().stream);
  const dim3 grid(static_cast<unsigned>(rows));
  const int threads = 128;
  switch (p.unit) {
    case 16: append_kv_kernel<uint4><<<grid, threads, 0, stream>>>(p); break;
    case 8: append_kv_kernel<uint2><<<grid, threads, 0, stream>>>(p); break;
    case 4: append_kv_kernel<std::uint32_t><<<grid, threads, 0, stream>>>(p); break;
    case 2: append_kv_kernel<std::uint16_t><<<grid, threads, 0, stream>>>(p); break;
    default: append_kv_kernel<std::uint8_t><<<grid, threads, 0, stream>>>(p); break;
  }
  check_launch("append_kv: kernel launch");
}

}  // namespace attnlab::cuda
