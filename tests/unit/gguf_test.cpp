// The GGUF reader on in-memory files: a valid file parses; every truncation and a set of
// corruptions fail with a message naming the field, never crash (run under ASan in CI).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/gguf.h"

using namespace ouro;

namespace {

struct Writer {  // raw writer: these tests need exact byte offsets
  std::vector<uint8_t> b;
  template <typename T> void put(T v) { const uint8_t* p = reinterpret_cast<const uint8_t*>(&v); b.insert(b.end(), p, p + sizeof(T)); }
  void str(const std::string& s) { put<uint64_t>(s.size()); b.insert(b.end(), s.begin(), s.end()); }
};

// A small GGUF v3: three metadata keys (string, u32 array, f32) and two F32 tensors.
std::vector<uint8_t> make_file() {
  Writer w;
  w.put<uint32_t>(0x46554747);
  w.put<uint32_t>(3);
  w.put<uint64_t>(2);  // tensors
  w.put<uint64_t>(3);  // kv
  w.str("general.architecture"); w.put<uint32_t>(8); w.str("llama");
  w.str("a.list"); w.put<uint32_t>(9); w.put<uint32_t>(4); w.put<uint64_t>(3); w.put<uint32_t>(1); w.put<uint32_t>(2); w.put<uint32_t>(3);
  w.str("a.f"); w.put<uint32_t>(6); w.put<float>(1.5f);
  w.str("t0"); w.put<uint32_t>(2); w.put<uint64_t>(4); w.put<uint64_t>(2); w.put<uint32_t>(0); w.put<uint64_t>(0);
  w.str("t1"); w.put<uint32_t>(1); w.put<uint64_t>(8); w.put<uint32_t>(0); w.put<uint64_t>(32);
  while (w.b.size() % 32) w.b.push_back(0);
  for (int i = 0; i < 8 + 8; ++i) w.put<float>((float)i);
  return w.b;
}

}  // namespace

TEST(Gguf, ParsesValidFile) {
  auto b = make_file();
  auto f = GgufFile::parse(b.data(), b.size(), "mem");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ(*(*f)->get_string("general.architecture"), "llama");
  EXPECT_EQ((*f)->find("a.list")->arr.size(), 3u);
  EXPECT_EQ((*f)->find("a.list")->arr[2].u, 3u);
  EXPECT_DOUBLE_EQ(*(*f)->get_float("a.f"), 1.5);
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const GgufTensorInfo* t1 = (*f)->tensor("t1");
  ASSERT_NE(t1, nullptr);
  float v0;
  std::memcpy(&v0, t1->data, 4);
  EXPECT_EQ(v0, 8.0f);
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  auto b = make_file();
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + n);  // exact-size buffer so ASan sees overreads
    auto f = GgufFile::parse(cut.data(), cut.size(), "cut");
    EXPECT_FALSE(f.ok()) << "truncated at " << n << " parsed";
    if (!f.ok()) {
      EXPECT_NE(f.error().message.find("cut"), std::string::npos);
    }
  }
}

TEST(Gguf, CorruptionsAreNamed) {
  struct C { size_t off; std::vector<uint8_t> bytes; const char* expect; };
  const C cases[] = {
      {0, {'X'}, "magic"},
      {4, {1, 0, 0, 0}, "version"},
      {8, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "tensor_count"},
      {16, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}, "metadata_kv_count"},
      {24, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}, "key"},
      {24 + 8 + 20, {77, 0, 0, 0}, "unknown value type"},
  };
  for (const auto& c : cases) {
    auto b = make_file();
    std::memcpy(b.data() + c.off, c.bytes.data(), c.bytes.size());
    auto f = GgufFile::parse(b.data(), b.size(), "bad");
    ASSERT_FALSE(f.ok()) << c.expect;
    EXPECT_NE(f.error().message.find(c.expect), std::string::npos) << f.error().message;
  }
}

// Inputs that once crashed the fuzzer (tests/fuzz/regressions/) must now fail or parse cleanly.
TEST(Gguf, FuzzRegressions) {
  const std::filesystem::path dir = std::filesystem::path(OURO_SOURCE_DIR) / "tests/fuzz/regressions";
  if (!std::filesystem::exists(dir)) return;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() == "README.md") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    (void)GgufFile::parse(b.data(), b.size(), e.path().string());
  }
}
