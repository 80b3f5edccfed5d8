#include "serving_gpu_run.h"

#include <gtest/gtest.h>

#include "device_mirror.h"

namespace attnlab_test {

attnlab::Options options_of(const GpuVarlenCase& c, const char* path) {
  attnlab::Options o;
  o.path = path;
  o.softcap = c.softcap;
  o.mask.causal = c.mask == 1 || c.mask == 2;
  o.mask.align = c.mask == 1 ? attnlab::MaskAlign::bottom_right : attnlab::MaskAlign::top_left;
  if (c.mask == 3) o.mask.window_left = 40, o.mask.window_right = 3;
  return o;
}

Batch batch_of(const GpuVarlenCase& c, std::int64_t head_dim, DType dtype, Rng& rng) {
  Batch b;
  b.N = c.N, b.K = c.K, b.Hqk = b.Hv = head_dim, b.dtype = dtype;
  b.q_lens = c.q_lens, b.kv_lens = c.kv_lens, b.page_size = c.page_size, b.with_sinks = c.sinks;
  b.make(rng);
  return b;
}

#if ATTNLAB_WITH_CUDA
cudaStream_t nonblocking() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking);
    return created;
  }();
  return s;
}

bool is_hopper() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

attnlab::VarlenForwardArgs device_args(const Batch& b, const attnlab::Options& o, DeviceMirror& mirror) {
  attnlab::VarlenForwardArgs a = b.args(o);
  a.q = mirror.upload(b.q), a.o = mirror.upload(b.o), a.lse = mirror.upload(b.lse);
  a.cu_seqlens_q = mirror.upload(b.cu_q);
  if (b.page_size > 0) {
    a.paged = attnlab::PagedKV{mirror.upload(b.k_cache), mirror.upload(b.v_cache), mirror.upload(b.block_table),
                               mirror.upload(b.seqlens)};
  } else {
    a.k = mirror.upload(b.k), a.v = mirror.upload(b.v), a.cu_seqlens_k = mirror.upload(b.cu_k);
  }
  if (b.with_sinks) a.sinks = mirror.upload(b.sinks);
  return a;
}

void expect_workspace_refused(Batch& b, const attnlab::Options& o, attnlab::DeviceBuffer workspace,
                              const std::string& phrase, const attnlab::Tuning* tuning, attnlab::Context* ctx) {
  const auto before = b.o.snapshot();
  try {
    run_on_gpu(b, o, false, workspace, tuning, ctx);
    ADD_FAILURE() << "a workspace too small was accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_EQ(e.code(), attnlab::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
  EXPECT_TRUE(b.o.same_bytes(before));
}

attnlab::RunInfo run_on_gpu(Batch& b, const attnlab::Options& o, bool other_stream,
                            std::optional<attnlab::DeviceBuffer> workspace, const attnlab::Tuning* tuning,
                            attnlab::Context* ctx) {
  DeviceMirror mirror;
  attnlab::VarlenForwardArgs a = device_args(b, o, mirror);
  a.workspace = workspace;
  attnlab::Context own;
  attnlab::Context& c = ctx != nullptr ? *ctx : own;
  if (tuning != nullptr) c.set_tuning(*tuning);
  c.set_stream(other_stream ? nonblocking() : nullptr);
  mirror.synchronize();  // the uploads ran on the legacy stream
  attnlab::RunInfo info;
  try {
    info = attnlab::forward(c, a);
  } catch (...) {
    // What the device holds after a refused call comes back too, so that a test can check nothing was written.
    mirror.synchronize();
    mirror.download(b.o);
    mirror.download(b.lse);
    throw;
  }
  if (other_stream) {
    EXPECT_EQ(cudaStreamSynchronize(nonblocking()), cudaSuccess);
  }
  mirror.download(b.o);
  mirror.download(b.lse);
  mirror.synchronize();
  return info;
}
#endif

}  // namespace attnlab_test
