// SHA-256 (FIPS 180-4). The lab's ledger chains records by their hash, so the digest must be the
// standard one: any tool (sha256sum, Python's hashlib) can re-check a ledger independently.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ouro {

// Incremental hasher: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes the digest (the object must not be updated afterwards) and returns 64 lowercase hex digits.
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes hashed so far
};

// 64 lowercase hex digits of SHA-256(s).
std::string sha256_hex(std::string_view s);

}  // namespace ouro
