// UTF-8 decoding and the Unicode classes the pre-tokenizer needs.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ouro {

enum class CpClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Codepoint {
  uint32_t cp;       // 0xFFFD for an invalid byte
  uint32_t offset;   // byte offset in the text
  uint8_t len;       // bytes taken (1 for an invalid byte)
};

// Decodes UTF-8; each byte that does not start a valid, shortest-form sequence becomes one
// Codepoint{0xFFFD, offset, 1}, so the original bytes can always be recovered from offsets.
std::vector<Codepoint> utf8_decode(std::string_view s);
CpClass cp_class(uint32_t cp);
// Length of the longest prefix of s that is complete, valid UTF-8 up to a possibly incomplete
// trailing sequence (which is excluded); invalid bytes in the middle count as complete.
size_t utf8_complete_prefix(std::string_view s);
// Replaces invalid UTF-8 with U+FFFD (for printing and JSON).
std::string utf8_sanitize(std::string_view s);

}  // namespace ouro
