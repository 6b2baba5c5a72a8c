// The bounded JSON parser (tools_bridge/lib/json_limits.h): depth checked while parsing (the
// parser stops at the first container past the limit), numbers out of range and syntax errors
// in our own words with the path, and previews of values bounded whatever their size.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "tools_bridge/lib/json_limits.h"

namespace cedar::test {
namespace {

using bridge::JsonParseError;
using bridge::ParseJsonBounded;
using nlohmann::json;

std::string Deep(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The process's resident set now and at its peak, in MiB (Linux /proc).
std::pair<double, double> RssMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  double rss = 0, hwm = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stod(line.substr(6)) / 1024;
  }
  return {rss, hwm};
}

TEST_CASE("json limits: depth up to the limit parses, one more is refused where it starts") {
  for (int depth : {1, 2, 63, bridge::kMaxJsonDepth}) {
    const auto r = ParseJsonBounded(Deep(size_t(depth)));
    CHECK_MESSAGE(!r.error, depth);
    CHECK(r.value.is_array());
  }
  const auto r = ParseJsonBounded(Deep(size_t(bridge::kMaxJsonDepth) + 1));
  REQUIRE(r.error);
  CHECK(r.error->kind == JsonParseError::Kind::kTooDeep);
  CHECK(r.value.is_discarded());
  CHECK(r.error->message.find("64") != std::string::npos);
  // A smaller limit applies as given.
  CHECK(ParseJsonBounded("[[[]]]", 3).error == std::nullopt);
  CHECK(ParseJsonBounded("[[[[]]]]", 3).error->kind == JsonParseError::Kind::kTooDeep);
}

TEST_CASE("json limits: a 32 MB body of nested arrays stops at the limit, before any tree is built") {
  // Never closed: the parser must stop at the limit, long before the end.
  const std::string body = "{\"ignored\":" + std::string(32u << 20, '[');
  // Reset the peak (VmHWM) so it measures the parse alone (Linux >= 4.0).
  const bool peak_reset = bool(std::ofstream("/proc/self/clear_refs") << "5");
  const auto [rss0, hwm0] = RssMiB();
  const auto r = ParseJsonBounded(body);
  const auto [rss1, hwm1] = RssMiB();
  REQUIRE(r.error);
  CHECK(r.error->kind == JsonParseError::Kind::kTooDeep);
  CHECK(r.error->top_key == "ignored");
  // The path names the field and the element indices down to the limit.
  CHECK(r.error->path.rfind("ignored[0][0]", 0) == 0);
  std::printf("32 MiB of '[': RSS %.0f -> %.0f MiB, peak %.0f -> %.0f MiB\n", rss0, rss1, hwm0, hwm1);
  if (peak_reset) {
    CHECK(hwm1 - hwm0 < 8);  // no tree, no copy of the body (json::parse took ~1.4 GB here)
  } else {
    MESSAGE("cannot reset VmHWM here; the peak is printed only");
  }
}

TEST_CASE("json limits: numbers out of range name their path, not the library") {
  const auto r = ParseJsonBounded(R"({"model":"m","temperature":1e400})");
  REQUIRE(r.error);
  CHECK(r.error->kind == JsonParseError::Kind::kNumberOutOfRange);
  CHECK(r.error->top_key == "temperature");
  CHECK(r.error->path == "temperature");
  CHECK(r.error->message.find("1e400") != std::string::npos);
  const auto nested = ParseJsonBounded(R"({"tools":[{"a":[0,1,-2e999]}]})");
  REQUIRE(nested.error);
  CHECK(nested.error->top_key == "tools");
  CHECK(nested.error->path == "tools[0].a[2]");
  // Integers past 64 bits are read as doubles (what nlohmann does), finite: not an error.
  CHECK(!ParseJsonBounded("[18446744073709551616]").error);
  CHECK(ParseJsonBounded("[1" + std::string(400, '0') + "]").error->kind == JsonParseError::Kind::kNumberOutOfRange);
}

TEST_CASE("json limits: syntax errors say where and what, in our words") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [)", "end of input"},
      {"{\"a\":\"\xC3\x28\"}", "UTF-8"},
      {std::string("{\"a\":\"x\0y\"}", 11), "control character"},
      {R"({"a":tru})", "unexpected"},
      {R"({} x)", "unexpected"},
      {"", "end of input"},
  };
  for (const auto& [text, words] : cases) {
    const auto r = ParseJsonBounded(text);
    REQUIRE_MESSAGE(r.error, text);
    CHECK(r.error->kind == JsonParseError::Kind::kSyntax);
    CHECK_MESSAGE(r.error->message.find(words) != std::string::npos, r.error->message);
    CHECK(r.error->message.find("json.exception") == std::string::npos);
    CHECK(r.error->message.find("at byte") != std::string::npos);
  }
  CHECK(ParseJsonBounded("{\"a\":\"\xC3\x28\"}").error->top_key == "a");
}

TEST_CASE("json limits: a valid document parses exactly as json::parse does") {
  const std::string text =
      R"({"model":"m","messages":[{"role":"user","content":"h\u00e9\n"}],"x":[1,-2,3.5,1e308,true,null,{}],)"
      R"("big":18446744073709551615,"neg":-9223372036854775808})";
  const auto r = ParseJsonBounded(text);
  REQUIRE(!r.error);
  CHECK(r.value == json::parse(text));
}

TEST_CASE("json limits: previews are short and never recurse past their depth") {
  json deep = json::array();
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});  // built here, not parsed
  const std::string p = bridge::JsonPreview(deep, 60);
  CHECK(p.size() <= 60);
  CHECK(p.find("[...]") != std::string::npos);
  const std::string long_string = bridge::JsonPreview(json(std::string(1 << 20, 'x')), 60);
  CHECK(long_string.size() <= 60);
  CHECK(bridge::JsonPreview(json::array({1, "a"})) == R"([1,"a"])");
  CHECK(bridge::JsonPreview(json::object({{"k", {{"j", 2}}}})) == R"({"k":{"j":2}})");
  // Clip cuts on a character boundary.
  CHECK(bridge::Clip("\xC3\xA9\xC3\xA9", 3) == "\xC3\xA9...");
  CHECK(bridge::Clip("short") == "short");
}

}  // namespace
}  // namespace cedar::test
