#include "gpu_embed.h"

#if ATTNLAB_WITH_CUDA

#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>

namespace attnlab_test::embed {

std::string path_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

cudaStream_t nonblocking_stream() {
  static const cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }();
  return stream;
}

// ---------------------------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------------------------
DeviceMemory::DeviceMemory(std::size_t bytes) : bytes_(bytes) {
  cuda_ok(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), "cudaMalloc");
}
DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) cudaFree(data_);
}
DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {

// Bytes from the first element of a view to the end of its last one.
std::size_t span_bytes(const HostTensor& t) {
  std::int64_t last = 0;
  for (int d = 0; d < t.rank(); ++d) last += (t.shape()[std::size_t(d)] - 1) * t.strides()[std::size_t(d)];
  return std::size_t(last + 1) * elem_size(t.dtype());
}

}  // namespace

DeviceTensor::DeviceTensor(const HostTensor& like) {
  if (!like.defined()) return;
  memory_ = DeviceMemory(span_bytes(like));
  view_ = like.view();
  view_.data = memory_.data();
  view_.device = Device::cuda;
  view_.device_index = 0;
}

void DeviceTensor::upload(const HostTensor& t, cudaStream_t s) {
  if (view_.data == nullptr) return;
  cuda_ok(cudaMemcpyAsync(memory_.data(), t.data(), memory_.bytes(), cudaMemcpyHostToDevice, s), "upload");
}

void DeviceTensor::poison(cudaStream_t s) {
  if (view_.data == nullptr) return;
  cuda_ok(cudaMemsetAsync(memory_.data(), 0xFF, memory_.bytes(), s), "poison");
}

void DeviceTensor::download(HostTensor& t, cudaStream_t s) {
  if (view_.data == nullptr) return;
  cuda_ok(cudaMemcpyAsync(t.data(), memory_.data(), memory_.bytes(), cudaMemcpyDeviceToHost, s), "download");
  cuda_ok(cudaStreamSynchronize(s), "stream after download");  // pageable: the bytes must be there on return
}

bool still_poisoned(DeviceTensor& d, HostTensor& scratch, cudaStream_t s) {
  scratch.poison();
  const std::vector<std::uint8_t> poison = scratch.snapshot();
  d.download(scratch, s);
  return scratch.same_bytes(poison);
}

DeviceForward::DeviceForward(const Tensors& t)
    : q(t.q), k(t.k), v(t.v), o(t.o), lse(t.lse), q_lens(t.q_lens), kv_lens(t.kv_lens) {}

void DeviceForward::upload_inputs(const Tensors& t, cudaStream_t s) {
  q.upload(t.q, s);
  k.upload(t.k, s);
  v.upload(t.v, s);
  q_lens.upload(t.q_lens, s);
  kv_lens.upload(t.kv_lens, s);
}

void DeviceForward::poison_outputs(cudaStream_t s) {
  o.poison(s);
  lse.poison(s);
}

void DeviceForward::download_outputs(Tensors& t, cudaStream_t s) {
  o.download(t.o, s);
  lse.download(t.lse, s);
}

attnlab::ForwardArgs DeviceForward::args(const Case& c, const Tensors& t, Seqlens lengths) const {
  attnlab::ForwardArgs a = forward_args(c, t);  // options, and views of t's host length buffers
  a.q = q.view();
  a.k = k.view();
  a.v = v.view();
  a.o = o.view();
  a.lse = lse.view();
  if (lengths == Seqlens::device) {
    a.options.q_seqlens = q_lens.view();
    a.options.kv_seqlens = kv_lens.view();
  }
  return a;
}

DeviceGrads::DeviceGrads(const GradTensors& g) : d_o(g.d_o), dq(g.dq), dk(g.dk), dv(g.dv) {}

void DeviceGrads::poison_outputs(cudaStream_t s) {
  dq.poison(s);
  dk.poison(s);
  dv.poison(s);
}

void DeviceGrads::download_outputs(GradTensors& g, cudaStream_t s) {
  dq.download(g.dq, s);
  dk.download(g.dk, s);
  dv.download(g.dv, s);
}

attnlab::BackwardArgs backward_args_for(const attnlab::ForwardArgs& f, const DeviceGrads& g) {
  return backward_args_from(f, g.d_o.view(), g.dq.view(), g.dk.view(), g.dv.view());
}

