#include <gtest/gtest.h>

#include "tokenizer/unicode.h"

using namespace ouro;

TEST(Utf8, DecodeKeepsInvalidBytesOneByOne) {
  const std::string s = "a\xc3\xa9\xff\xe2\x82";  // a, é, invalid, truncated 3-byte sequence
  auto cps = utf8_decode(s);
  ASSERT_EQ(cps.size(), 5u);
  EXPECT_EQ(cps[1].cp, 0xe9u);
  EXPECT_EQ(cps[2].cp, 0xfffdu);
  EXPECT_EQ(cps[2].len, 1);
  EXPECT_EQ(cps[4].offset, 5u);
}

TEST(Utf8, RejectsOverlongAndSurrogates) {
  EXPECT_EQ(utf8_decode("\xc0\xaf").size(), 2u);
  EXPECT_EQ(utf8_decode("\xed\xa0\x80").size(), 3u);
  EXPECT_EQ(utf8_decode("\xf4\x90\x80\x80").size(), 4u);
}

TEST(Utf8, CompletePrefixHoldsBackPartialCharacter) {
  const std::string euro = "\xe2\x82\xac";
  EXPECT_EQ(utf8_complete_prefix("ab" + euro.substr(0, 1)), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab" + euro.substr(0, 2)), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab" + euro), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab\xff"), 3u);       // invalid: not held back
  EXPECT_EQ(utf8_complete_prefix("ab\xe2" "a"), 4u);   // broken sequence: not held back
}

TEST(Utf8, Classes) {
  EXPECT_EQ(cp_class('a'), CpClass::kLetter);
  EXPECT_EQ(cp_class(0x4e2d), CpClass::kLetter);   // 中
  EXPECT_EQ(cp_class(0x0663), CpClass::kNumber);   // Arabic-Indic 3
  EXPECT_EQ(cp_class(0x2163), CpClass::kNumber);   // Roman numeral four (Nl)
  EXPECT_EQ(cp_class(0x3000), CpClass::kSpace);
  EXPECT_EQ(cp_class(0x1f600), CpClass::kOther);   // emoji
}
