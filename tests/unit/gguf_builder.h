// Builds small GGUF v3 files in memory for unit tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ouro_test {

class GgufBuilder {
 public:
  template <typename T>
  void put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void kv_string(const std::string& k, const std::string& v) { str(k); put<uint32_t>(8); str(v); ++n_kv_; }
  void kv_u32(const std::string& k, uint32_t v) { str(k); put<uint32_t>(4); put<uint32_t>(v); ++n_kv_; }
  void kv_f32(const std::string& k, float v) { str(k); put<uint32_t>(6); put<float>(v); ++n_kv_; }
  void kv_bool(const std::string& k, bool v) { str(k); put<uint32_t>(7); put<uint8_t>(v); ++n_kv_; }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    str(k); put<uint32_t>(9); put<uint32_t>(8); put<uint64_t>(v.size());
    for (const auto& s : v) str(s);
    ++n_kv_;
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    str(k); put<uint32_t>(9); put<uint32_t>(5); put<uint64_t>(v.size());
    for (int32_t x : v) put<int32_t>(x);
    ++n_kv_;
  }
  // The whole file: header, the metadata written so far, no tensors.
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto put_out = [&](auto v) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
      out.insert(out.end(), p, p + sizeof(v));
    };
    put_out((uint32_t)0x46554747);
    put_out((uint32_t)3);
    put_out((uint64_t)0);
    put_out((uint64_t)n_kv_);
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

}  // namespace ouro_test
