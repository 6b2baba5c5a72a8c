// Runs a shell command and returns its standard output, for tests that compare against a
// reference run in another process (tools/reference/v41/*.py under /usr/bin/python3).
#pragma once
#include <cstdio>
#include <string>

namespace cedar::testing {

// The command's whole stdout; "" when it cannot be started or exits non-zero (the caller's
// CHECK on the parsed output then fails, with the command's stderr left on the test's stderr).
inline std::string RunCapture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  if (::pclose(p) != 0) out.clear();
  return out;
}

}  // namespace cedar::testing
