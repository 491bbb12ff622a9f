#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ouro {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"
constexpr uint64_t kMaxStringLen = 1ull << 30;
constexpr uint64_t kMaxArrayLen = 1ull << 32;
constexpr int kMaxArrayDepth = 4;
constexpr uint32_t kMaxDims = 4;

// A cursor over the file bytes; every read is bounds-checked.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const std::string& file) : p_(p), n_(n), file_(file) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }

  Error fail(const std::string& field, const std::string& what) const {
    return runtime_error(file_ + ": " + field + ": " + what + " (at byte offset " +
                         std::to_string(pos_) + ")");
  }
  template <typename T>
  bool read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool read_string(std::string* out) {
    uint64_t len;
    if (!read(&len)) return false;
    if (len > kMaxStringLen || len > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& file_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

bool read_value(Reader& r, GgufType type, GgufValue* v, const std::string& field, int depth, Error* err) {
  v->type = type;
  auto bad = [&](const std::string& what) { *err = r.fail(field, what); return false; };
  switch (type) {
    case GgufType::kU8: { uint8_t x; if (!r.read(&x)) return bad("truncated u8"); v->u = x; v->i = x; return true; }
    case GgufType::kI8: { int8_t x; if (!r.read(&x)) return bad("truncated i8"); v->i = x; v->u = (uint64_t)x; return true; }
    case GgufType::kU16: { uint16_t x; if (!r.read(&x)) return bad("truncated u16"); v->u = x; v->i = x; return true; }
    case GgufType::kI16: { int16_t x; if (!r.read(&x)) return bad("truncated i16"); v->i = x; v->u = (uint64_t)x; return true; }
    case GgufType::kU32: { uint32_t x; if (!r.read(&x)) return bad("truncated u32"); v->u = x; v->i = x; return true; }
    case GgufType::kI32: { int32_t x; if (!r.read(&x)) return bad("truncated i32"); v->i = x; v->u = (uint64_t)x; return true; }
    case GgufType::kU64: { uint64_t x; if (!r.read(&x)) return bad("truncated u64"); v->u = x; v->i = (int64_t)x; return true; }
    case GgufType::kI64: { int64_t x; if (!r.read(&x)) return bad("truncated i64"); v->i = x; v->u = (uint64_t)x; return true; }
    case GgufType::kF32: { float x; if (!r.read(&x)) return bad("truncated f32"); v->f = x; return true; }
    case GgufType::kF64: { double x; if (!r.read(&x)) return bad("truncated f64"); v->f = x; return true; }
    case GgufType::kBool: {
      uint8_t x; if (!r.read(&x)) return bad("truncated bool");
      if (x > 1) return bad("bool value " + std::to_string(x) + " is neither 0 nor 1");
      v->u = x; v->i = x; return true;
    }
    case GgufType::kString:
      if (!r.read_string(&v->s)) return bad("string length exceeds the file");
      return true;
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) return bad("arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      uint32_t et; uint64_t count;
      if (!r.read(&et)) return bad("truncated array element type");
      if (et > 12) return bad("unknown array element type " + std::to_string(et));
      if (!r.read(&count)) return bad("truncated array length");
      if (count > kMaxArrayLen) return bad("array length " + std::to_string(count) + " is absurd");
      v->elem_type = (GgufType)et;
      // Cheap lower bound on the bytes needed, so a huge count fails before allocating.
      size_t min_elem = scalar_size(v->elem_type);
      if (min_elem == 0) min_elem = (v->elem_type == GgufType::kString) ? 8 : 12;
      if (count > r.remaining() / min_elem) return bad("array of " + std::to_string(count) + " elements exceeds the file");
      v->arr.resize(count);
      for (uint64_t k = 0; k < count; ++k)
        if (!read_value(r, v->elem_type, &v->arr[k], field + "[" + std::to_string(k) + "]", depth + 1, err)) return false;
      return true;
    }
  }
  return bad("unknown value type " + std::to_string((uint32_t)type));
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return (uint32_t)t <= 12 ? names[(uint32_t)t] : "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16: case GgufType::kU32:
    case GgufType::kI32: case GgufType::kU64: case GgufType::kI64: return true;
    default: return false;
  }
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

int64_t GgufTensorInfo::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return runtime_error(path + ": cannot open model file: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return runtime_error(path + ": not a regular file");
  }
  size_t size = (size_t)st.st_size;
  if (size < 8) {
    ::close(fd);
    return runtime_error(path + ": header: file is " + std::to_string(size) + " bytes, too small to be GGUF");
  }
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return runtime_error(path + ": mmap failed: " + std::strerror(errno));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->mapped_ = true;
  Status s = f->parse_all();
  if (!s) return s.error();
  return f;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->base_ = data;
  f->size_ = size;
  Status s = f->parse_all();
  if (!s) return s.error();
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(base_), size_);
}

