// The INT8 layout of Cedar's single-file model (issue 20, docs/spec-readings.md reading 14): a
// matmul weight `X.weight` stored as I8 [its shape] with its block scales in `X.scale`, BF16 (F32
// in files written before session 37, still read), the same shape with the last dim ceil(in / 32)
// (kernels::QuantizeI8: symmetric, per 32 inputs).
// Written by `cedar init --dtype int8` (engine/init.cpp), read by the loader (engine/model_precision.cpp).
#pragma once
#include <string>

namespace cedar {

// "X.weight" -> "X.scale" (any other name: name + ".scale").
inline std::string Int8ScaleName(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
  return weight_name + ".scale";
}

}  // namespace cedar
