#include "runtime/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "tokenizer/bpe.h"

namespace ouro {

using nlohmann::json;

namespace {

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
bool num_complete(uint8_t s) { return s == kNZero || s == kNInt || s == kNFrac || s == kNExp; }

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

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

Node of(Kind k) {
  Node n;
  n.kind = k;
  return n;
}

}  // namespace

struct JsonGrammar {
  std::vector<Node> nodes;
  std::vector<TrieNode> trie;
  int root = 0;
  int any_string = 0, any_number = 0, any_object = 0, any_array = 0, any_literal = 0;
};

namespace {

// ---- compiling -------------------------------------------------------------------------------

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  Expected<std::shared_ptr<const JsonGrammar>> run(bool object_only) {
    auto g = std::make_shared<JsonGrammar>();
    g_ = g.get();
    // Shared nodes for what the schema leaves open.
    g_->any_string = add(of(kString));
    g_->any_number = add(of(kNumber));
    g_->any_literal = add_literals({"true", "false", "null"});
    Node any;
    any.kind = kAny;
    const int any_node = add(any);
    Node obj;
    obj.kind = kObject;
    obj.open_map = true;
    obj.map_value = any_node;
    obj.max_items = kMaxAnyMembers;
    g_->any_object = add(obj);
    Node arr;
    arr.kind = kArray;
    arr.item = any_node;
    arr.max_items = kMaxAnyMembers;
    g_->any_array = add(arr);
    if (object_only) {
      g_->root = g_->any_object;
    } else {
      auto r = compile(root_, "schema", 0);
      if (!r) return r.error();
      g_->root = *r;
    }
    if (Status s = resolve_refs(); !s) return s.error();
    if (Status s = costs(); !s) return s.error();
    return std::shared_ptr<const JsonGrammar>(std::move(g));
  }

 private:
  int add(Node n) {
    g_->nodes.push_back(std::move(n));
    return (int)g_->nodes.size() - 1;
  }
  int new_trie() {
    g_->trie.push_back({});
    return (int)g_->trie.size() - 1;
  }
  void trie_insert(int root, const std::string& s, int value) {
    int cur = root;
    for (unsigned char c : s) {
      int nx = g_->trie[cur].child(c);
      if (nx < 0) {
        nx = new_trie();
        g_->trie[cur].next.push_back({c, nx});
      }
      cur = nx;
    }
    g_->trie[cur].value = value;
  }
  int add_literals(const std::vector<std::string>& lits) {
    Node n;
    n.kind = kLiteral;
    n.trie = new_trie();
    for (size_t i = 0; i < lits.size(); ++i) trie_insert(n.trie, lits[i], (int)i);
    return add(std::move(n));
  }

  Error bad(const std::string& where, const std::string& what) { return usage_error(where + ": " + what); }

