// Constrained decoding for `response_format`: a JSON Schema (a documented subset) compiled into a
// byte-level pushdown matcher, and a mask over the vocabulary that keeps only the tokens whose
// bytes can continue a valid document.
//
// The mask also knows the token budget: every state has the least number of bytes that completes
// the document (min_close), and a token is allowed only when what is left of the budget after it
// still covers that. Byte-level BPE has a token for every single byte, so a request whose budget
// covers the schema's shortest document always ends with a complete, valid document: the model
// cannot talk itself past max_tokens inside a string. See docs/serve.md ("Structured output").
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ouro {

class Tokenizer;
struct JsonGrammar;  // compiled schema (json_constraint.cpp)

// Compiles a JSON Schema. Supported: type (one name), properties, required, additionalProperties
// (true/false/schema), items, minItems, maxItems, minLength, maxLength, enum, const, anyOf/oneOf
// and type-free unions whose alternatives start differently (e.g. a type or null), $ref to
// #/$defs/... or #/definitions/... (recursion allowed), and annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, strict). Anything
// else is a usage error naming the keyword and where it is, never silently ignored.
Expected<std::shared_ptr<const JsonGrammar>> compile_json_schema(const nlohmann::json& schema);
// Any JSON object (`response_format: {"type": "json_object"}`).
std::shared_ptr<const JsonGrammar> json_object_grammar();
// Bytes of the shortest document the grammar admits.
int min_document_bytes(const JsonGrammar& g);

// The matcher's state: a stack of frames, cheap to copy.
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> g);
  // Consumes bytes; false (and the state is then unspecified) when they cannot continue a valid
  // document.
  bool feed(std::string_view bytes);
  bool feed_byte(uint8_t c);
  // True when the bytes so far form a complete document.
  bool complete() const;
  // The least number of bytes that completes the document from here.
  int min_close() const;
  void copy_from(const JsonMatcher& o);
  // Inside a string, between characters (no escape or UTF-8 sequence open): the characters so far
  // and the string's length bounds. The vocabulary's plain tokens are judged from these alone.
  struct StringTop {
    int chars = 0, min_len = 0, max_len = 0;
  };
  bool string_top(StringTop* out) const;

  struct Frame {
    int32_t node = 0;
    uint8_t mode = 0, sub = 0;
    int16_t pend = 0;  // string: UTF-8 continuation bytes still due
    int32_t a = 0;     // object: last/chosen property or member count; array: items; string: chars; literal: trie node; number: digits
  };
  static constexpr int kMaxDepth = 32;

 private:
  bool pop();
  std::shared_ptr<const JsonGrammar> g_;
  const JsonGrammar* gp_ = nullptr;
  int depth_ = 0;
  int ws_ = 0;  // consecutive whitespace bytes outside strings
  Frame st_[kMaxDepth];
};

// The vocabulary as a byte trie (special tokens left out), built once per tokenizer.
class VocabTrie {
 public:
  explicit VocabTrie(const Tokenizer& tok);
  struct Node {
    std::vector<std::pair<uint8_t, int>> next;
    std::vector<int> tokens;  // tokens whose bytes end here
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  // The same for the tokens that are not plain string text (quotes, backslashes, control bytes,
  // incomplete UTF-8): inside a string only these need the matcher.
  const std::vector<Node>& rest() const { return rest_; }
  // Characters of a plain token (whole UTF-8 characters, none of the above), else -1.
  int plain_chars(int id) const { return plain_[id]; }
  const std::string& bytes(int id) const { return bytes_[id]; }
  int n_vocab() const { return (int)bytes_.size(); }

 private:
  std::vector<Node> nodes_, rest_;
  std::vector<std::string> bytes_;
  std::vector<int> plain_;
};

// One request's constraint: the matcher plus the vocabulary.
class JsonConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const VocabTrie> vocab);
  // Sets the logits of tokens that cannot come next to -infinity. `budget`: tokens that may still
  // be generated, this one included. End-of-sequence ids stay only when the document is complete.
  // Returns how many tokens stay allowed.
  int mask(float* logits, int n_vocab, int budget, const std::vector<int>& eos_ids);
  // Advances over a sampled token; false when it does not fit (a bug: mask() excluded it).
  bool accept(int token);
  bool complete() const { return m_.complete(); }

 private:
  void walk(const std::vector<VocabTrie::Node>& nodes, int node, int depth, int budget);
  JsonMatcher m_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::vector<JsonMatcher> scratch_;  // one state per trie depth
  std::vector<uint8_t> allowed_;
};

}  // namespace ouro
