// Compiling a JSON schema into the grammar the constrained sampler matches (json_grammar.h).
#include "runtime/json_grammar.h"

namespace ouro {

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

}  // namespace ouro
