// Matching bytes against a compiled JSON schema, and masking a vocabulary's tokens with it (the
// schema is compiled by json_schema_compile.cpp).
#include "runtime/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "tokenizer/bpe.h"

#include "runtime/json_grammar.h"

namespace ouro {

// ---- matching --------------------------------------------------------------------------------

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> g) : g_(std::move(g)), gp_(g_.get()) {
  depth_ = 1;
  st_[0] = Frame{gp_->root, kValue, 0, 0, 0};
}

void JsonMatcher::copy_from(const JsonMatcher& o) {
  gp_ = o.gp_;
  depth_ = o.depth_;
  ws_ = o.ws_;
  std::memcpy(st_, o.st_, sizeof(Frame) * depth_);
}

bool JsonMatcher::feed(std::string_view bytes) {
  for (unsigned char c : bytes)
    if (!feed_byte(c)) return false;
  return true;
}

// Pops a finished value; the frame below learns what finished when it needs to.
bool JsonMatcher::pop() {
  const Frame done = st_[--depth_];
  if (depth_ == 0) return true;
  Frame& p = st_[depth_ - 1];
  if (p.mode == kObjKeyLit) {
    p.mode = kObjColon;
    p.a = gp_->trie[done.a].value;
  } else if (p.mode == kObjKeyStr) {
    p.mode = kObjColon;
  }
  return true;
}

