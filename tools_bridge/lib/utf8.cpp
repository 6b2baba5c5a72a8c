#include "tools_bridge/lib/utf8.h"

namespace cedar::bridge {
namespace {

// Length of the character a lead byte starts; 0 when the byte cannot start one
// (continuation bytes, C0/C1 which only make overlongs, F5..FF beyond U+10FFFF).
int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` as the second byte. The narrowed ranges exclude overlongs
// (E0, F0), UTF-16 surrogates (ED) and code points above U+10FFFF (F4).
bool ValidSecond(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

void Utf8Assembler::PushByte(uint8_t b, std::string& out) {
  if (size_ > 0) {
    const bool ok =
        size_ == 1 ? ValidSecond(static_cast<uint8_t>(held_[0]), b) : (b >= 0x80 && b <= 0xBF);
    if (ok) {
      held_[size_++] = static_cast<char>(b);
      if (size_ == need_) {
        out.append(held_, size_);
        size_ = 0;
      }
      return;
    }
    // The held bytes are a maximal ill-formed subpart; `b` starts afresh.
    out.append(kReplacementChar);
    size_ = 0;
  }
  const int len = SequenceLength(b);
  if (len == 0) {
    out.append(kReplacementChar);
  } else if (len == 1) {
    out.push_back(static_cast<char>(b));
  } else {
    held_[0] = static_cast<char>(b);
    size_ = 1;
    need_ = len;
  }
}

void Utf8Assembler::Push(std::string_view bytes, std::string& out) {
  for (char c : bytes) PushByte(static_cast<uint8_t>(c), out);
}

void Utf8Assembler::Finish(std::string& out) {
  if (size_ > 0) out.append(kReplacementChar);
  size_ = 0;
}

std::string RepairUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8Assembler assembler;
  assembler.Push(bytes, out);
  assembler.Finish(out);
  return out;
}

}  // namespace cedar::bridge