// ---------------------------------------------------------------------------------------------------------------
// Cases and lengths
// ---------------------------------------------------------------------------------------------------------------
Case embed_case(const std::string& path, std::int64_t B, std::int64_t T, std::int64_t S, std::int64_t N,
                std::int64_t K, std::int64_t H) {
  Case c;
  c.device = Device::cuda;
  c.path = path;
  c.dtype = DType::bf16;
  c.B = B, c.T = T, c.S = S, c.N = N, c.K = K, c.Hqk = H, c.Hv = H;
  return c;
}

Lengths random_lengths(const Case& c, Rng& rng) {
  Lengths l;
  for (std::int64_t b = 0; b < c.B; ++b) {
    l.q.push_back(std::int32_t(rng.integer(1, c.T)));
    l.kv.push_back(std::int32_t(rng.integer(1, c.S)));
  }
  return l;
}

std::vector<Lengths> length_patterns(const Case& c, Rng& rng, int count) {
  std::vector<Lengths> out;
  out.push_back({std::vector<std::int32_t>(std::size_t(c.B), std::int32_t(c.T)),
                 std::vector<std::int32_t>(std::size_t(c.B), std::int32_t(c.S))});
  while (int(out.size()) < count) {
    Lengths l = random_lengths(c, rng);
    if (out.size() == 1) {
      l.q[0] = 0;                       // batch 0: no queries (its rows are all padding)
      l.kv[std::size_t(c.B - 1)] = 0;   // last batch: no keys (every row sees nothing: O = 0, LSE = −inf)
      if (c.B > 2) l.q[1] = std::int32_t(c.T), l.kv[1] = std::int32_t(c.S);  // and one full batch among them
    }
    bool distinct = true;
    for (const Lengths& seen : out) distinct = distinct && (seen.q != l.q || seen.kv != l.kv);
    if (distinct) out.push_back(std::move(l));
  }
  return out;
}

Case with_lengths(Case c, const Lengths& l) {
  c.q_lens = l.q;
  c.kv_lens = l.kv;
  return c;
}

void write_lengths(Tensors& t, const Lengths& l) {
  for (std::size_t b = 0; b < l.q.size(); ++b) t.q_lens.set(std::int64_t(b), l.q[b]);
  for (std::size_t b = 0; b < l.kv.size(); ++b) t.kv_lens.set(std::int64_t(b), l.kv[b]);
}

// ---------------------------------------------------------------------------------------------------------------
// Stream gate, graphs, errors
// ---------------------------------------------------------------------------------------------------------------
StreamGate::StreamGate(cudaStream_t s, int limit_seconds) : stream_(s), limit_seconds_(limit_seconds) {
  cuda_ok(cudaLaunchHostFunc(s, &StreamGate::hold, this), "cudaLaunchHostFunc");
}

StreamGate::~StreamGate() {
  released_ = true;
  cudaStreamSynchronize(stream_);  // the callback must have run before `this` goes
}

void CUDART_CB StreamGate::hold(void* p) {
  auto* gate = static_cast<StreamGate*>(p);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(gate->limit_seconds_);
  while (!gate->released_) {
    if (std::chrono::steady_clock::now() > until) {
      gate->timed_out_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Graph::~Graph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
}

void Graph::launch(cudaStream_t s) const {
  if (exec_ == nullptr) throw std::runtime_error("Graph::launch: nothing was captured");
  cuda_ok(cudaGraphLaunch(exec_, s), "cudaGraphLaunch");
}

void Graph::capture(Graph& into, cudaStream_t s, const std::function<void()>& body) {
  cuda_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    body();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s, &partial);  // may report an invalidated capture: the stream leaves capture mode anyway
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();  // a capture error is not sticky; clear it so the next check sees only new errors
    throw;
  }
  cuda_ok(cudaStreamEndCapture(s, &into.graph_), "cudaStreamEndCapture");
  cuda_ok(cudaGraphInstantiate(&into.exec_, into.graph_, 0), "cudaGraphInstantiate");
}

Refusal refusal_of(const std::function<void()>& body) {
  Refusal r;
  try {
    body();
  } catch (const attnlab::Error& e) {
    r.thrown = true;
    r.code = e.code();
    r.message = e.what();
  }
  return r;
}

}  // namespace attnlab_test::embed

#endif  // ATTNLAB_WITH_CUDA