bool JsonMatcher::feed_byte(uint8_t c) {
  const JsonGrammar& g = *gp_;
  for (;;) {
    if (depth_ == 0) return false;  // the document is complete: nothing may follow
    Frame& f = st_[depth_ - 1];
    const Node& n = g.nodes[f.node];
    const bool structural = f.mode != kStr && f.mode != kNum && f.mode != kLit;
    if (structural && is_ws(c)) {
      if (f.mode == kObjKeyLit || f.mode == kObjKeyStr) return false;
      if (ws_ >= kMaxWs) return false;
      ++ws_;
      return true;
    }
    if (structural) ws_ = 0;
    auto push = [&](int node) {
      if (depth_ >= kMaxDepth) return false;
      st_[depth_++] = Frame{node, kValue, 0, 0, 0};
      return true;
    };
    switch (f.mode) {
      case kValue: {
        switch (n.kind) {
          case kAny:
            if (c == '{') f.node = g.any_object;
            else if (c == '[') f.node = g.any_array;
            else if (c == '"') f.node = g.any_string;
            else if (c == '-' || is_digit(c)) f.node = g.any_number;
            else if (c == 't' || c == 'f' || c == 'n') f.node = g.any_literal;
            else return false;
            continue;  // feed c to the chosen kind
          case kUnion: {
            // The first alternative that can start with c (unions are resolved by their first
            // byte, so alternatives that share one take the first).
            int pick = -1;
            for (int a : n.alts) {
              JsonMatcher probe(*this);
              probe.st_[probe.depth_ - 1].node = a;
              if (probe.feed_byte(c)) {
                pick = a;
                break;
              }
            }
            if (pick < 0) return false;
            f.node = pick;
            continue;
          }
          case kObject:
            if (c != '{') return false;
            f.mode = kObjFirst;
            f.a = n.props.empty() ? 0 : -1;
            return true;
          case kArray:
            if (c != '[') return false;
            f.mode = kArrFirst;
            f.a = 0;
            return true;
          case kString:
            if (c != '"') return false;
            f.mode = kStr;
            f.a = 0;
            f.sub = 0;
            f.pend = 0;
            return true;
          case kNumber: case kInteger:
            f.mode = kNum;
            f.sub = kNStart;
            f.a = 0;
            continue;
          case kLiteral:
            f.mode = kLit;
            f.a = n.trie;
            continue;
          case kRef: return false;
        }
        return false;
      }
      case kObjFirst: case kObjKey: {
        if (c == '}') {
          if (f.mode == kObjKey) return false;
          if (!n.props.empty() ? n.first_cost > 1 : false) return false;  // required members remain
          return pop();
        }
        if (c != '"') return false;
        if (n.props.empty()) {
          if (!n.open_map || f.a >= n.max_items) return false;
          f.mode = kObjKeyStr;
          if (!push(g.any_string)) return false;
          continue;
        }
        const int t = n.key_trie[f.a + 1];
        if (g.trie[t].next.empty()) return false;
        f.mode = kObjKeyLit;
        if (!push(f.node)) return false;
        st_[depth_ - 1].mode = kLit;
        st_[depth_ - 1].a = t;
        continue;
      }
      case kObjColon: {
        if (c != ':') return false;
        f.mode = kObjNext;
        if (n.props.empty()) {
          ++f.a;
          return push(n.map_value);
        }
        return push(n.props[f.a].node);
      }
      case kObjNext: {
        if (c == '}') {
          if (!n.props.empty() && n.after_cost[f.a] > 1) return false;
          return pop();
        }
        if (c != ',') return false;
        if (n.props.empty()) {
          if (f.a >= n.max_items) return false;
        } else if (g.trie[n.key_trie[f.a + 1]].next.empty()) {
          return false;
        }
        f.mode = kObjKey;
        return true;
      }
      case kArrFirst: case kArrItem: {
        if (c == ']') {
          if (f.mode == kArrItem || n.min_items > 0) return false;
          return pop();
        }
        if (f.a >= n.max_items) return false;
        f.mode = kArrNext;
        ++f.a;
        if (!push(n.item)) return false;
        continue;
      }
      case kArrNext: {
        if (c == ']') {
          if (f.a < n.min_items) return false;
          return pop();
        }
        if (c != ',' || f.a >= n.max_items) return false;
        f.mode = kArrItem;
        return true;
      }
      case kStr: {
        if (f.pend > 0) {
          if ((c & 0xC0) != 0x80) return false;
          --f.pend;
          return true;
        }
        if (f.sub == 1) {
          if (c == 'u') { f.sub = 2; return true; }
          if (!std::strchr("\"\\/bfnrt", c) || c == 0) return false;
          f.sub = 0;
          return true;
        }
        if (f.sub >= 2) {
          if (!is_hex(c)) return false;
          f.sub = f.sub == 5 ? 0 : f.sub + 1;
          return true;
        }
        if (c == '"') {
          if (f.a < n.min_len) return false;
          return pop();
        }
        if (c < 0x20) return false;
        if (f.a >= n.max_len) return false;
        if (c == '\\') {
          f.sub = 1;
        } else if (c >= 0x80) {
          if (c >= 0xC2 && c <= 0xDF) f.pend = 1;
          else if (c >= 0xE0 && c <= 0xEF) f.pend = 2;
          else if (c >= 0xF0 && c <= 0xF4) f.pend = 3;
          else return false;
        }
        ++f.a;
        return true;
      }
      case kNum: {
        const bool integer = n.kind == kInteger;
        auto one_more_digit = [&f](int cap) {
          if (f.a >= cap) return false;
          ++f.a;
          return true;
        };
        switch (f.sub) {
          case kNStart:
            if (c == '-') { f.sub = kNMinus; return true; }
            [[fallthrough]];
          case kNMinus:
            if (c == '0') { f.sub = kNZero; return true; }
            if (c >= '1' && c <= '9') { f.sub = kNInt; f.a = 1; return true; }
            return false;
          case kNZero: case kNInt:
            if (f.sub == kNInt && is_digit(c)) return one_more_digit(kMaxIntDigits);
            if (!integer && c == '.') { f.sub = kNDot; return true; }
            if (!integer && (c == 'e' || c == 'E')) { f.sub = kNE; return true; }
            break;
          case kNDot:
            if (is_digit(c)) { f.sub = kNFrac; f.a = 1; return true; }
            return false;
          case kNFrac:
            if (is_digit(c)) return one_more_digit(kMaxFracDigits);
            if (c == 'e' || c == 'E') { f.sub = kNE; return true; }
            break;
          case kNE:
            if (c == '+' || c == '-') { f.sub = kNESign; return true; }
            [[fallthrough]];
          case kNESign:
            if (is_digit(c)) { f.sub = kNExp; f.a = 1; return true; }
            return false;
          case kNExp:
            if (is_digit(c)) return one_more_digit(kMaxExpDigits);
            break;
        }
        // The number ended before c: the frame below takes c.
        pop();
        continue;
      }
      case kLit: {
        const TrieNode& t = g.trie[f.a];
        const int nx = t.child(c);
        if (nx >= 0) {
          f.a = nx;
          if (g.trie[nx].next.empty()) return pop();  // nothing can extend it
          return true;
        }
        if (t.value < 0) return false;
        pop();
        continue;
      }
      default:
        return false;
    }
  }
}

