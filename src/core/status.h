// Errors as values at module boundaries (files, requests, flags); asserts for broken invariants.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ouro {

// Kind decides the CLI exit code: usage errors exit 2, runtime errors exit 1.
enum class ErrorKind { kUsage, kRuntime };

struct Error {
  ErrorKind kind = ErrorKind::kRuntime;
  std::string message;
};

inline Error usage_error(std::string m) { return {ErrorKind::kUsage, std::move(m)}; }
inline Error runtime_error(std::string m) { return {ErrorKind::kRuntime, std::move(m)}; }

template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error e) : v_(std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Ok {};
using Status = Expected<Ok>;

[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "ouro: internal error: %s failed at %s:%d\n", cond, file, line);
  std::abort();
}

}  // namespace ouro

#define OURO_ASSERT(c) ((c) ? (void)0 : ::ouro::assert_fail(#c, __FILE__, __LINE__))
