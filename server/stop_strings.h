// `stop` strings: a turn ends when the generated text ends with one, and the returned text
// leaves it out. StopMatcher watches the raw bytes on the engine thread; StopHoldback delays
// streamed text that might turn out to be the start of a stop string, so streamed and
// non-streamed text agree (both equal the whole text with the matched stop string removed).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace cedar::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Feeds the bytes of one generated token. A special token (special = true) ends the text a
  // stop string can span. Returns the index of the stop string the text now ends with, or -1.
  int Push(std::string_view bytes, bool special);
  bool empty() const { return stops_.empty(); }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string tail_;  // the last max_len_ bytes since the last special token
};

class StopHoldback {
 public:
  explicit StopHoldback(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Takes more text; returns what can be shown now: all but the longest tail that is a prefix
  // of a stop string (stop strings and text are valid UTF-8, so the cut is on a character).
  std::string Add(std::string_view text);
  // Returns everything held (e.g. before a tool call, which ends a run of text).
  std::string Flush();
  // End of the turn: the held text, less `matched` if it ends with it ("" = no stop string).
  std::string Finish(const std::string& matched);

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

// `text` less a trailing `matched` ("" = unchanged).
std::string StripStop(std::string text, const std::string& matched);

}  // namespace cedar::server