bool JsonMatcher::complete() const {
  if (depth_ == 0) return true;
  if (depth_ > 1) return false;
  const Frame& f = st_[0];
  if (f.mode == kNum) return num_complete(f.sub);
  if (f.mode == kLit) return gp_->trie[f.a].value >= 0;
  return false;
}

bool JsonMatcher::string_top(StringTop* out) const {
  if (depth_ == 0) return false;
  const Frame& f = st_[depth_ - 1];
  if (f.mode != kStr || f.sub != 0 || f.pend != 0) return false;
  const Node& n = gp_->nodes[f.node];
  *out = {f.a, n.min_len, n.max_len};
  return true;
}

int JsonMatcher::min_close() const {
  const JsonGrammar& g = *gp_;
  int64_t total = 0;
  for (int i = 0; i < depth_; ++i) {
    const Frame& f = st_[i];
    const Node& n = g.nodes[f.node];
    int64_t c = 0;
    switch (f.mode) {
      case kValue: c = n.min_bytes; break;
      case kObjFirst:
        c = n.props.empty() ? 1 : n.first_cost;
        break;
      case kObjKey:
        c = n.props.empty() ? 2 + 1 + (int64_t)g.nodes[n.map_value].min_bytes + 1 : g.trie[n.key_trie[f.a + 1]].cost;
        break;
      case kObjKeyLit: c = 0; break;  // the key's trie cost covers the rest of the object
      case kObjKeyStr: c = 1 + (int64_t)g.nodes[n.map_value].min_bytes + 1; break;
      case kObjColon:
        c = n.props.empty() ? 1 + (int64_t)g.nodes[n.map_value].min_bytes + 1
                            : 1 + (int64_t)g.nodes[n.props[f.a].node].min_bytes + n.after_cost[f.a];
        break;
      case kObjNext: c = n.props.empty() ? 1 : n.after_cost[f.a]; break;
      case kArrFirst: {
        const int64_t m = g.nodes[n.item].min_bytes;
        c = n.min_items == 0 ? 1 : (int64_t)n.min_items * m + (n.min_items - 1) + 1;
        break;
      }
      case kArrNext: {
        const int64_t m = g.nodes[n.item].min_bytes;
        c = (int64_t)std::max(0, n.min_items - f.a) * (m + 1) + 1;
        break;
      }
      case kArrItem: {
        const int64_t m = g.nodes[n.item].min_bytes;
        c = m + (int64_t)std::max(0, n.min_items - f.a - 1) * (m + 1) + 1;
        break;
      }
      case kStr:
        c = f.pend + (f.sub == 1 ? 1 : f.sub >= 2 ? 6 - f.sub : 0) + std::max(0, n.min_len - f.a) + 1;
        break;
      case kNum: c = num_complete(f.sub) ? 0 : 1; break;
      case kLit: c = g.trie[f.a].cost; break;
    }
    total += c;
  }
  return (int)std::min<int64_t>(total, kInf);
}

// ---- the vocabulary --------------------------------------------------------------------------

