// Holds the engine to golden data written by the independent reference
// (tools/reference/golden.py; format in tools/reference/README.md).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/model.h"

namespace cedar {

struct GoldenReport {
  bool ok = true;
  double worst_logit_rel_error = 0;  // max |engine - golden| / max |golden| over every check
  std::string worst_where;           // which check had it
  int topk_checked = 0;              // index layers compared
  int topk_mismatches = 0;           // entries selected differently outside score ties
  nlohmann::json checks = nlohmann::json::array();  // one object per comparison
};

// Runs every path present in the golden file (full, bounded prefill + teacher-forced decode;
// the Encoder SWA Bounded Replay scenario) and compares. `tol` bounds the relative logit error.
GoldenReport CheckGolden(const Model& m, const std::string& golden_path, double tol = 1e-4);
// The same on any backend (engine/backend.h), e.g. --device cuda.
class Backend;
GoldenReport CheckGolden(const Backend& b, const std::string& golden_path, double tol = 1e-4);

}  // namespace cedar
