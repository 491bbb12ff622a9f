// Large zero-initialised buffers from anonymous mmap: pages cost memory only once touched, so a
// KV cache sized for the whole context does not inflate RSS until it is used.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ouro {

class LazyBuffer {
 public:
  LazyBuffer() = default;
  explicit LazyBuffer(size_t bytes);
  ~LazyBuffer();
  LazyBuffer(LazyBuffer&& o) noexcept;
  LazyBuffer& operator=(LazyBuffer&& o) noexcept;
  LazyBuffer(const LazyBuffer&) = delete;
  LazyBuffer& operator=(const LazyBuffer&) = delete;
  bool ok() const { return p_ != nullptr; }
  float* f32() const { return static_cast<float*>(p_); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(p_); }
  size_t size() const { return n_; }
  // Touches every page now, so the memory is resident from the start (a server's KV pool: its RSS
  // then stays flat instead of creeping up as blocks are used for the first time).
  void commit();

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace ouro
