#include "core/lazy_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace ouro {

LazyBuffer::LazyBuffer(size_t bytes) : n_(bytes) {
  if (bytes == 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { n_ = 0; return; }
  p_ = p;
}

void LazyBuffer::commit() {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  auto* b = static_cast<volatile char*>(p_);
  for (size_t i = 0; i < n_; i += page) b[i] = 0;
}

LazyBuffer::~LazyBuffer() {
  if (p_) munmap(p_, n_);
}

LazyBuffer::LazyBuffer(LazyBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}

LazyBuffer& LazyBuffer::operator=(LazyBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) munmap(p_, n_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

}  // namespace ouro
