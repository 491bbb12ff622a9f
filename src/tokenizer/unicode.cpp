#include "tokenizer/unicode.h"

#include <algorithm>

namespace ouro {

namespace {
struct CodepointRange { uint32_t lo, hi; };
#include "tokenizer/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodepointRange (&r)[N], uint32_t cp) {
  auto it = std::upper_bound(r, r + N, cp, [](uint32_t v, const CodepointRange& x) { return v < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}

// Decodes one sequence at s[i]; returns its length, or 0 if invalid.
int decode_one(std::string_view s, size_t i, uint32_t* cp) {
  const unsigned char c = s[i];
  if (c < 0x80) { *cp = c; return 1; }
  int len;
  uint32_t v, min;
  if ((c & 0xe0) == 0xc0) { len = 2; v = c & 0x1f; min = 0x80; }
  else if ((c & 0xf0) == 0xe0) { len = 3; v = c & 0x0f; min = 0x800; }
  else if ((c & 0xf8) == 0xf0) { len = 4; v = c & 0x07; min = 0x10000; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (int k = 1; k < len; ++k) {
    const unsigned char cc = s[i + k];
    if ((cc & 0xc0) != 0x80) return 0;
    v = (v << 6) | (cc & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}
}  // namespace

std::vector<Codepoint> utf8_decode(std::string_view s) {
  std::vector<Codepoint> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int len = decode_one(s, i, &cp);
    if (len == 0) { cp = 0xfffd; len = 1; }
    out.push_back({cp, (uint32_t)i, (uint8_t)len});
    i += len;
  }
  return out;
}

CpClass cp_class(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CpClass::kLetter;
    if (cp >= '0' && cp <= '9') return CpClass::kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d)) return CpClass::kSpace;
    return CpClass::kOther;
  }
  if (in_ranges(k_letter_ranges, cp)) return CpClass::kLetter;
  if (in_ranges(k_number_ranges, cp)) return CpClass::kNumber;
  if (in_ranges(k_space_ranges, cp)) return CpClass::kSpace;
  return CpClass::kOther;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the start of a sequence that runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = s[n - back];
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking back
    int need = 1;
    if ((c & 0xe0) == 0xc0) need = 2;
    else if ((c & 0xf0) == 0xe0) need = 3;
    else if ((c & 0xf8) == 0xf0) need = 4;
    if (need > (int)back) {
      // Incomplete only if the bytes so far are a valid prefix.
      bool ok = true;
      for (size_t k = 1; k < back; ++k) ok = ok && ((unsigned char)s[n - back + k] & 0xc0) == 0x80;
      return ok ? n - back : n;
    }
    return n;
  }
  return n;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const auto& c : utf8_decode(s)) {
    if (c.cp == 0xfffd && c.len == 1)
      out += "\xef\xbf\xbd";
    else
      out.append(s.substr(c.offset, c.len));
  }
  return out;
}

}  // namespace ouro
