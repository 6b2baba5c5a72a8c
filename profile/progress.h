// A one-line progress bar on stderr: "[#####.....]  45%  1500/3297 requests  12.3 s  ETA 15 s".
// Redraws at most ten times a second; prints nothing when disabled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace cedar::profile {

class Progress {
 public:
  Progress(size_t total, bool enabled, std::string what, std::FILE* out = stderr);
  ~Progress() { Done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(size_t done);
  void Done();  // draws the final state and ends the line (idempotent)

  // True when stderr is a terminal.
  static bool StderrIsTty();

 private:
  void Draw(size_t done);

  size_t total_;
  bool enabled_;
  std::string what_;
  std::FILE* out_;
  size_t done_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace cedar::profile
