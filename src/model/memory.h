// A model's per-sequence memory, as two separate types (docs/design.md, "The model interface"):
//  - PagedKvCache: attention layers' keys and values, one row per position, in blocks of
//    block_size positions that sequences own through block tables (prefix caching, preemption);
//  - RecurrentStateStore: fixed-size per-sequence slots for recurrent layers (KDA's conv windows
//    and S matrices), whose size does not grow with the sequence.
// A model says how much of each it needs (Model::kv_layout, Model::state_bytes_per_seq); the
// runtime sizes both, and admission and --kv-mem count both.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/lazy_buffer.h"
#include "core/status.h"
#include "kernels/kv_types.h"
#include "kernels/ops.h"

namespace ouro {

// The shape of an attention layer's cache rows: n_layer layers, each position a K row and a V row
// of n_head_kv heads of head_dim values. n_layer 0: the model has no attention memory.
// k_only: one row per position serves as key and as value (MLA's latent row, whose first values
// are also the value the heads decompress); it is stored once, in --kv's K type, and a layer's V
// side reads the K rows.
struct KvLayout {
  int n_layer = 0, n_head_kv = 0, head_dim = 0;
  bool k_only = false;
};

// Paged KV storage: per layer, n_blocks blocks of block_size positions, each position a K row and a
// V row in the layer's K and V types (kernels/kv_types.h; an f32 row is n_head_kv * head_dim
// floats). A sequence's block table maps its position p to row p % block_size of block
// table[p / block_size]. One block of n_ctx positions is a plain cache.
class PagedKvCache {
 public:
  // An empty spec means f32 everywhere. Throws std::bad_alloc.
  PagedKvCache(const KvLayout& layout, const KvSpec& spec, int n_blocks, int block_size);
  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  const KvSpec& spec() const { return spec_; }
  // Layer `layer`'s K (v = false) or V storage, positioned at kv head `head`.
  KvSide side(int layer, bool v, int head) const;
  // The row of position r of block `block` in layer `layer`'s K or V storage.
  uint8_t* row(int layer, bool v, int block, int r) const {
    const Region& g = reg_[2 * layer + v];
    return buf_.bytes() + g.offset + (size_t)block * g.block_bytes + (size_t)r * g.row_bytes;
  }
  // Makes the whole pool resident now (see LazyBuffer::commit).
  void commit() { buf_.commit(); }
  // Bytes of one position (K and V of every layer) and of one block.
  static size_t bytes_per_token(const KvLayout& layout, const KvSpec& spec);
  static size_t bytes_per_block(const KvLayout& layout, const KvSpec& spec, int block_size) {
    return bytes_per_token(layout, spec) * (size_t)block_size;
  }
  // `spec`, or f32 for every layer when it is empty; for a k_only layout V follows K.
  static KvSpec full_spec(const KvLayout& layout, const KvSpec& spec);
  // Whether `spec` can be this layout's (a k_only layout has no V types of its own), with an error
  // naming the flag.
  static Status check_spec(const KvLayout& layout, const KvSpec& spec);

 private:
  struct Region { size_t offset, block_bytes, row_bytes; KvType type; };
  KvLayout layout_;
  int n_blocks_, block_size_;
  KvSpec spec_;
  std::vector<Region> reg_;  // [2 * layer + (0: K, 1: V)]
  LazyBuffer buf_;
};

// Per-sequence recurrent state: n_slots slots of bytes_per_slot bytes each (64-byte aligned), zero
// when made and when cleared. A sequence holds one slot for as long as it runs. bytes_per_slot 0:
// the model has no recurrent layers, and every slot is empty.
class RecurrentStateStore {
 public:
  RecurrentStateStore(size_t bytes_per_slot, int n_slots);  // throws std::bad_alloc
  size_t bytes_per_slot() const { return slot_bytes_; }
  int n_slots() const { return n_slots_; }
  uint8_t* slot(int i) const { return buf_.bytes() + (size_t)i * stride_; }
  void clear(int i);

 private:
  size_t slot_bytes_, stride_;
  int n_slots_;
  LazyBuffer buf_;
};

// What one forward pass reads and writes besides the weights.
struct ModelMemory {
  PagedKvCache& kv;
  RecurrentStateStore& state;
};

}  // namespace ouro
