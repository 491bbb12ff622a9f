// The paged KV cache's bookkeeping: fixed-size blocks, a free list, reference counts, and the
// prefix cache (full blocks found again by the hash of all tokens up to and including them).
// Blocks nobody references but whose contents are cached wait in LRU order and are evicted only
// when the free list is empty. Not thread-safe: the scheduler thread owns it.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace ouro {

class KvBlocks {
 public:
  KvBlocks(int n_blocks, int block_size);
  int n_blocks() const { return (int)blocks_.size(); }
  int block_size() const { return block_size_; }
  int used() const { return used_; }                // referenced by at least one sequence
  int cached() const { return (int)lru_.size(); }   // unreferenced, contents kept for reuse
  int available() const { return (int)free_.size() + cached(); }

  // A block with reference count 1: from the free list, else the least recently used cached
  // block (dropped from the prefix cache); -1 when every block is referenced.
  int allocate();
  void retain(int b);
  // Drops one reference; at zero the block goes to the LRU list if cached, else to the free list.
  void release(int b);

  // Chain hash of a full block: depends on every token of the sequence up to the block's end.
  static uint64_t chain_hash(uint64_t prev, const int* tokens, int n);
  // The cached block with this hash and these exact tokens, retained; -1 on a miss.
  int lookup(uint64_t hash, const int* tokens);
  // Records that block b (full, computed) holds these tokens under this hash. A hash already
  // cached keeps its first block.
  void publish(int b, uint64_t hash, const int* tokens);

 private:
  struct Block {
    int refs = 0;
    bool published = false;
    uint64_t hash = 0;
    std::vector<int> tokens;
    std::list<int>::iterator lru;
  };
  void unpublish(int b);
  int block_size_;
  int used_ = 0;
  std::vector<Block> blocks_;
  std::vector<int> free_;
  std::list<int> lru_;  // front: least recently used
  std::unordered_map<uint64_t, int> by_hash_;
};

}  // namespace ouro
