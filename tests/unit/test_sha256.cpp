// SHA-256 against the published NIST examples (FIPS 180-2 appendix B) and, around the padding
// boundaries (55/56/64 bytes in the last block), against digests computed with Python's hashlib:
//   hashlib.sha256(bytes((i*7+3) % 256 for i in range(n))).hexdigest()
#include "core/sha256.h"

#include <gtest/gtest.h>

namespace ouro {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopq"
                       "rsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = (char)((i * 7 + 3) % 256);
  return s;
}

TEST(Sha256, PaddingBoundariesAgainstHashlib) {
  const std::pair<size_t, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  for (const auto& [n, want] : cases) EXPECT_EQ(sha256_hex(pattern(n)), want) << n << " bytes";
  // UTF-8 text is hashed as its bytes (ledger records hold non-ASCII questions).
  EXPECT_EQ(sha256_hex("h\xc3\xa9llo \xe2\x9c\x93"), "5657cdef8a85a584e0e961e6f8247cf5d3f8ed21496ed6fdbcfd43a761e94245");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  const std::string s = pattern(1000);
  for (size_t split : {0, 1, 55, 63, 64, 65, 500, 999, 1000}) {
    Sha256 h;
    h.update(std::string_view(s).substr(0, split));
    h.update(std::string_view(s).substr(split));
    EXPECT_EQ(h.hex(), sha256_hex(s)) << split;
  }
}

}  // namespace
}  // namespace ouro
