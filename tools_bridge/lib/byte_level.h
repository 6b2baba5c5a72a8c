// GPT-2's byte-level alphabet (Hugging Face `ByteLevel`): every byte 0..255 is shown as one
// printable Unicode character, so a vocabulary of byte strings can be stored as JSON text.
// Printable Latin-1 bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) stand for themselves; the other
// 68 bytes take U+0100.. in byte order (so the space 0x20 is U+0120 "Ġ", "\n" is U+010A "Ċ").
// Cedar works on raw bytes internally; these maps convert tokenizer.json strings at load time.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cedar::bridge {

// The code point that stands for byte `b`.
char32_t ByteLevelChar(uint8_t b);
// The byte a code point stands for; nullopt for code points outside the alphabet.
std::optional<uint8_t> ByteLevelByte(char32_t c);

// A tokenizer.json vocabulary string (UTF-8 of alphabet characters) -> the raw bytes it stands
// for; nullopt when the string holds a character outside the alphabet (e.g. "<｜User｜>").
std::optional<std::string> ByteLevelDecode(std::string_view token);

}  // namespace cedar::bridge
