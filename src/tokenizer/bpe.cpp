#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "model/gguf.h"
#include "tokenizer/unicode.h"

namespace ouro {

namespace {

// GPT-2's reversible byte -> printable code point map.
struct ByteMap {
  uint32_t to_cp[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
      to_byte[to_cp[b]] = (uint8_t)b;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

constexpr int kTypeControl = 3, kTypeUserDefined = 4;

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return model.error();
  if (*model != "gpt2")
    return runtime_error(f.path() + ": tokenizer.ggml.model '" + *model + "' is unsupported (supported: gpt2 byte-level BPE)");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->elem_type != GgufType::kString || tokens->arr.empty())
    return runtime_error(f.path() + ": tokenizer.ggml.tokens must be a non-empty string array");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  if (types && (types->type != GgufType::kArray || !(types->elem_type == GgufType::kI32 || types->elem_type == GgufType::kU32) ||
                types->arr.size() != tokens->arr.size()))
    return runtime_error(f.path() + ": tokenizer.ggml.token_type must be an integer array as long as the vocabulary");
  const GgufValue* merges = f.find("tokenizer.ggml.merges");
  if (!merges || merges->type != GgufType::kArray || merges->elem_type != GgufType::kString)
    return runtime_error(f.path() + ": tokenizer.ggml.merges must be a string array");

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const ByteMap& bm = byte_map();
  const size_t n = tokens->arr.size();
  t->bytes_.resize(n);
  t->special_.assign(n, false);
  std::fill(std::begin(t->byte_token_), std::end(t->byte_token_), -1);
  for (size_t id = 0; id < n; ++id) {
    const std::string& s = tokens->arr[id].s;
    const int type = types ? (int)types->arr[id].i : 1;
    if (type == kTypeControl || type == kTypeUserDefined) {
      t->special_[id] = true;
      t->bytes_[id] = s;
      if (!s.empty()) t->specials_.push_back({s, (int)id});
      continue;
    }
    std::string raw;
    bool ok = true;
    for (const auto& c : utf8_decode(s)) {
      auto it = bm.to_byte.find(c.cp);
      if (it == bm.to_byte.end() || (c.cp == 0xfffd && c.len == 1)) { ok = false; break; }
      raw += (char)it->second;
    }
    if (!ok) raw = s;  // not byte-level spelled: keep the text as is
    t->bytes_[id] = raw;
    t->byte_level_to_id_.emplace(s, (int)id);
    if (raw.size() == 1 && ok && t->byte_token_[(uint8_t)raw[0]] < 0) t->byte_token_[(uint8_t)raw[0]] = (int)id;
  }
  // Some vocabularies lack a few byte tokens (SmolLM2 lacks 21): such bytes are dropped when
  // encoding, as Hugging Face tokenizers and llama.cpp do.
  std::sort(t->specials_.begin(), t->specials_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  int rank = 0;
  for (const auto& mv : merges->arr) {
    const std::string& m = mv.s;
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) return runtime_error(f.path() + ": tokenizer.ggml.merges[" + std::to_string(rank) + "] has no space");
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    auto ia = t->byte_level_to_id_.find(a), ib = t->byte_level_to_id_.find(b), ic = t->byte_level_to_id_.find(a + b);
    if (ia != t->byte_level_to_id_.end() && ib != t->byte_level_to_id_.end() && ic != t->byte_level_to_id_.end()) {
      const uint64_t key = ((uint64_t)(uint32_t)ia->second << 32) | (uint32_t)ib->second;
      t->merges_.emplace(key, std::make_pair(rank, ic->second));
    }
    ++rank;
  }
  auto id_key = [&](const char* key, int* dst) -> Status {
    if (const GgufValue* v = f.find(key)) {
      if (!v->is_integer() || v->i < 0 || v->u >= n) return runtime_error(f.path() + ": " + key + " is out of range");
      *dst = (int)v->u;
    }
    return Ok{};
  };
  if (Status s = id_key("tokenizer.ggml.bos_token_id", &t->bos_); !s) return s.error();
  if (Status s = id_key("tokenizer.ggml.eos_token_id", &t->eos_); !s) return s.error();
  if (const GgufValue* v = f.find("tokenizer.ggml.add_bos_token"); v && v->type == GgufType::kBool) t->add_bos_ = v->u != 0;
  return t;
}

int Tokenizer::find_special(std::string_view text) const {
  for (const auto& [s, id] : specials_)
    if (s == text) return id;
  return -1;
}

std::vector<std::string_view> Tokenizer::pretokenize(std::string_view text) const {
  std::vector<std::string_view> out;
  const std::vector<Codepoint> cps = utf8_decode(text);
  const size_t n = cps.size();
  auto cls = [&](size_t i) { return cp_class(cps[i].cp); };
  auto bytes = [&](size_t b, size_t e) {  // code points [b, e) as a view of the text
    const size_t ob = cps[b].offset, oe = e < n ? cps[e].offset : text.size();
    out.push_back(text.substr(ob, oe - ob));
  };
  // Step 1 splits every \p{N} into its own chunk; step 2 applies the GPT-2 split to each chunk:
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  size_t chunk_begin = 0;
  while (chunk_begin < n) {
    if (cls(chunk_begin) == CpClass::kNumber) { bytes(chunk_begin, chunk_begin + 1); ++chunk_begin; continue; }
    size_t end = chunk_begin;
    while (end < n && cls(end) != CpClass::kNumber) ++end;
    size_t i = chunk_begin;
    while (i < end) {
      const uint32_t c = cps[i].cp;
      if (c == '\'' && i + 1 < end) {
        const uint32_t c1 = cps[i + 1].cp;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') { bytes(i, i + 2); i += 2; continue; }
        if (i + 2 < end) {
          const uint32_t c2 = cps[i + 2].cp;
          if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) { bytes(i, i + 3); i += 3; continue; }
        }
      }
      size_t j = i;
      if (c == ' ' && i + 1 < end && cls(i + 1) != CpClass::kSpace) j = i + 1;  // optional leading space
      const CpClass k = cls(j);
      if (k != CpClass::kSpace) {
        size_t e = j + 1;
        if (k == CpClass::kOther) {
          while (e < end && cls(e) == CpClass::kOther) ++e;
        } else {
          while (e < end && cls(e) == k) ++e;
        }
        bytes(i, e);
        i = e;
        continue;
      }
      // A run of white space: \s+(?!\S) keeps the last space for the next word when one follows.
      size_t e = i;
      while (e < end && cls(e) == CpClass::kSpace) ++e;
      if (e < end && e - i >= 2) e -= 1;
      bytes(i, e);
      i = e;
    }
    chunk_begin = end;
  }
  return out;
}

void Tokenizer::bpe(std::string_view piece, std::vector<int>& out) const {
  struct Sym { int id, prev, next; };
  std::vector<Sym> sy;
  sy.reserve(piece.size());
  for (unsigned char ch : piece)
    if (byte_token_[ch] >= 0) sy.push_back({byte_token_[ch], (int)sy.size() - 1, (int)sy.size() + 1});
  if (sy.empty()) return;
  sy.back().next = -1;
  struct Cand { int rank, left, lid, rid; };
  auto worse = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  auto push = [&](int left) {
    if (left < 0 || sy[left].next < 0) return;
    const int r = sy[left].next;
    auto it = merges_.find(((uint64_t)(uint32_t)sy[left].id << 32) | (uint32_t)sy[r].id);
    if (it != merges_.end()) heap.push({it->second.first, left, sy[left].id, sy[r].id});
  };
  for (int i = 0; i + 1 < (int)sy.size(); ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int r = sy[c.left].next;
    if (sy[c.left].id != c.lid || r < 0 || sy[r].id != c.rid) continue;  // stale
    sy[c.left].id = merges_.at(((uint64_t)(uint32_t)c.lid << 32) | (uint32_t)c.rid).second;
    sy[c.left].next = sy[r].next;
    if (sy[r].next >= 0) sy[sy[r].next].prev = c.left;
    sy[r].id = -1;
    push(sy[c.left].prev);
    push(c.left);
  }
  for (int i = 0; i >= 0 && i < (int)sy.size(); i = sy[i].next) out.push_back(sy[i].id);
}

std::vector<int> Tokenizer::encode(std::string_view text, bool parse_special, bool add_bos) const {
  std::vector<int> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  auto encode_plain = [&](std::string_view seg) {
    for (std::string_view piece : pretokenize(seg)) bpe(piece, out);
  };
  size_t start = 0, i = 0;
  while (parse_special && i < text.size()) {
    int match = -1;
    size_t mlen = 0;
    for (const auto& [s, id] : specials_) {
      if (s.size() <= text.size() - i && text.compare(i, s.size(), s) == 0) { match = id; mlen = s.size(); break; }
    }
    if (match < 0) { ++i; continue; }
    if (i > start) encode_plain(text.substr(start, i - start));
    out.push_back(match);
    i += mlen;
    start = i;
  }
  if (start < text.size()) encode_plain(text.substr(start));
  return out;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string s;
  for (int id : ids)
    if (id >= 0 && id < n_vocab()) s += bytes_[id];
  return s;
}

std::string StreamDecoder::push(int id) {
  if (id >= 0 && id < tok_.n_vocab()) pending_ += tok_.token_bytes(id);
  const size_t k = utf8_complete_prefix(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, k));
  pending_.erase(0, k);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace ouro
