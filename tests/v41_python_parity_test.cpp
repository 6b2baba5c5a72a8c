// Bit-for-bit parity with /usr/bin/python3 at test time: NumPy's default_rng (PCG64 seeded by
// SeedSequence) and Generator.integers(dtype=int64) against engine/pcg64.h, and the E4M3 / E2M1
// encoders against exact rational rounding in tools/v41/fp_round.py. Exits 77 (ctest: skipped)
// when python3 or numpy is missing.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "engine/pcg64.h"
#include "kernels/quant_formats.h"
#include "tests/run_capture.h"

using namespace cedar;

namespace {

// The command's stdout as lines (a last line without its newline is dropped); none when it
// fails (RunCapture).
std::vector<std::string> RunLines(const std::string& cmd) {
  std::vector<std::string> lines;
  const std::string out = cedar::testing::RunCapture(cmd);
  for (size_t p = 0, q; (q = out.find('\n', p)) != std::string::npos; p = q + 1) lines.push_back(out.substr(p, q - p));
  return lines;
}

const char* kPython = "/usr/bin/python3";

void SkipWithoutNumpy() {
  const std::string cmd = std::string(kPython) + " -c 'import numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "v41_python_parity_test: %s with numpy not available; skipping\n", kPython);
    std::exit(77);
  }
}

}  // namespace

TEST_CASE("PCG64 and integers(int64) match numpy bit for bit") {
  SkipWithoutNumpy();
  const std::vector<std::string> lines = RunLines(std::string(kPython) + " " + CEDAR_SOURCE_DIR + "/tools/v41/numpy_draws.py");
  REQUIRE(lines.size() > 10);
  int checked_raw = 0, checked_int = 0, checked_engram = 0;
  uint64_t current_seed = ~0ull;
  Pcg64* gen = nullptr;
  Pcg64 holder(0);
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "raw") {
      uint64_t seed;
      in >> seed;
      Pcg64 g(seed);
      uint64_t want;
      while (in >> want) {
        CHECK_MESSAGE(g.Next64() == want, "seed " << seed);
        ++checked_raw;
      }
    } else if (kind == "int") {
      uint64_t seed;
      int64_t low, high;
      int n;
      in >> seed >> low >> high >> n;
      if (seed != current_seed) {  // a new generator per seed; calls on it continue in order
        holder = Pcg64(seed);
        gen = &holder;
        current_seed = seed;
      }
      const std::vector<int64_t> got = gen->IntegersInt64(low, high, n);
      for (int i = 0; i < n; ++i) {
        int64_t want;
        in >> want;
        CHECK_MESSAGE(got[size_t(i)] == want, "seed " << seed << " integers(" << low << ", " << high << ") #" << i);
        ++checked_int;
      }
    } else if (kind == "engram") {
      int layer;
      in >> layer;
      const EngramHashConstants k = ComputeEngramHashConstants({layer}, 4, 8, 16000000, 99092);
      for (int i = 0; i < 4; ++i) {
        int64_t want;
        in >> want;
        CHECK(k.multipliers[0][size_t(i)] == want);
        ++checked_engram;
      }
    }
  }
  CHECK(checked_raw == 7 * 5);
  CHECK(checked_int > 7 * 30);
  CHECK(checked_engram == 8);
  MESSAGE("compared " << checked_raw << " raw draws, " << checked_int << " bounded draws, " << checked_engram << " multipliers");
}

TEST_CASE("E4M3 and E2M1 encoders match exact rational rounding") {
  const std::vector<std::string> lines = RunLines(std::string(kPython) + " " + CEDAR_SOURCE_DIR + "/tools/v41/fp_round.py");
  REQUIRE(lines.size() > 3000);
  int n = 0;
  for (const std::string& line : lines) {
    unsigned bits;
    int c8, c4;
    REQUIRE(std::sscanf(line.c_str(), "%x %d %d", &bits, &c8, &c4) == 3);
    float x;
    std::memcpy(&x, &bits, 4);
    CHECK_MESSAGE(int(kernels::EncodeE4M3(x)) == c8, "x = " << x);
    CHECK_MESSAGE(int(kernels::EncodeE2M1(x)) == c4, "x = " << x);
    ++n;
  }
  MESSAGE("compared " << n << " values");
}
