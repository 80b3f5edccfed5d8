// Running one case on several paths: random inputs made once, each path's output poisoned before it runs and read
// back as f32, and the codelab's comparisons (max |a − b|, allclose).
//
// Each path runs on its own device (a CPU path on host tensors, a CUDA path on device copies of the same values),
// so a GPU path can be checked against the CPU reference on exactly the same inputs.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <attnlab/attention.h>

#include "case.h"
#include "gpu.h"
#include "tensors.h"

namespace lab {

// One tensor the lab hands to the library: its f32 values (what the lab compares) and the bytes the library reads,
// on the case's device.
struct LabTensor {
  Shape shape;
  attnlab::DType dtype = attnlab::DType::f32;
  attnlab::Device device = attnlab::Device::cpu;
  std::vector<float> values;     // f32, already rounded to dtype
  std::vector<std::byte> host;   // dtype bytes (the storage itself on cpu, the staging copy on cuda)
  gpu::DeviceBuffer device_copy; // the storage on cuda

  attnlab::TensorView view();
  void store();  // encode values into the storage (host bytes, then the GPU)
  void load();   // read the storage back into values
};

// What happened when one path was asked to run the case.
struct PathOutcome {
  std::string requested;  // the name given (may be "auto")
  attnlab::Device device = attnlab::Device::cpu;  // where its tensors were
  std::string ran;        // the path that ran; empty when it did not run
  attnlab::ErrorCode error = attnlab::ErrorCode::ok;
  std::string message;    // the library's reason when it did not run
  std::vector<float> output;  // O as f32
  bool refused() const { return error == attnlab::ErrorCode::unsupported; }
  bool ok() const { return error == attnlab::ErrorCode::ok; }
};

class Runner {
 public:
  // Draws Q, K, V from the case's seed (streams 0, 1, 2, like the codelab's split key). Tensors for a device are
  // made the first time a path of that device needs them.
  explicit Runner(const Case& c);

  const Case& spec() const { return case_; }
  // The device a path's tensors must be on: its own, or the case's for "auto" (and for names the library will
  // reject as unknown).
  attnlab::Device device_of(const std::string& path) const;

  // Why `path` cannot run the case, without running it; nullopt when it can. Invalid arguments (impossible shapes,
  // unknown path names) throw attnlab::Error: they are the user's to fix, not a path's to refuse.
  std::optional<std::string> why_not(const std::string& path);
  // Runs `path` on fresh poisoned output. Refusals and failures are returned, invalid arguments thrown.
  PathOutcome run(const std::string& path) { return run(path, case_.causal); }
  // The same with the causal mask on or off whatever the case says (causal compares both on the same inputs).
  PathOutcome run(const std::string& path, bool causal);

 private:
  struct Tensors {
    LabTensor q, k, v, o;
  };
  Tensors& tensors(attnlab::Device device);
  attnlab::ForwardArgs args(const std::string& path, bool causal);

  Case case_;
  attnlab::Context ctx_;
  std::vector<float> q_values_, k_values_, v_values_;
  std::unique_ptr<Tensors> on_[2];  // indexed by attnlab::Device
};

// max |a − b| over all elements; NaN when either side has a NaN (an unwritten, poisoned output shows up here).
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
// jnp.allclose(a, b, rtol, atol): |a − b| ≤ atol + rtol · |b| everywhere, NaN never close.
bool allclose(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol);

// "cpu-naive: cannot run this forward call: not written yet" -> "not written yet": the library's refusal without
// the prefix that repeats what the table already says.
std::string refusal_reason(const std::string& path, const std::string& message);

}  // namespace lab
