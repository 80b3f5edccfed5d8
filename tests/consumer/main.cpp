// Consumer of the installed attnlab package: one small forward on the CPU through the C++ API (and, in c_abi.c,
// one through the C ABI), each checked against attention computed directly here. Exit code 0 only when both match.
#include <attnlab/attention.h>
#include <attnlab/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

extern "C" int check_c_abi(void);

namespace {

// Shapes: Q (B, T, N, H), K/V (B, S, KH, H), O (B, T, N, H), LSE (B, N, T); query head n reads KV head n / (N / KH).
constexpr int B = 2, T = 3, S = 5, N = 4, KH = 2, H = 8;

float value_at(int i, int salt) { return std::sin(0.37f * float(i) + 0.11f * float(salt)) * 0.8f; }

// Direct attention in double: o = softmax(scale · q·kᵀ) v, lse = log Σ exp(scale · q·kᵀ).
void reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
               std::vector<double>& o, std::vector<double>& lse) {
  const double scale = 1.0 / std::sqrt(double(H));
  for (int b = 0; b < B; ++b)
    for (int n = 0; n < N; ++n) {
      const int kh = n / (N / KH);
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(S);
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < S; ++j) {
          double dot = 0;
          for (int h = 0; h < H; ++h)
            dot += double(q[((b * T + i) * N + n) * H + h]) * double(k[((b * S + j) * KH + kh) * H + h]);
          s[j] = scale * dot;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < S; ++j) sum += std::exp(s[j] - m);
        for (int h = 0; h < H; ++h) {
          double acc = 0;
          for (int j = 0; j < S; ++j) acc += std::exp(s[j] - m) / sum * double(v[((b * S + j) * KH + kh) * H + h]);
          o[((b * T + i) * N + n) * H + h] = acc;
        }
        lse[(b * N + n) * T + i] = m + std::log(sum);
      }
    }
}

int check_cxx_api() {
  std::vector<float> q(B * T * N * H), k(B * S * KH * H), v(B * S * KH * H), o(B * T * N * H, -7.0f),
      lse(B * N * T, -7.0f);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = value_at(int(i), 1);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = value_at(int(i), 2);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_at(int(i), 3);

  attnlab::Context ctx;
  attnlab::ForwardArgs args;
  args.q = attnlab::TensorView::contiguous(q.data(), attnlab::DType::f32, {B, T, N, H});
  args.k = attnlab::TensorView::contiguous(k.data(), attnlab::DType::f32, {B, S, KH, H});
  args.v = attnlab::TensorView::contiguous(v.data(), attnlab::DType::f32, {B, S, KH, H});
  args.o = attnlab::TensorView::contiguous(o.data(), attnlab::DType::f32, {B, T, N, H});
  args.lse = attnlab::TensorView::contiguous(lse.data(), attnlab::DType::f32, {B, N, T});
  attnlab::RunInfo info;
  try {
    info = attnlab::forward(ctx, args);
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "C++ API: attnlab::forward failed (code %d): %s\n", int(e.code()), e.what());
    return 1;
  }

  std::vector<double> o_ref(o.size()), lse_ref(lse.size());
  reference(q, k, v, o_ref, lse_ref);
  double err_o = 0, err_lse = 0;
  bool ok = true;
  auto compare = [&ok](double got, double want, double& worst) {
    const double d = std::fabs(got - want);
    if (!(d <= 1e-4)) ok = false;  // NaN fails too
    worst = std::max(worst, d);
  };
  for (std::size_t i = 0; i < o.size(); ++i) compare(o[i], o_ref[i], err_o);
  for (std::size_t i = 0; i < lse.size(); ++i) compare(lse[i], lse_ref[i], err_lse);
  std::printf("C++ API: path %s, max |O - ref| = %.3g, max |LSE - ref| = %.3g: %s\n", info.path.c_str(), err_o,
              err_lse, ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  std::printf("attnlab %s\n", ATTNLAB_VERSION_STRING);
  const int cxx = check_cxx_api();
  const int c = check_c_abi();
  return cxx != 0 || c != 0 ? 1 : 0;
}
