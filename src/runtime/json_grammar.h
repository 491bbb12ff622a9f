// The compiled form of a JSON schema that json_constraint.cpp matches bytes against and
// json_schema_compile.cpp builds: node kinds, matcher modes, limits. Internal to src/runtime/.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "runtime/json_constraint.h"

namespace ouro {

using nlohmann::json;

namespace json_grammar {

constexpr int kInf = 1 << 28;
constexpr int kMaxWs = 4;            // consecutive whitespace bytes between tokens
constexpr int kMaxIntDigits = 15;    // digits before the point
constexpr int kMaxFracDigits = 15;
constexpr int kMaxExpDigits = 2;    // so every number fits a double (JSON parsers refuse 1e999)
constexpr int kMaxAnyMembers = 64;   // members of an object or items of an array the schema leaves open
constexpr size_t kMaxNodes = 20000;  // compiled schema size
constexpr size_t kMaxLiterals = 20000;

enum Kind : uint8_t { kAny, kObject, kArray, kString, kNumber, kInteger, kLiteral, kUnion, kRef };

enum Mode : uint8_t {
  kValue,      // a value of `node` starts here
  kObjFirst,   // after '{'
  kObjKey,     // after ',' in an object: a key must follow
  kObjKeyLit,  // a declared key is being matched (literal frame above)
  kObjKeyStr,  // a free key string is being matched (string frame above)
  kObjColon,   // after a key
  kObjNext,    // after a member's value
  kArrFirst,   // after '['
  kArrItem,    // after ',' in an array
  kArrNext,    // after an item
  kStr,        // inside a string
  kNum,        // inside a number
  kLit,        // inside a literal (enum, const, true/false/null, declared keys)
};

// Number states (Frame::sub).
enum NumState : uint8_t { kNStart, kNMinus, kNZero, kNInt, kNDot, kNFrac, kNE, kNESign, kNExp };
inline bool num_complete(uint8_t s) { return s == kNZero || s == kNInt || s == kNFrac || s == kNExp; }

inline bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
inline bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

struct TrieNode {
  std::vector<std::pair<uint8_t, int>> next;
  int value = -1;  // terminal: the literal's index (or property index for keys)
  int cost = kInf; // least bytes to a terminal below plus that terminal's extra
  int child(uint8_t c) const {
    for (const auto& [b, i] : next) if (b == c) return i;
    return -1;
  }
};

struct Prop {
  std::string key;  // the key as JSON text, quotes included
  int node = 0;
  bool required = false;
};

struct Node {
  Kind kind = kAny;
  // object
  std::vector<Prop> props;
  int map_value = -1;             // no props: members' values (-1: none allowed when closed)
  bool open_map = false;          // no props and members allowed
  std::vector<int> key_trie;      // per position p (0..n): trie of keys allowed after property p-1
  std::vector<int> after_cost;    // per property j: bytes to close after its value
  int first_cost = kInf;          // after '{'
  // array
  int item = -1, min_items = 0, max_items = kInf;
  // string
  int min_len = 0, max_len = kInf;
  // literal
  int trie = -1;
  // union
  std::vector<int> alts;
  // ref
  std::string ref;
  int min_bytes = kInf;
};

inline Node of(Kind k) {
  Node n;
  n.kind = k;
  return n;
}

}  // namespace json_grammar

using namespace json_grammar;  // the two files that include this header use the names unqualified

struct JsonGrammar {
  std::vector<Node> nodes;
  std::vector<TrieNode> trie;
  int root = 0;
  int any_string = 0, any_number = 0, any_object = 0, any_array = 0, any_literal = 0;
};

}  // namespace ouro
