#include "engine/v41_checkpoint.h"

#include <set>

#include "engine/v41_info.h"

namespace cedar {

namespace {
std::string ShapeText(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
}  // namespace

bool IsV41VisionTensor(const std::string& name) {
  return name.rfind("vision.", 0) == 0 || name.rfind("aligner.", 0) == 0 || name.rfind("image_", 0) == 0;
}

std::vector<std::string> CheckV41Checkpoint(const V41Config& c, const Checkpoint& ck, size_t max_problems) {
  std::vector<std::string> problems;
  auto add = [&](const std::string& p) {
    if (problems.size() < max_problems) problems.push_back(p);
  };
  std::set<std::string> expected;
  for (const V41TensorSpec& t : V41Tensors(c)) {
    const size_t brace = t.name.find("{E}");
    for (int64_t e = 0; e < t.count; ++e) {
      const std::string name = brace == std::string::npos ? t.name : t.name.substr(0, brace) + std::to_string(e) + t.name.substr(brace + 3);
      expected.insert(name);
      if (ck.ShardOf(name).empty()) {
        add(name + ": expected " + std::string(DTypeName(t.dtype)) + " " + ShapeText(t.shape) + ", found no such tensor");
        continue;
      }
      const TensorInfo& got = ck.Get(name);
      if (got.dtype != t.dtype || got.shape != t.shape)
        add(name + ": expected " + DTypeName(t.dtype) + " " + ShapeText(t.shape) + ", found " + DTypeName(got.dtype) + " " + ShapeText(got.shape));
    }
  }
  for (const std::string& name : ck.Names())
    if (!expected.count(name) && !IsV41VisionTensor(name)) add(name + ": expected no such tensor for this config, found one in " + ck.ShardOf(name));
  return problems;
}

}  // namespace cedar
