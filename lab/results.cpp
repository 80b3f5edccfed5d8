#include "results.h"

#include <cmath>

#include <nlohmann/json.hpp>

namespace lab {
namespace {

// ordered_json keeps insertion order, so the keys come out in docs/design.md §4's order and rows diff cleanly.
using Json = nlohmann::ordered_json;

Json number_or_null(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

}  // namespace

std::string to_json_line(const ResultRow& r) {
  Json j;
  j["experiment"] = r.experiment;
  j["path"] = r.path;
  j["device"] = r.device;
  j["dtype"] = r.dtype;
  j["B"] = r.B;
  j["T"] = r.T;
  j["S"] = r.S;
  j["N"] = r.N;
  j["K"] = r.K;
  j["Hqk"] = r.Hqk;
  j["Hv"] = r.Hv;
  j["causal"] = r.causal;
  j["window"] = r.window ? Json(*r.window) : Json(nullptr);
  j["ms_median"] = number_or_null(r.ms_median);
  j["ms_min"] = number_or_null(r.ms_min);
  j["ms_max"] = number_or_null(r.ms_max);
  j["tflops"] = number_or_null(r.tflops);
  j["gbps"] = number_or_null(r.gbps);
  j["max_abs_err"] = number_or_null(r.max_abs_err);
  j["ok"] = r.ok;
  j["note"] = r.note;
  if (r.direction) j["direction"] = *r.direction;
  if (r.first_call_ms) j["first_call_ms"] = number_or_null(r.first_call_ms);
  if (r.host_ms) j["host_ms"] = number_or_null(r.host_ms);
  if (r.workspace_bytes) j["workspace_bytes"] = number_or_null(r.workspace_bytes);
  if (r.graph) j["graph"] = *r.graph;
  if (r.softcap) j["softcap"] = *r.softcap;
  // Replace invalid UTF-8 instead of throwing: notes carry library messages verbatim.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace lab
