// Incremental UTF-8 assembly for streaming decode: bytes go in one piece at a time, and only
// whole, well-formed characters come out, so a character split across tokens (or across
// pushes) is never emitted half. Ill-formed input becomes U+FFFD, one per "maximal subpart"
// (Unicode §3.9 / WHATWG decoder), so the output is always valid UTF-8 and does not depend on
// how the input was split: Push(a)+Push(b)+Finish() == RepairUtf8(a+b).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace cedar::bridge {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

class Utf8Assembler {
 public:
  // Appends to `out` every character that `bytes` completes; keeps an unfinished tail (at
  // most 3 bytes) for the next call.
  void Push(std::string_view bytes, std::string& out);
  // End of input: an unfinished tail becomes one U+FFFD. The assembler is empty afterwards.
  void Finish(std::string& out);
  // True while an unfinished character is held back.
  bool pending() const { return size_ > 0; }

 private:
  void PushByte(uint8_t b, std::string& out);

  char held_[4] = {};  // the unfinished character so far
  int size_ = 0;       // bytes in held_
  int need_ = 0;       // total length of the character held_ starts
};

// The whole-string form: `bytes` with every ill-formed subpart replaced by U+FFFD.
std::string RepairUtf8(std::string_view bytes);

}  // namespace cedar::bridge
