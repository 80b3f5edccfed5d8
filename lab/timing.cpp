#include "timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gpu.h"

namespace lab {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median_of_sorted(const std::vector<double>& v) {
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void finish(attnlab::Device device) {
  if (device == attnlab::Device::cuda) gpu::synchronize();
}

}  // namespace

Timing measure(attnlab::Device device, const std::function<void(int)>& fn, TimingPlan plan) {
  Timing t;
  const auto first = Clock::now();
  fn(0);
  finish(device);
  t.first_call_ms = ms_since(first);

  // A slow call (long sequences on a naive path) gets fewer repeats: the spread is small next to its length.
  // Judged by a second call: the first one includes plan builds and allocations.
  const auto second = Clock::now();
  fn(0);
  finish(device);
  if (ms_since(second) > 50.0)
    plan = {std::min(plan.warmup, 2), std::min(plan.repeats, 3), std::min(plan.groups, 5), plan.warmup_ms};
  // Warm up for at least `warmup` calls and warmup_ms of them: an idle GPU needs time to reach its clocks.
  int index = 1;
  const auto warm = Clock::now();
  while (index <= plan.warmup || (ms_since(warm) < plan.warmup_ms && index < 1000000)) fn(index++);
  finish(device);

  std::vector<double> per_call, host_per_call;
  for (int g = 0; g < plan.groups; ++g, index += plan.repeats) {
    if (device == attnlab::Device::cuda) {
      const gpu::CallTimes times = gpu::time_calls(fn, index, plan.repeats);
      per_call.push_back(times.device_ms / plan.repeats);
      host_per_call.push_back(times.host_ms / plan.repeats);
    } else {
      const auto start = Clock::now();
      for (int i = 0; i < plan.repeats; ++i) fn(index + i);
      per_call.push_back(ms_since(start) / plan.repeats);
    }
  }
  std::sort(per_call.begin(), per_call.end());
  t.ms_min = per_call.front();
  t.ms_max = per_call.back();
  t.ms_median = median_of_sorted(per_call);
  if (!host_per_call.empty()) {
    std::sort(host_per_call.begin(), host_per_call.end());
    t.host_ms_median = median_of_sorted(host_per_call);
  }
  return t;
}

double attention_flops(std::int64_t B, std::int64_t N, std::int64_t T, std::int64_t S, std::int64_t Hqk,
                       std::int64_t Hv, bool causal, bool backward) {
  double f = 2.0 * double(B) * double(N) * double(T) * double(S) * double(Hqk + Hv);
  if (causal) f /= 2.0;
  return backward ? 2.5 * f : f;
}

}  // namespace lab
