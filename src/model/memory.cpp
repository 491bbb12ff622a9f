#include "model/memory.h"

#include <cstring>
#include <new>
#include <stdexcept>

namespace ouro {

KvSpec PagedKvCache::full_spec(const KvLayout& layout, const KvSpec& spec) {
  KvSpec f = spec;
  if (f.k.empty()) {
    f.k.assign(layout.n_layer, KvType::kF32);
    f.v.assign(layout.n_layer, KvType::kF32);
  }
  if (layout.k_only) f.v = f.k;
  return f;
}

Status PagedKvCache::check_spec(const KvLayout& layout, const KvSpec& spec) {
  if (!layout.k_only) return Ok{};
  for (size_t l = 0; l < spec.v.size() && l < spec.k.size(); ++l)
    if (spec.v[l] != spec.k[l] && spec.v[l] != KvType::kF32)
      return usage_error("--kv " + spec.describe() + ": this model's attention cache keeps one latent row per position " +
                         "(key and value at once), so it has one type per layer: use --kv TYPE or k=TYPE (layer " +
                         std::to_string(l) + " asks for k=" + kv_type_name(spec.k[l]) + ", v=" +
                         kv_type_name(spec.v[l]) + ")");
  return Ok{};
}

size_t PagedKvCache::bytes_per_token(const KvLayout& layout, const KvSpec& spec) {
  const KvSpec f = full_spec(layout, spec);
  size_t n = 0;
  for (int l = 0; l < layout.n_layer; ++l) {
    n += kv_row_bytes(f.k[l], layout.n_head_kv, layout.head_dim);
    if (!layout.k_only) n += kv_row_bytes(f.v[l], layout.n_head_kv, layout.head_dim);
  }
  return n;
}

PagedKvCache::PagedKvCache(const KvLayout& layout, const KvSpec& spec, int n_blocks, int block_size)
    : layout_(layout), n_blocks_(n_blocks), block_size_(block_size), spec_(full_spec(layout, spec)) {
  if ((int)spec_.k.size() != layout.n_layer || (int)spec_.v.size() != layout.n_layer)
    throw std::invalid_argument("KV spec layers");
  size_t off = 0;
  for (int l = 0; l < layout.n_layer; ++l)
    for (KvType t : {spec_.k[l], spec_.v[l]}) {
      if (layout.k_only && reg_.size() % 2 == 1) {  // V reads the K rows
        reg_.push_back(reg_.back());
        continue;
      }
      Region g;
      g.type = t;
      g.row_bytes = kv_row_bytes(t, layout.n_head_kv, layout.head_dim);
      g.block_bytes = g.row_bytes * block_size_;
      g.offset = off;
      off += (g.block_bytes * n_blocks_ + 63) / 64 * 64;
      reg_.push_back(g);
    }
  if (off == 0) return;  // no attention layers
  buf_ = LazyBuffer(off);
  if (!buf_.ok()) throw std::bad_alloc();
}

KvSide PagedKvCache::side(int layer, bool v, int head) const {
  const Region& g = reg_[2 * layer + v];
  const int hd = layout_.head_dim;
  const int64_t data = (int64_t)layout_.n_head_kv * hd * kv_elem_bytes(g.type);
  return KvSide{buf_.bytes() + g.offset, g.type, (int64_t)g.row_bytes, (int64_t)g.block_bytes,
                (int64_t)head * hd * (int64_t)kv_elem_bytes(g.type), data + 4 * head};
}

RecurrentStateStore::RecurrentStateStore(size_t bytes_per_slot, int n_slots)
    : slot_bytes_(bytes_per_slot), stride_((bytes_per_slot + 63) / 64 * 64), n_slots_(n_slots) {
  if (stride_ == 0) return;
  buf_ = LazyBuffer(stride_ * (size_t)n_slots);
  if (!buf_.ok()) throw std::bad_alloc();
}

void RecurrentStateStore::clear(int i) {
  if (slot_bytes_) std::memset(slot(i), 0, slot_bytes_);
}

}  // namespace ouro
