// GGUF reader (versions 2 and 3): mmap, metadata of every value type, tensor infos, alignment.
// Every offset, count, string length and tensor extent is checked against the file; a bad file
// yields an Error naming the file and the field, never an out-of-bounds read.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/types.h"

namespace ouro {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars: integers widen to int64/uint64, floats to double.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  // Arrays: element type and elements.
  GgufType elem_type = GgufType::kU8;
  std::vector<GgufValue> arr;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] fastest-varying (a row)
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;      // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping
  int64_t n_elements() const;
  int64_t rows() const;  // product of ne[1..]
};

class GgufFile {
 public:
  static Expected<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses an in-memory buffer (the fuzzer's entry point). `name` is used in messages.
  static Expected<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size, const std::string& name);
  ~GgufFile();

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }

  const GgufValue* find(const std::string& key) const;
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(const std::string& name) const;

  // Typed getters that name the key and file on error.
  Expected<std::string> get_string(const std::string& key) const;
  Expected<uint64_t> get_uint(const std::string& key) const;
  Expected<double> get_float(const std::string& key) const;
  Expected<bool> get_bool(const std::string& key) const;

  // Tells the kernel that the pages of [p, p+n) may be dropped from memory (they stay readable).
  void release_pages(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  Status parse_all();
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// A model loader's checks, naming the file and the tensor or key on error:
// the tensor `name` with shape `ne` (ne order), and F32 when must_be_f32 ...
Expected<const GgufTensorInfo*> gguf_tensor(const GgufFile& f, const std::string& name, const std::vector<int64_t>& ne,
                                            bool must_be_f32 = false);
// ... and the unsigned integer `key` within [lo, hi].
Expected<uint64_t> gguf_uint_in(const GgufFile& f, const std::string& key, uint64_t lo, uint64_t hi);

}  // namespace ouro
