#include "runtime/kv_blocks.h"

#include <algorithm>

namespace ouro {

KvBlocks::KvBlocks(int n_blocks, int block_size) : block_size_(block_size), blocks_(n_blocks) {
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // hands out 0, 1, 2, ... first
}

int KvBlocks::allocate() {
  int b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    unpublish(b);
  } else {
    return -1;
  }
  blocks_[b].refs = 1;
  ++used_;
  return b;
}

void KvBlocks::retain(int b) {
  Block& k = blocks_[b];
  if (k.refs++ == 0) {  // a cached block comes back into use
    lru_.erase(k.lru);
    ++used_;
  }
}

void KvBlocks::release(int b) {
  Block& k = blocks_[b];
  if (--k.refs > 0) return;
  --used_;
  if (k.published) k.lru = lru_.insert(lru_.end(), b);
  else free_.push_back(b);
}

uint64_t KvBlocks::chain_hash(uint64_t prev, const int* tokens, int n) {
  // FNV-1a over the previous hash and the token ids, then a final mix (splitmix64).
  uint64_t h = 1469598103934665603ull ^ prev;
  for (int i = 0; i < n; ++i) {
    h ^= (uint32_t)tokens[i];
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

int KvBlocks::lookup(uint64_t hash, const int* tokens) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Block& k = blocks_[it->second];
  if (!std::equal(k.tokens.begin(), k.tokens.end(), tokens)) return -1;  // a hash collision
  retain(it->second);
  return it->second;
}

void KvBlocks::publish(int b, uint64_t hash, const int* tokens) {
  Block& k = blocks_[b];
  if (k.published || by_hash_.count(hash)) return;
  k.published = true;
  k.hash = hash;
  k.tokens.assign(tokens, tokens + block_size_);
  by_hash_[hash] = b;
}

void KvBlocks::unpublish(int b) {
  Block& k = blocks_[b];
  if (!k.published) return;
  by_hash_.erase(k.hash);
  k.published = false;
  k.tokens.clear();
}

}  // namespace ouro
