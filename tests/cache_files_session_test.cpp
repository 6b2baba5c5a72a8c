// A damaged cache file never stops the server: truncated, garbage, or with its B-tree damaged,
// the session manager (what `cedar serve` runs) starts, warns once, keeps the damaged file
// aside, and its turn equals a manager that has no disk tier at all (a fresh computation).
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>

#include "cache/lmdb_check.h"
#include "session/session_manager.h"
#include "tests/cache_files_util.h"
#include "tests/test_models.h"

using namespace cedar;
using namespace cedar::session;
using namespace cedar::cache::testing;
using cedar::test::RandomTokens;

namespace {

std::shared_ptr<const Model> Tiny() { return cedar::test::SharedPresetModel("tiny"); }

TurnResult Turn(SessionManager& sm, const std::vector<int32_t>& prompt, int max_tokens) {
  TurnRequest rq;
  rq.prompt = prompt;
  rq.max_tokens = max_tokens;
  rq.decoder = DecoderPolicy::kExact;
  rq.restore = RestorePolicy::kReplay;
  rq.return_prompt_logits = true;
  return sm.Submit(std::move(rq)).get();
}

}  // namespace

TEST_CASE("a damaged cache file: the manager starts, warns once, serves, and the turn equals one without a disk tier") {
  struct Damage {
    const char* name;
    std::function<void(const std::string& data)> apply;
  };
  const Damage damages[] = {
      {"truncated to half", [](const std::string& d) { std::filesystem::resize_file(d, std::filesystem::file_size(d) / 2); }},
      {"garbage", [](const std::string& d) { FillWithGarbage(d, std::filesystem::file_size(d), 5); }},
      {"B-tree bit flips", [](const std::string& d) { FlipTreeBits(d, 200, 9); }},
  };
  auto m = Tiny();
  const std::vector<int32_t> ctx = RandomTokens(70, 256, 2);
  for (const Damage& damage : damages) {
    const std::string name = damage.name;
    CAPTURE(name);
    const std::string dir = cedar::test::TempDir("cachefiles");
    ManagerOptions opt;
    opt.cache_dir = dir;
    std::vector<int32_t> next = ctx;
    {
      auto sm = SessionManager::Start(m, opt);
      TurnResult r = Turn(*sm, ctx, 6);
      REQUIRE(r.error == "");
      next.insert(next.end(), r.output.begin(), r.output.end());
    }  // shutdown writes the disk tier
    const std::string data = dir + "/data.mdb";
    REQUIRE(cedar::cache::detail::CheckLmdbFile(data).ok());
    damage.apply(data);
    REQUIRE(!cedar::cache::detail::CheckLmdbFile(data).ok());
    const auto tool = RandomTokens(11, 256, 7);
    next.insert(next.end(), tool.begin(), tool.end());

    TurnResult r;
    {
      WarningCapture capture;
      auto sm = SessionManager::Start(m, opt);
      r = Turn(*sm, next, 4);
      REQUIRE(r.error == "");
      CHECK(r.accounting.matched_disk == 0);
      CHECK_MESSAGE(capture.warnings().size() == 1, capture.joined());
      CHECK(FilesStartingWith(dir, "data.mdb.corrupt-").size() == 1);
    }
    auto plain = SessionManager::Start(m, {});  // no disk tier
    TurnResult want = Turn(*plain, next, 4);
    REQUIRE(want.error == "");
    CHECK(r.output == want.output);
    CHECK(r.prompt_logits == want.prompt_logits);
  }
}
