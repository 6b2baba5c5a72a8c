#include "profile/progress.h"

#include <unistd.h>

namespace cedar::profile {

Progress::Progress(size_t total, bool enabled, std::string what, std::FILE* out)
    : total_(total), enabled_(enabled), what_(std::move(what)), out_(out) {
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_ - std::chrono::seconds(1);
}

bool Progress::StderrIsTty() { return isatty(STDERR_FILENO) == 1; }

void Progress::Update(size_t done) {
  done_ = done;
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  Draw(done);
}

void Progress::Done() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  Draw(done_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void Progress::Draw(size_t done) {
  constexpr int kWidth = 30;
  const double frac = total_ ? double(done) / double(total_) : 1.0;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(kWidth, '.');
  for (int i = 0; i < int(frac * kWidth + 1e-9) && i < kWidth; ++i) bar[size_t(i)] = '#';
  std::string eta;
  if (done > 0 && done < total_) eta = "  ETA " + std::to_string(int(elapsed / frac - elapsed + 0.5)) + " s";
  std::fprintf(out_, "\r[%s] %3d%%  %zu/%zu %s  %.1f s%s   ", bar.c_str(), int(frac * 100 + 1e-9), done, total_,
               what_.c_str(), elapsed, eta.c_str());
  std::fflush(out_);
}

}  // namespace cedar::profile