void GgufFile::release_pages(const void* p, size_t n) const {
  if (!mapped_ || n == 0) return;
  const uintptr_t page = 4096;
  uintptr_t b = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t e = ((uintptr_t)p + n) & ~(page - 1);
  if (e > b) madvise((void*)b, e - b, MADV_DONTNEED);
}

Status GgufFile::parse_all() {
  Reader r(base_, size_, path_);
  uint32_t magic;
  if (!r.read(&magic)) return r.fail("header", "truncated magic");
  if (magic != kMagic) return r.fail("header", "not a GGUF file (bad magic)");
  if (!r.read(&version_)) return r.fail("header.version", "truncated");
  if (version_ != 2 && version_ != 3)
    return r.fail("header.version", "unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  uint64_t n_tensors, n_kv;
  if (!r.read(&n_tensors)) return r.fail("header.tensor_count", "truncated");
  if (!r.read(&n_kv)) return r.fail("header.metadata_kv_count", "truncated");
  // Each kv takes at least 8+4+1 bytes, each tensor info at least 8+4+8+4+8.
  if (n_kv > r.remaining() / 13) return r.fail("header.metadata_kv_count", std::to_string(n_kv) + " exceeds the file");
  if (n_tensors > r.remaining() / 32) return r.fail("header.tensor_count", std::to_string(n_tensors) + " exceeds the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    const std::string field = "metadata[" + std::to_string(k) + "]";
    if (!r.read_string(&key)) return r.fail(field + ".key", "string length exceeds the file");
    uint32_t type;
    if (!r.read(&type)) return r.fail(key, "truncated value type");
    if (type > 12) return r.fail(key, "unknown value type " + std::to_string(type));
    GgufValue v;
    Error err;
    if (!read_value(r, (GgufType)type, &v, key, 0, &err)) return err;
    if (kv_.count(key)) return r.fail(key, "duplicate metadata key");
    kv_.emplace(key, std::move(v));
  }
  if (auto it = kv_.find("general.alignment"); it != kv_.end()) {
    const GgufValue& a = it->second;
    if (!a.is_integer() || a.u == 0 || a.u % 8 != 0 || a.u > (1u << 20))
      return r.fail("general.alignment", "must be a positive multiple of 8 (got " + std::to_string(a.u) + ")");
    alignment_ = a.u;
  }

  tensors_.resize(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo& ti = tensors_[t];
    const std::string field = "tensor_info[" + std::to_string(t) + "]";
    if (!r.read_string(&ti.name)) return r.fail(field + ".name", "string length exceeds the file");
    const std::string tf = "tensor '" + ti.name + "'";
    if (ti.name.size() > 256) return r.fail(tf, "name longer than 256 bytes");
    uint32_t n_dims;
    if (!r.read(&n_dims)) return r.fail(tf + ".n_dims", "truncated");
    if (n_dims == 0 || n_dims > kMaxDims) return r.fail(tf + ".n_dims", std::to_string(n_dims) + " is not in 1..4");
    ti.ne.resize(n_dims);
    uint64_t total = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne;
      if (!r.read(&ne)) return r.fail(tf + ".ne", "truncated");
      if (ne == 0 || ne > (1ull << 40)) return r.fail(tf + ".ne[" + std::to_string(d) + "]", std::to_string(ne) + " is out of range");
      if (total > (1ull << 50) / ne) return r.fail(tf + ".ne", "element count overflows");
      total *= ne;
      ti.ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if (!r.read(&type)) return r.fail(tf + ".type", "truncated");
    const TypeTraits* tt = type_traits((GgmlType)type);
    if (!tt) return r.fail(tf + ".type", "unsupported tensor type " + std::to_string(type) + " (" + ggml_type_name_any(type) + ")");
    ti.type = (GgmlType)type;
    if (ti.ne[0] % tt->block_size != 0)
      return r.fail(tf + ".ne[0]", std::to_string(ti.ne[0]) + " is not a multiple of the block size " +
                                       std::to_string(tt->block_size) + " of " + tt->name);
    if (!r.read(&ti.offset)) return r.fail(tf + ".offset", "truncated");
    if (ti.offset % alignment_ != 0) return r.fail(tf + ".offset", std::to_string(ti.offset) + " is not aligned to " + std::to_string(alignment_));
    ti.nbytes = (uint64_t)(ti.ne[0] / tt->block_size) * tt->block_bytes * (uint64_t)ti.rows();
    if (tensor_index_.count(ti.name)) return r.fail(tf, "duplicate tensor name");
    tensor_index_[ti.name] = t;
  }
  const uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (auto& ti : tensors_) {
    const std::string tf = "tensor '" + ti.name + "'";
    if (data_start > size_ || ti.offset > size_ - data_start || ti.nbytes > size_ - data_start - ti.offset)
      return runtime_error(path_ + ": " + tf + ": data [" + std::to_string(data_start + ti.offset) + ", +" +
                           std::to_string(ti.nbytes) + ") extends past the end of the file (" + std::to_string(size_) +
                           " bytes); the file is truncated or corrupt");
    ti.data = base_ + data_start + ti.offset;
  }
  return Ok{};
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Expected<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return runtime_error(path_ + ": missing metadata key '" + key + "'");
  if (v->type != GgufType::kString) return runtime_error(path_ + ": metadata '" + key + "' is " + gguf_type_name(v->type) + ", expected string");
  return v->s;
}

Expected<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return runtime_error(path_ + ": missing metadata key '" + key + "'");
  if (!v->is_integer() || v->i < 0) return runtime_error(path_ + ": metadata '" + key + "' must be a non-negative integer");
  return v->u;
}

