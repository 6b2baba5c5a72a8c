// cedar profile, end to end: the report folder, determinism, empty traces, option errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "profile/profile.h"

namespace cedar::profile {
namespace {

const std::string kData = std::string(CEDAR_SOURCE_DIR) + "/tests/data/profile/";

ProfileOptions Options(const std::string& trace, const std::string& out) {
  ProfileOptions o;
  o.traces = {kData + trace};
  o.preset = "tiny";
  o.cache_ram = 20 * 6144;
  o.sweep_ram = {10 * 6144, 40 * 6144};
  o.units_per_s = 1000;
  o.restore = RestorePolicy::kOptimistic;  // the numbers below are profile_sim_test's known case
  o.out = std::string(CEDAR_BINARY_DIR) + "/" + out;
  o.plots = false;  // hermetic and fast: gnuplot is exercised by the CLI, not by unit tests
  o.progress = 0;
  std::filesystem::remove_all(o.out);
  return o;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("the report folder holds report.json, index.html, plot data and scripts") {
  std::ostringstream log;
  const ProfileOptions o = Options("known.json", "profile_report_test_known");
  const ProfileResult r = RunProfile(o, log);
  const nlohmann::json j = ReadJson(o.out + "/report.json");
  CHECK(j["trace"]["requests"] == 5);
  // profile_sim_test.cpp, "known trace": 544 + 288 + 400 + 320 + 208 (A3 keeps A2's snapshot at
  // 256: the insert makes room for a new snapshot before adding it, so no replay).
  CHECK(j["designs"]["cedar"]["prefill_units"]["total"] == 1760);
  CHECK(j["designs"]["cedar"]["hit_tokens"]["ram"] == 576);
  CHECK(j["designs"]["cedar"]["evictions"]["snapshots_dropped"] == 6);  // 3 (A1) + 2 (A2) + 1 (A3)
  CHECK(j["designs"]["cedar"]["replays"]["encoder_replays_snapshot_evicted"] == 0);
  CHECK(j["designs"]["cedar"]["replays"]["encoder_replays_no_snapshot_stored"] == 1);  // A2 at 192
  CHECK(j["designs"]["decoder-only-no-cache"]["prefill_units"]["total"] == 7744);
  CHECK(j["designs"]["cedar"]["ttft_s"]["max"].get<double>() == doctest::Approx(0.544));
  CHECK(j["cost_model"]["source"] == "--units-per-s");
  CHECK(j["requests"].size() == 5);
  CHECK(j["requests"][4]["cedar"]["replay"] == "none");  // A3 hits A2's snapshot at 256
  CHECK(j["requests"][3]["cedar"]["replay"] == "no-snapshot-stored");
  CHECK(j["designs"]["cedar"]["exact_repeats"] == 0);  // no prompt of known.json repeats a cached one
  CHECK(j["requests"][3]["cedar"]["tail_hit"] == false);
  CHECK(j["cache"]["cedar_decoder_policy"] == "auto");
  CHECK(j["sweep"].size() == 3);
  for (const char* f : {"index.html", "data/timeline.dat", "data/sweep.dat", "data/ttft_cedar.dat",
                        "plots/hit_rate.gp", "plots/compute_saved.gp", "plots/ttft_cdf.gp", "plots/bytes.gp",
                        "plots/sweep.gp"}) {
    CHECK_MESSAGE(std::filesystem::exists(o.out + "/" + f), f);
  }
  std::ifstream html(o.out + "/index.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  CHECK(page.find("Key numbers") != std::string::npos);
  CHECK(page.find("Plots were not drawn") != std::string::npos);
  CHECK(SummaryTable(r.report).find("Cedar") != std::string::npos);
}

TEST_CASE("the same trace twice gives the same report") {
  std::ostringstream log;
  ProfileOptions a = Options("claude_small.json", "profile_report_test_det_a");
  a.traces.push_back(kData + "mooncake_small.jsonl");
  ProfileOptions b = a;
  b.out = std::string(CEDAR_BINARY_DIR) + "/profile_report_test_det_b";
  b.threads = 1;  // and the thread count does not matter either
  nlohmann::json ra = RunProfile(a, log).report;
  nlohmann::json rb = RunProfile(b, log).report;
  ra.erase("run");  // wall times and the command line
  rb.erase("run");
  CHECK(ra == rb);
  CHECK(ra["trace"]["requests"] == 7);
  CHECK(ra["trace"]["sessions"] == 3);
}

TEST_CASE("an empty trace gives an empty report, not a crash") {
  std::ostringstream log;
  const ProfileOptions o = Options("empty.jsonl", "profile_report_test_empty");
  const ProfileResult r = RunProfile(o, log);
  CHECK(r.report["trace"]["requests"] == 0);
  CHECK(r.report["requests"].empty());
  CHECK(r.report["designs"]["cedar"]["hit_rate"] == 0.0);
  CHECK(std::filesystem::exists(o.out + "/index.html"));
  CHECK(r.files.plot_note.find("no requests") != std::string::npos);
}

TEST_CASE("malformed entries are logged and skipped; --strict stops the run") {
  std::ostringstream log;
  ProfileOptions o = Options("malformed.jsonl", "profile_report_test_malformed");
  const ProfileResult r = RunProfile(o, log);
  CHECK(r.report["trace"]["requests"] == 2);
  CHECK(r.report["trace"]["malformed_skipped"] == 5);
  CHECK(log.str().find("malformed.jsonl:3") != std::string::npos);
  o.strict = true;
  CHECK_THROWS_AS(RunProfile(o, log), std::runtime_error);
}

TEST_CASE("option errors and live mode") {
  std::ostringstream log;
  ProfileOptions o = Options("known.json", "profile_report_test_options");
  o.live = true;  // without a driver (the cedar binary gives one; profile_live_test runs it)
  CHECK_THROWS_WITH_AS(RunProfile(o, log), doctest::Contains("needs a driver"), std::invalid_argument);
  o.live = false;
  o.calibrate = true;  // with --units-per-s too
  CHECK_THROWS_AS(RunProfile(o, log), std::invalid_argument);
  o.calibrate = false;
  o.traces.clear();
  CHECK_THROWS_AS(RunProfile(o, log), std::invalid_argument);
}

TEST_CASE("sizes parse with binary units") {
  CHECK(ParseBytes("0") == 0);
  CHECK(ParseBytes("4096") == 4096);
  CHECK(ParseBytes("16G") == (16ull << 30));
  CHECK(ParseBytes("1.5G") == (3ull << 29));
  CHECK(ParseBytes("512M") == (512ull << 20));
  CHECK(ParseBytes("2GiB") == (2ull << 30));
  CHECK(ParseBytes("1T") == (1ull << 40));
  CHECK_THROWS_AS(ParseBytes("big"), std::invalid_argument);
  CHECK_THROWS_AS(ParseBytes("3X"), std::invalid_argument);
  CHECK_THROWS_AS(ParseBytes("-1G"), std::invalid_argument);
  CHECK(ParseBytesList("1G,4G") == std::vector<uint64_t>{1ull << 30, 4ull << 30});
  CHECK(FormatBytes(16ull << 30) == "16G");
}

}  // namespace cedar::profile
