// Byte-level BPE tokenizer (GPT-2 style) built from GGUF metadata, with the SmolLM2/llama.cpp
// "smollm" pre-tokenizer (each digit alone, then the GPT-2 split) and special-token parsing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ouro {

class GgufFile;

class Tokenizer {
 public:
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);

  // parse_special: text of control/user-defined tokens becomes their ids. Adds BOS when the
  // model asks for it (tokenizer.ggml.add_bos_token) and add_bos is true.
  std::vector<int> encode(std::string_view text, bool parse_special = true, bool add_bos = true) const;
  // Raw bytes of one token (special tokens give their text).
  const std::string& token_bytes(int id) const { return bytes_[id]; }
  std::string decode(const std::vector<int>& ids) const;
  int n_vocab() const { return (int)bytes_.size(); }
  int bos() const { return bos_; }
  int eos() const { return eos_; }
  bool is_special(int id) const { return id >= 0 && id < n_vocab() && special_[id]; }
  // Looks up a token by its text (e.g. "<|im_end|>"); -1 if absent.
  int find_special(std::string_view text) const;

  // Splits text into pre-tokens (byte ranges), exposed for tests.
  std::vector<std::string_view> pretokenize(std::string_view text) const;

 private:
  void bpe(std::string_view piece, std::vector<int>& out) const;
  std::vector<std::string> bytes_;        // id -> raw bytes
  std::vector<bool> special_;
  std::unordered_map<std::string, int> byte_level_to_id_;  // vocab in its byte-level spelling
  int byte_token_[256];                   // id of each single byte
  std::unordered_map<uint64_t, std::pair<int, int>> merges_;  // (left, right) -> (rank, merged id)
  std::vector<std::pair<std::string, int>> specials_;          // text -> id, longest first
  int bos_ = -1, eos_ = -1;
  bool add_bos_ = false;
};

// Streaming detokenizer: returns only complete UTF-8 text, holding back a partial character.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : tok_(t) {}
  std::string push(int id);
  std::string flush();  // whatever is held back (invalid bytes replaced by U+FFFD)

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace ouro