Expected<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return runtime_error(path_ + ": missing metadata key '" + key + "'");
  if (v->is_float()) return v->f;
  if (v->is_integer()) return (double)v->i;
  return runtime_error(path_ + ": metadata '" + key + "' must be a number");
}

Expected<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return runtime_error(path_ + ": missing metadata key '" + key + "'");
  if (v->type != GgufType::kBool) return runtime_error(path_ + ": metadata '" + key + "' must be a bool");
  return v->u != 0;
}

Expected<const GgufTensorInfo*> gguf_tensor(const GgufFile& f, const std::string& name, const std::vector<int64_t>& ne,
                                            bool must_be_f32) {
  const GgufTensorInfo* t = f.tensor(name);
  if (!t) return runtime_error(f.path() + ": missing tensor '" + name + "'");
  if (t->ne != ne) {
    auto shape = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    return runtime_error(f.path() + ": tensor '" + name + "' has shape " + shape(t->ne) + ", expected " + shape(ne));
  }
  if (must_be_f32 && t->type != GgmlType::kF32)
    return runtime_error(f.path() + ": tensor '" + name + "' must be F32, is " + ggml_type_name_any((uint32_t)t->type));
  return t;
}

Expected<uint64_t> gguf_uint_in(const GgufFile& f, const std::string& key, uint64_t lo, uint64_t hi) {
  auto v = f.get_uint(key);
  if (!v) return v.error();
  if (*v < lo || *v > hi)
    return runtime_error(f.path() + ": metadata '" + key + "' = " + std::to_string(*v) + " is out of range [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return *v;
}

}  // namespace ouro
