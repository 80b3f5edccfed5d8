// TMA tensor maps over the caller's Q, K, V and O (tensor_maps.h).
#include "cuda/flash_sm90/tensor_maps.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include <fmt/format.h>

#include "core/error.h"
#include "cuda/flash_sm90/traits.h"  // kConsumerRows, key_tile_rows, swizzle_row_bytes

namespace attnlab::cuda::sm90 {
namespace {

constexpr std::int64_t kMaxStrideBytes = std::int64_t(1) << 40;

struct Named {
  const char* name;
  const TensorView* view;
};

// The strides TMA is given, in bytes, for dimensions sequence, heads, batches (the head dim is contiguous). A
// dimension of extent 1 is never stepped, so its stride is replaced by a valid one (the next-inner extent's span).
std::array<std::uint64_t, 3> byte_strides(const TensorView& t) {
  const std::int64_t bytes = std::int64_t(size_of(t.dtype));
  std::array<std::uint64_t, 3> s{};
  const int dims[3] = {1, 2, 0};  // view dimensions (B, L, H, D): sequence, heads, batches
  std::int64_t span = t.shape[3] * bytes;
  for (int i = 0; i < 3; ++i) {
    const int d = dims[i];
    const std::int64_t stride = t.shape[d] > 1 ? t.strides[d] * bytes : span;
    s[i] = std::uint64_t(stride);
    span = std::max(span, stride * t.shape[d]);
  }
  return s;
}

// The driver's encoder, looked up once per process through the runtime: the library then needs no link-time
// dependency on libcuda (the runtime is static, the driver is found where the GPU machine keeps it).
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Boxes of `row_bytes` (one swizzled row: 64 or 32 elements) × `box_rows` × `box_heads`, in the swizzle of that
// width.
CUtensorMap encode(const char* name, const TensorView& t, int box_rows, int row_bytes, int box_heads = 1) {
  CUtensorMap map;
  const CUtensorMapDataType type =
      t.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint64_t dims[4] = {cuuint64_t(t.shape[3]), cuuint64_t(t.shape[1]), cuuint64_t(t.shape[2]),
                              cuuint64_t(t.shape[0])};
  const std::array<std::uint64_t, 3> s = byte_strides(t);
  const cuuint64_t strides[3] = {s[0], s[1], s[2]};
  const cuuint32_t box[4] = {cuuint32_t(row_bytes / 2), cuuint32_t(box_rows), cuuint32_t(box_heads), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const PFN_cuTensorMapEncodeTiled_v12000 encode_tiled = encoder();
  if (encode_tiled == nullptr)
    core::fail(ErrorCode::device_error, "flash-sm90: the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12+)");
  const CUresult r = encode_tiled(&map, type, 4, t.data, dims, strides, box, element_strides,
                                            CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            row_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    core::fail(ErrorCode::internal, "flash-sm90: the driver refused {}'s TMA map (CUresult {})", name, int(r));
  return map;
}

}  // namespace

std::optional<std::string> tensor_map_rule(const core::Problem& p) {
  const Named views[] = {{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}};
  for (const Named& n : views) {
    const TensorView& t = *n.view;
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0)
      return fmt::format("{}.data must be 16-byte aligned (TMA)", n.name);
    if (t.strides[3] != 1) return fmt::format("{}'s head dimension must be contiguous (TMA)", n.name);
    const std::int64_t bytes = std::int64_t(size_of(t.dtype));
    for (int d = 0; d < 3; ++d) {
      if (t.shape[d] <= 1) continue;
      const std::int64_t stride = t.strides[d] * bytes;
      if (stride % 16 != 0 || stride <= 0 || stride >= kMaxStrideBytes)
        return fmt::format("{}.strides[{}] = {} must be a positive multiple of {} elements below 2^40 bytes (TMA)",
                           n.name, d, t.strides[d], 16 / bytes);
    }
  }
  return std::nullopt;
}

void build_tensor_maps(const core::Problem& p, int version, KernelParams& params) {
  // Boxes: a block's query rows (params.pack_rows: the version's block rows, or its packed heads' positions:
  // query_packing.h), a key tile's rows, a consumer warpgroup's 64 output rows (traits.h). Each map's boxes are one
  // column slice wide, in the instance's swizzle (traits.h, swizzle_row_bytes).
  const int key_rows = key_tile_rows(int(p.dims.Hqk), version);
  const int row_bytes = swizzle_row_bytes(int(p.dims.Hqk));
  params.q = encode("q", p.q, params.pack_rows, row_bytes, params.pack_heads);
  params.k = encode("k", p.k, key_rows, row_bytes);
  params.v = encode("v", p.v, key_rows, row_bytes);
  params.o = encode("o", p.o, kConsumerRows, row_bytes);
}

}  // namespace attnlab::cuda::sm90