  Expected<int> compile(const json& s, const std::string& where, int depth) {
    if (depth > 64) return bad(where, "schema nested deeper than 64 levels");
    if (g_->nodes.size() > kMaxNodes) return bad(where, "schema too large (over " + std::to_string(kMaxNodes) + " nodes)");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return bad(where, "'false' admits no document");
      return add(of(kAny));
    }
    if (!s.is_object()) return bad(where, "a schema must be an object or a boolean");
    static const std::set<std::string> annotations = {"title", "description", "default", "examples", "$schema", "$id",
                                                      "$comment", "deprecated", "readOnly", "writeOnly", "strict",
                                                      "$defs", "definitions"};
    static const std::set<std::string> known = {"type", "properties", "required", "additionalProperties", "items",
                                                "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
                                                "anyOf", "oneOf", "$ref"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!annotations.count(it.key()) && !known.count(it.key()))
        return bad(where, "unsupported keyword '" + it.key() +
                              "' (supported: type, properties, required, additionalProperties, items, minItems, maxItems, "
                              "minLength, maxLength, enum, const, anyOf, oneOf, $ref to #/$defs)");
    if (s.contains("$ref")) {
      if (s.size() > 1) {
        for (auto it = s.begin(); it != s.end(); ++it)
          if (it.key() != "$ref" && !annotations.count(it.key()))
            return bad(where, "'$ref' next to '" + it.key() + "' is not supported");
      }
      if (!s["$ref"].is_string()) return bad(where + ".$ref", "must be a string");
      Node n;
      n.kind = kRef;
      n.ref = s["$ref"].get<std::string>();
      return add(std::move(n));
    }
    if (s.contains("const") || s.contains("enum")) {
      std::vector<std::string> lits;
      if (s.contains("const")) lits.push_back(s["const"].dump());
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) return bad(where + ".enum", "must be a non-empty list");
        if (s["enum"].size() > kMaxLiterals) return bad(where + ".enum", "too many values");
        for (const json& v : s["enum"]) lits.push_back(v.dump(-1, ' ', false, json::error_handler_t::replace));
      }
      if (s.contains("const") && s.contains("enum")) {
        if (std::find(lits.begin() + 1, lits.end(), lits[0]) == lits.end()) return bad(where, "'const' is not in 'enum'");
        lits.resize(1);
      }
      // A literal that is a prefix of another is fine (the next byte decides) except for strings,
      // which end in a quote; duplicates are dropped.
      std::sort(lits.begin(), lits.end());
      lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
      return add_literals(lits);
    }
    for (const char* u : {"anyOf", "oneOf"}) {
      if (!s.contains(u)) continue;
      const json& alts = s[u];
      if (!alts.is_array() || alts.empty()) return bad(where + "." + u, "must be a non-empty list");
      Node n;
      n.kind = kUnion;
      for (size_t i = 0; i < alts.size(); ++i) {
        auto a = compile(alts[i], where + "." + u + "[" + std::to_string(i) + "]", depth + 1);
        if (!a) return a.error();
        n.alts.push_back(*a);
      }
      if (s.contains("type")) return bad(where, std::string("'type' next to '") + u + "' is not supported");
      return add(std::move(n));
    }
    std::string type;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_array()) {
        // ["string", "null"]: a union of simple types
        Node n;
        n.kind = kUnion;
        for (size_t i = 0; i < t.size(); ++i) {
          if (!t[i].is_string()) return bad(where + ".type", "type names must be strings");
          json sub = s;
          sub["type"] = t[i];
          auto a = compile(sub, where + ".type[" + std::to_string(i) + "]", depth + 1);
          if (!a) return a.error();
          n.alts.push_back(*a);
        }
        if (n.alts.empty()) return bad(where + ".type", "must not be empty");
        return add(std::move(n));
      }
      if (!t.is_string()) return bad(where + ".type", "must be a string or a list of strings");
      type = t.get<std::string>();
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      type = "array";
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      type = "string";
    }
    auto count = [&](const char* k, int* out) -> std::optional<Error> {
      if (!s.contains(k)) return std::nullopt;
      const json& v = s[k];
      if (!v.is_number_integer() || v.get<int64_t>() < 0) return bad(where + "." + k, "must be a non-negative integer");
      *out = (int)std::min<int64_t>(v.get<int64_t>(), kInf - 1);
      return std::nullopt;
    };
    auto only = [&](std::initializer_list<const char*> allowed) -> std::optional<Error> {
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (annotations.count(it.key()) || it.key() == "type") continue;
        bool ok = false;
        for (const char* a : allowed) ok |= it.key() == a;
        if (!ok) return bad(where, "'" + it.key() + "' does not apply to type '" + type + "'");
      }
      return std::nullopt;
    };
    if (type.empty()) {
      if (auto e = only({})) return *e;
      return add(of(kAny));
    }
    if (type == "string") {
      if (auto e = only({"minLength", "maxLength"})) return *e;
      Node n;
      n.kind = kString;
      if (auto e = count("minLength", &n.min_len)) return *e;
      if (auto e = count("maxLength", &n.max_len)) return *e;
      if (n.min_len > n.max_len) return bad(where, "minLength is above maxLength");
      return add(std::move(n));
    }
    if (type == "number" || type == "integer") {
      if (auto e = only({})) return *e;
      return add(of(type == "number" ? kNumber : kInteger));
    }
    if (type == "boolean") {
      if (auto e = only({})) return *e;
      return add_literals({"false", "true"});
    }
    if (type == "null") {
      if (auto e = only({})) return *e;
      return add_literals({"null"});
    }
    if (type == "array") {
      if (auto e = only({"items", "minItems", "maxItems"})) return *e;
      Node n;
      n.kind = kArray;
      if (auto e = count("minItems", &n.min_items)) return *e;
      if (auto e = count("maxItems", &n.max_items)) return *e;
      if (n.min_items > n.max_items) return bad(where, "minItems is above maxItems");
      if (s.contains("items")) {
        auto it = compile(s["items"], where + ".items", depth + 1);
        if (!it) return it.error();
        n.item = *it;
      } else {
        n.item = add(of(kAny));
      }
      return add(std::move(n));
    }
    if (type == "object") {
      if (auto e = only({"properties", "required", "additionalProperties"})) return *e;
      Node n;
      n.kind = kObject;
      std::set<std::string> required;
      if (s.contains("required")) {
        if (!s["required"].is_array()) return bad(where + ".required", "must be a list of names");
        for (const json& r : s["required"]) {
          if (!r.is_string()) return bad(where + ".required", "must be a list of names");
          required.insert(r.get<std::string>());
        }
      }
      if (s.contains("properties")) {
        if (!s["properties"].is_object()) return bad(where + ".properties", "must be an object");
        for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
          auto v = compile(it.value(), where + ".properties." + it.key(), depth + 1);
          if (!v) return v.error();
          n.props.push_back({json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace), *v,
                             required.count(it.key()) > 0});
        }
        // Properties come out in the schema's order (nlohmann keeps objects sorted by key, so
        // that is alphabetical here); the document is valid in any order.
      }
      for (const std::string& r : required) {
        bool found = false;
        for (const Prop& p : n.props) found |= p.key == json(r).dump(-1, ' ', false, json::error_handler_t::replace);
        if (!found) return bad(where + ".required", "'" + r + "' is required but not among the properties");
      }
      if (n.props.empty()) {
        // No declared properties: a map whose values follow additionalProperties.
        const json ap = s.value("additionalProperties", json(true));
        if (ap.is_boolean() && !ap.get<bool>()) {
          n.open_map = false;
        } else {
          auto v = compile(ap, where + ".additionalProperties", depth + 1);
          if (!v) return v.error();
          n.open_map = true;
          n.map_value = *v;
          n.max_items = kMaxAnyMembers;
        }
      } else if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean()) {
        auto v = compile(s["additionalProperties"], where + ".additionalProperties", depth + 1);
        if (!v) return v.error();
        // Extra members are never generated next to declared ones; the schema is still obeyed.
      }
      return add(std::move(n));
    }
    return bad(where + ".type", "unknown type '" + type + "'");
  }

  Status resolve_refs() {
    // A ref node becomes a one-alternative union pointing at the compiled target.
    std::map<std::string, int> done;
    for (size_t i = 0; i < g_->nodes.size(); ++i) {
      if (g_->nodes[i].kind != kRef) continue;
      const std::string ref = g_->nodes[i].ref;
      int target;
      if (auto it = done.find(ref); it != done.end()) {
        target = it->second;
      } else {
        std::string name;
        const json* defs = nullptr;
        for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
          if (ref.rfind(prefix, 0) == 0) {
            name = ref.substr(std::strlen(prefix));
            const std::string key = std::string(prefix).substr(2, std::strlen(prefix) - 3);
            if (root_.is_object() && root_.contains(key) && root_[key].is_object()) defs = &root_[key];
          }
        }
        if (ref == "#") {
          target = g_->root;
        } else {
          if (name.empty() || !defs || !defs->contains(name))
            return usage_error("schema: '$ref': '" + ref + "' does not name an entry of #/$defs or #/definitions");
          done[ref] = -1;  // placeholder while compiling (recursion goes through new ref nodes)
          auto t = compile((*defs)[name], "schema." + ref.substr(2), 1);
          if (!t) return t.error();
          target = *t;
        }
        done[ref] = target;
      }
      g_->nodes[i].kind = kUnion;
      g_->nodes[i].alts = {target};
    }
    return Ok{};
  }

  int trie_min(int t) {
    // shortest literal in a trie (no extras)
    int best = kInf;
    std::vector<std::pair<int, int>> stack = {{t, 0}};
    while (!stack.empty()) {
      auto [n, d] = stack.back();
      stack.pop_back();
      if (g_->trie[n].value >= 0) best = std::min(best, d);
      for (const auto& [c, nx] : g_->trie[n].next) stack.push_back({nx, d + 1});
    }
    return best;
  }
  // Fills TrieNode::cost below t: least bytes to a terminal plus extra(terminal value).
  template <class F>
  int trie_costs(int t, const F& extra) {
    TrieNode& n = g_->trie[t];
    int best = n.value >= 0 ? extra(n.value) : kInf;
    for (size_t i = 0; i < g_->trie[t].next.size(); ++i) {
      const int nx = g_->trie[t].next[i].second;
      const int c = trie_costs(nx, extra);
      if (c < kInf) best = std::min(best, c + 1);
    }
    g_->trie[t].cost = best;
    return best;
  }

  int sat(int64_t v) { return (int)std::min<int64_t>(v, kInf); }

  int node_min(const Node& n) {
    switch (n.kind) {
      case kAny: return 1;
      case kNumber: case kInteger: return 1;
      case kString: return sat(2 + (int64_t)n.min_len);
      case kLiteral: return trie_min(n.trie);
      case kUnion: {
        int b = kInf;
        for (int a : n.alts) b = std::min(b, g_->nodes[a].min_bytes);
        return b;
      }
      case kArray: {
        if (n.min_items == 0) return 2;
        const int64_t m = g_->nodes[n.item].min_bytes;
        if (m >= kInf) return kInf;
        return sat(2 + (int64_t)n.min_items * m + (n.min_items - 1));
      }
      case kObject: {
        int64_t total = 2, nreq = 0;
        for (const Prop& p : n.props) {
          if (!p.required) continue;
          const int64_t m = g_->nodes[p.node].min_bytes;
          if (m >= kInf) return kInf;
          total += (int64_t)p.key.size() + 1 + m;
          ++nreq;
        }
        if (nreq > 1) total += nreq - 1;
        return sat(total);
      }
      case kRef: return kInf;
    }
    return kInf;
  }

  Status costs() {
    // Least document sizes by fixed-point iteration (refs may recurse).
    for (int iter = 0; iter < 1000; ++iter) {
      bool changed = false;
      for (Node& n : g_->nodes) {
        const int m = node_min(n);
        if (m < n.min_bytes) {
          n.min_bytes = m;
          changed = true;
        }
      }
      if (!changed) break;
    }
    if (g_->nodes[g_->root].min_bytes >= kInf) return usage_error("schema: it admits no finite document");
    for (Node& n : g_->nodes) {
      if (n.kind == kLiteral) trie_costs(n.trie, [](int) { return 0; });
      if (n.kind != kObject || n.props.empty()) continue;
      const int np = (int)n.props.size();
      // after_cost[j]: close after property j's value: every later required member, then '}'.
      n.after_cost.assign(np, kInf);
      int64_t tail = 1;
      for (int j = np - 1; j >= 0; --j) {
        n.after_cost[j] = sat(tail);
        const Prop& p = n.props[j];
        if (p.required) tail += 1 + (int64_t)p.key.size() + 1 + g_->nodes[p.node].min_bytes;
      }
      n.first_cost = n.min_bytes >= kInf ? kInf : n.min_bytes - 1;
      // key_trie[pos]: keys allowed when properties before pos are behind us: pos .. the first
      // required one at or after pos.
      n.key_trie.assign(np + 1, -1);
      for (int pos = 0; pos <= np; ++pos) {
        const int t = new_trie();
        n.key_trie[pos] = t;
        for (int j = pos; j < np; ++j) {
          trie_insert(t, n.props[j].key, j);
          if (n.props[j].required) break;
        }
        Node& nn = n;  // (the vector does not grow inside this loop: tries are separate)
        trie_costs(t, [&](int j) {
          const int64_t m = g_->nodes[nn.props[j].node].min_bytes;
          return sat(1 + m + nn.after_cost[j]);
        });
      }
    }
    return Ok{};
  }

  const json& root_;
  JsonGrammar* g_ = nullptr;
};

}  // namespace

Expected<std::shared_ptr<const JsonGrammar>> compile_json_schema(const json& schema) {
  return Compiler(schema).run(false);
}

std::shared_ptr<const JsonGrammar> json_object_grammar() {
  static const json empty = json::object();
  static std::shared_ptr<const JsonGrammar> g = *Compiler(empty).run(true);
  return g;
}

int min_document_bytes(const JsonGrammar& g) { return g.nodes[g.root].min_bytes; }

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