namespace {

void trie_add(std::vector<VocabTrie::Node>& nodes, const std::string& b, int id) {
  int cur = 0;
  for (unsigned char c : b) {
    int nx = -1;
    for (const auto& [k, i] : nodes[cur].next)
      if (k == c) { nx = i; break; }
    if (nx < 0) {
      nx = (int)nodes.size();
      nodes[cur].next.push_back({c, nx});
      nodes.emplace_back();
    }
    cur = nx;
  }
  nodes[cur].tokens.push_back(id);
}

// Characters when every byte is string text and UTF-8 sequences are whole; else -1.
int plain_count(const std::string& b) {
  int chars = 0;
  for (size_t i = 0; i < b.size();) {
    const unsigned char c = b[i];
    int len = 1;
    if (c == '"' || c == '\\' || c < 0x20) return -1;
    if (c >= 0x80) {
      if (c >= 0xC2 && c <= 0xDF) len = 2;
      else if (c >= 0xE0 && c <= 0xEF) len = 3;
      else if (c >= 0xF0 && c <= 0xF4) len = 4;
      else return -1;
      if (i + len > b.size()) return -1;
      for (int k = 1; k < len; ++k)
        if (((unsigned char)b[i + k] & 0xC0) != 0x80) return -1;
    }
    i += len;
    ++chars;
  }
  return chars;
}

}  // namespace

VocabTrie::VocabTrie(const Tokenizer& tok) {
  nodes_.emplace_back();
  rest_.emplace_back();
  bytes_.resize(tok.n_vocab());
  plain_.assign(tok.n_vocab(), -1);
  for (int id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_special(id)) continue;
    const std::string& b = tok.token_bytes(id);
    if (b.empty()) continue;
    bytes_[id] = b;
    trie_add(nodes_, b, id);
    plain_[id] = plain_count(b);
    if (plain_[id] < 0) trie_add(rest_, b, id);
  }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const VocabTrie> vocab)
    : m_(std::move(g)), vocab_(std::move(vocab)) {}

void JsonConstraint::walk(const std::vector<VocabTrie::Node>& nodes, int node, int depth, int budget) {
  for (const auto& [c, child] : nodes[node].next) {
    if ((int)scratch_.size() <= depth + 1) scratch_.push_back(m_);
    JsonMatcher& next = scratch_[depth + 1];
    next.copy_from(scratch_[depth]);
    if (!next.feed_byte(c)) continue;
    if (!nodes[child].tokens.empty() && next.min_close() <= budget - 1)
      for (int t : nodes[child].tokens) allowed_[t] = 1;
    if (!nodes[child].next.empty()) walk(nodes, child, depth + 1, budget);
  }
}

int JsonConstraint::mask(float* logits, int n_vocab, int budget, const std::vector<int>& eos_ids) {
  allowed_.assign(n_vocab, 0);
  if (scratch_.empty()) scratch_.push_back(m_);
  scratch_[0].copy_from(m_);
  JsonMatcher::StringTop top;
  if (budget >= 1 && m_.string_top(&top)) {
    // Inside a string: plain tokens only add characters; the rest go through the matcher.
    const int mc = m_.min_close();
    const int owed = std::max(0, top.min_len - top.chars);
    const int nv = std::min(n_vocab, vocab_->n_vocab());
    for (int t = 0; t < nv; ++t) {
      const int k = vocab_->plain_chars(t);
      if (k <= 0 || top.chars + k > top.max_len) continue;
      if (mc - (owed - std::max(0, owed - k)) <= budget - 1) allowed_[t] = 1;
    }
    walk(vocab_->rest(), 0, 0, budget);
  } else if (budget >= 1) {
    walk(vocab_->nodes(), 0, 0, budget);
  }
  if (m_.complete())
    for (int e : eos_ids)
      if (e >= 0 && e < n_vocab) allowed_[e] = 1;
  int n = 0;
  for (int i = 0; i < n_vocab; ++i) {
    if (allowed_[i]) ++n;
    else logits[i] = -std::numeric_limits<float>::infinity();
  }
  return n;
}

bool JsonConstraint::accept(int token) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  return m_.feed(vocab_->bytes(token));
}

}  // namespace ouro
