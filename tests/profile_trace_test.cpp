// cedar profile: reading traces (both formats, sub-agents, malformed entries, --strict, empty
// files, the real trace sets when present) and turning block ids into tokens.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>

#include "profile/synth.h"
#include "profile/trace.h"

namespace cedar::profile {
namespace {

const std::string kData = std::string(CEDAR_SOURCE_DIR) + "/tests/data/profile/";

Trace Load(const std::string& name, bool strict = false, TraceFormat format = TraceFormat::kAuto) {
  return LoadTraces({kData + name}, LoadOptions{format, strict});
}

bool HasIssue(const Trace& t, const std::string& where_suffix, const std::string& what_part) {
  for (const TraceIssue& is : t.issues) {
    const bool where = is.where.size() >= where_suffix.size() &&
                       is.where.compare(is.where.size() - where_suffix.size(), where_suffix.size(), where_suffix) == 0;
    if (where && is.what.find(what_part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("claude-code traces: requests, sub-agents as concurrent sessions, arrival order") {
  const Trace t = Load("claude_small.json");
  REQUIRE(t.issues.empty());
  REQUIRE(t.formats == std::vector<std::string>{"claude-code"});
  REQUIRE(t.requests.size() == 4);
  // Sub-agent times are relative to the entry's t (2.5): 2.5 and 3.5, interleaved with the parent.
  CHECK(t.requests[0].t == 0.0);
  CHECK(t.requests[1].t == 2.5);
  CHECK(t.requests[2].t == 3.0);
  CHECK(t.requests[3].t == 3.5);
  CHECK(t.requests[0].session == "small");
  CHECK(t.requests[1].session == "small/agent_001");
  CHECK(t.requests[2].session == "small");
  CHECK(t.requests[3].session == "small/agent_001");
  CHECK(t.requests[3].source.find("requests[1].requests[1]") != std::string::npos);
  CHECK(t.requests[2].input_tokens == 200);
  CHECK(t.requests[2].output_tokens == 20);
  CHECK(t.requests[2].block_ids == std::vector<int64_t>{1, 2, 3});
  CHECK(t.requests[2].block_size == 64);
  CHECK(t.requests[0].scope == t.requests[1].scope);  // one id scope per file, sub-agents included
  CHECK(t.requests[0].scope != 0);
}

TEST_CASE("mooncake traces: one request per line, ms timestamps, 512-token blocks, ids global within the file") {
  const Trace t = Load("mooncake_small.jsonl");
  REQUIRE(t.issues.empty());
  REQUIRE(t.formats == std::vector<std::string>{"mooncake"});
  REQUIRE(t.requests.size() == 3);  // the blank line is not a request
  CHECK(t.requests[1].t == doctest::Approx(0.25));
  CHECK(t.requests[2].t == doctest::Approx(1.0));
  CHECK(t.requests[0].block_size == 512);
  CHECK(t.requests[0].scope == 1);  // the file's own scope (LoadTraces numbers files from 1)
  CHECK(t.requests[2].scope == 1);
  CHECK(t.requests[0].input_tokens == 1000);
  CHECK(t.requests[2].source.size() > 2);
  CHECK(t.requests[2].source.substr(t.requests[2].source.size() - 2) == ":4");  // line 4
}

TEST_CASE("--format overrides detection") {
  // A .json file forced to be read as JSONL: its lines are not requests, each is reported.
  const Trace t = Load("claude_small.json", false, TraceFormat::kMooncake);
  CHECK(t.requests.empty());
  CHECK_FALSE(t.issues.empty());
  TraceFormat f;
  CHECK(ParseFormat("claude-code", &f));
  CHECK(f == TraceFormat::kClaudeCode);
  CHECK_FALSE(ParseFormat("csv", &f));
}

TEST_CASE("malformed JSONL lines are reported with their line number and skipped") {
  const Trace t = Load("malformed.jsonl");
  CHECK(t.requests.size() == 2);  // lines 1 and 7
  CHECK(t.issues.size() == 5);
  CHECK(HasIssue(t, "malformed.jsonl:2", "not valid JSON"));
  CHECK(HasIssue(t, "malformed.jsonl:3", "'input_length' is missing"));
  CHECK(HasIssue(t, "malformed.jsonl:4", "shorter than its 3 blocks"));
  CHECK(HasIssue(t, "malformed.jsonl:5", "'hash_ids'[1]"));
  CHECK(HasIssue(t, "malformed.jsonl:6", "not a JSON object"));
}

TEST_CASE("malformed claude-code entries are reported with their request path and skipped") {
  const Trace t = Load("malformed.json");
  CHECK(t.requests.size() == 3);
  CHECK(t.issues.size() == 3);
  CHECK(HasIssue(t, "requests[1]", "'in' is not an integer"));
  CHECK(HasIssue(t, "requests[2].requests[1]", "'t' is missing"));
  CHECK(HasIssue(t, "requests[3]", "not an object"));
}

TEST_CASE("a file that is not valid JSON is reported with its line and skipped") {
  const Trace t = Load("broken.json");
  CHECK(t.requests.empty());
  REQUIRE(t.issues.size() == 1);
  CHECK(t.issues[0].where.find("broken.json:") != std::string::npos);
  CHECK(t.issues[0].what.find("not valid JSON") != std::string::npos);
}

TEST_CASE("--strict stops at the first malformed entry, naming it") {
  try {
    Load("malformed.jsonl", /*strict=*/true);
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("malformed.jsonl:2") != std::string::npos);
  }
  CHECK_THROWS_AS(Load("malformed.json", true), std::runtime_error);
  CHECK_NOTHROW(Load("claude_small.json", true));
}

TEST_CASE("an empty trace has no requests and no issues; a missing path is an error") {
  const Trace t = Load("empty.jsonl");
  CHECK(t.requests.empty());
  CHECK(t.issues.empty());
  CHECK(t.files.size() == 1);
  CHECK_THROWS_AS(Load("no-such-file.json"), std::runtime_error);
}

TEST_CASE("a directory loads every .json and .jsonl below it, each local-scope file in its own id scope") {
  const Trace t = LoadTraces({kData}, LoadOptions{});
  CHECK(t.files.size() == 7);
  std::set<uint32_t> scopes;
  for (const TraceRequest& r : t.requests) {
    if (r.session == "small" || r.session == "known") scopes.insert(r.scope);
  }
  CHECK(scopes.size() == 2);
  for (size_t i = 1; i < t.requests.size(); ++i) CHECK(t.requests[i - 1].t <= t.requests[i].t);
}

TEST_CASE("tokens: equal block ids give equal tokens, lengths are exact, outputs are unique") {
  const Trace t = Load("claude_small.json");
  const TokenSynth synth(0, 512);
  std::vector<int32_t> a, b, out_a, out_b;
  synth.Prompt(t.requests[0], &a);  // blocks 1, 2 + 2 tail tokens
  synth.Prompt(t.requests[2], &b);  // blocks 1, 2, 3 + 8 tail tokens
  REQUIRE(a.size() == 130);
  REQUIRE(b.size() == 200);
  CHECK(std::equal(a.begin(), a.begin() + 128, b.begin()));
  CHECK_FALSE(std::equal(a.begin() + 128, a.end(), b.begin() + 128));  // the tail is the request's own
  for (int32_t x : b) CHECK((x >= 0 && x < 512));
  synth.Output(t.requests[0], &out_a);
  synth.Output(t.requests[2], &out_b);
  CHECK(out_a.size() == 10);
  CHECK(out_b.size() == 20);
  CHECK_FALSE(std::equal(out_a.begin(), out_a.end(), out_b.begin()));
  // Deterministic: the same request gives the same tokens; another seed gives others.
  std::vector<int32_t> again;
  synth.Prompt(t.requests[2], &again);
  CHECK(again == b);
  TokenSynth(1, 512).Prompt(t.requests[2], &again);
  CHECK(again != b);
  // A block cut short (mooncake: 700 tokens over blocks 0 and 2) is the first part of the block.
  const Trace m = Load("mooncake_small.jsonl");
  std::vector<int32_t> p0, p1, full;
  synth.Prompt(m.requests[0], &p0);
  synth.Prompt(m.requests[1], &p1);
  REQUIRE(p1.size() == 700);
  CHECK(std::equal(p0.begin(), p0.begin() + 512, p1.begin()));  // block 0 shared
  synth.AppendBlock(m.requests[1].scope, 2, 512, &full);
  CHECK(std::equal(p1.begin() + 512, p1.end(), full.begin()));
}

TEST_CASE("the first file of each real trace set parses cleanly (skipped when absent)") {
  const std::string root = std::string(CEDAR_SOURCE_DIR) + "/../shared/traces/";
  const std::string cc = root + "claude-code/trace_0001.json";
  const std::string mc = root + "mooncake/synthetic_trace.jsonl";
  if (!std::filesystem::exists(cc) || !std::filesystem::exists(mc)) {
    MESSAGE("shared traces not found under " << root << ": skipped");
    return;
  }
  const Trace c = LoadTraces({cc}, LoadOptions{TraceFormat::kAuto, true});
  CHECK(c.formats == std::vector<std::string>{"claude-code"});
  CHECK(c.requests.size() == 41);
  const Trace m = LoadTraces({mc}, LoadOptions{TraceFormat::kAuto, true});
  CHECK(m.formats == std::vector<std::string>{"mooncake"});
  CHECK(m.requests.size() == 3993);
  const TokenSynth synth(0, 129280);
  std::vector<int32_t> p;
  for (const Trace* t : {&c, &m}) {
    for (size_t i = 0; i < t->requests.size(); i += 97) {
      synth.Prompt(t->requests[i], &p);
      CHECK(int64_t(p.size()) == t->requests[i].input_tokens);
    }
  }
}

}  // namespace cedar::profile
