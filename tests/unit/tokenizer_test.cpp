// The BPE tokenizer and streaming detokenizer on a small in-memory vocabulary.
#include <gtest/gtest.h>

#include "gguf_builder.h"
#include "model/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/unicode.h"

using namespace ouro;

namespace {

// GPT-2 byte-level spelling of a byte.
std::string byte_level(uint8_t b) {
  static std::vector<uint32_t> cp = [] {
    std::vector<uint32_t> m(256);
    int n = 0;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255);
      m[i] = printable ? i : 256 + n++;
    }
    return m;
  }();
  const uint32_t c = cp[b];
  std::string s;
  if (c < 0x80) s += (char)c;
  else { s += (char)(0xc0 | (c >> 6)); s += (char)(0x80 | (c & 0x3f)); }
  return s;
}

struct Vocab {
  std::vector<uint8_t> file;
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
};

// ids 0..255: bytes; 256: "ab"; 257: "abc"; 258: "Ġa" (space + a); 259: <|im_start|> (control)
Vocab make_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_level((uint8_t)b));
  tokens.push_back("ab");
  tokens.push_back("abc");
  tokens.push_back(byte_level(' ') + "a");
  tokens.push_back("<|im_start|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  ouro_test::GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "gpt2");
  b.kv_strings("tokenizer.ggml.tokens", tokens);
  b.kv_i32s("tokenizer.ggml.token_type", types);
  b.kv_strings("tokenizer.ggml.merges", {"a b", "ab c", byte_level(' ') + " a"});
  Vocab v;
  v.file = b.bytes();
  auto f = GgufFile::parse(v.file.data(), v.file.size(), "vocab");
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  v.gguf = std::move(*f);
  auto t = Tokenizer::from_gguf(*v.gguf);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  v.tok = std::move(*t);
  return v;
}

}  // namespace

TEST(Tokenizer, MergesByRank) {
  Vocab v = make_vocab();
  EXPECT_EQ(v.tok->encode("abc"), (std::vector<int>{257}));
  EXPECT_EQ(v.tok->encode("abd"), (std::vector<int>{256, 'd'}));
  // " abc" is one pre-token; "a b" (rank 0) and "ab c" (rank 1) win over "Ġ a" (rank 2).
  EXPECT_EQ(v.tok->encode("x abc"), (std::vector<int>{'x', ' ', 257}));
  EXPECT_EQ(v.tok->encode("x ab"), (std::vector<int>{'x', ' ', 256}));
  EXPECT_EQ(v.tok->encode(" a"), (std::vector<int>{258}));
}

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  Vocab v = make_vocab();
  EXPECT_EQ(v.tok->encode("<|im_start|>ab"), (std::vector<int>{259, 256}));
  auto plain = v.tok->encode("<|im_start|>", false);
  EXPECT_EQ(plain.size(), 12u);
  EXPECT_EQ(v.tok->decode(plain), "<|im_start|>");
}

TEST(Tokenizer, ArbitraryBytesRoundTrip) {
  Vocab v = make_vocab();
  std::string s;
  for (int i = 0; i < 256; ++i) s += (char)(255 - i);
  EXPECT_EQ(v.tok->decode(v.tok->encode(s, false)), s);
}

TEST(Tokenizer, PretokenizerSplitsDigitsAndKeepsSpaceBeforeWords) {
  Vocab v = make_vocab();
  std::vector<std::string> got;
  for (auto p : v.tok->pretokenize("it's  12 ok\n\nyes")) got.emplace_back(p);
  // Digits are split out first, so "  " ends its chunk and stays whole; "\n\n" before a word
  // leaves its last "\n" to stand alone (\s+(?!\S) then \s+).
  EXPECT_EQ(got, (std::vector<std::string>{"it", "'s", "  ", "1", "2", " ok", "\n", "\n", "yes"}));
}

TEST(StreamDecoder, NeverEmitsHalfACharacter) {
  Vocab v = make_vocab();
  StreamDecoder dec(*v.tok);
  const std::string text = "a\xe2\x82\xac" "b\xf0\x9f\x98\x80";  // a € b 😀
  std::string out;
  for (unsigned char c : text) {
    const std::string piece = dec.push(c);  // byte tokens have the byte's id
    for (const auto& cp : utf8_decode(piece)) ASSERT_NE(cp.cp, 0xfffdu) << "emitted part of a character";
    out += piece;
  }
  out += dec.flush();
  EXPECT_EQ(out, text);
  StreamDecoder dec2(*v.tok);
  EXPECT_EQ(dec2.push(0xe2), "");
  EXPECT_EQ(dec2.flush(), "\xef\xbf\xbd");  // an unfinished character becomes U+FFFD at the end
}
