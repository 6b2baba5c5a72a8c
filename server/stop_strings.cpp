#include "server/stop_strings.h"

#include <algorithm>

namespace cedar::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) max_len_ = std::max(max_len_, s.size());
}

int StopMatcher::Push(std::string_view bytes, bool special) {
  if (stops_.empty()) return -1;
  if (special) {
    tail_.clear();
    return -1;
  }
  tail_.append(bytes);
  if (tail_.size() > max_len_) tail_.erase(0, tail_.size() - max_len_);
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (std::string_view(tail_).ends_with(stops_[i])) return int(i);
  }
  return -1;
}

std::string StopHoldback::Add(std::string_view text) {
  held_.append(text);
  if (stops_.empty()) return Flush();
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(held_.size(), s.size()); len > keep; --len) {
      if (std::string_view(s).starts_with(std::string_view(held_).substr(held_.size() - len))) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopHoldback::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

std::string StopHoldback::Finish(const std::string& matched) { return StripStop(Flush(), matched); }

std::string StripStop(std::string text, const std::string& matched) {
  if (!matched.empty() && std::string_view(text).ends_with(matched)) text.resize(text.size() - matched.size());
  return text;
}

}  // namespace cedar::server
