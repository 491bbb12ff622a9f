// The response_format matcher (runtime/json_constraint.h): documents written by hand are accepted
// or rejected as JSON Schema says; min_close() is exact (from every state reached by a random walk
// there is a byte that lowers it by one, so following such bytes completes the document in exactly
// min_close() bytes), and every document a budget-bounded random walk completes parses with
// nlohmann::json. The server-side oracle (Python's jsonschema) is in tests/serve/test_constrained.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "runtime/json_constraint.h"

using namespace ouro;
using nlohmann::json;

namespace {

std::shared_ptr<const JsonGrammar> compile(const char* schema) {
  auto g = compile_json_schema(json::parse(schema));
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return g.ok() ? *g : nullptr;
}

bool accepts(const std::shared_ptr<const JsonGrammar>& g, const std::string& doc) {
  JsonMatcher m(g);
  return m.feed(doc) && m.complete();
}

const char* kPerson = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 5},
  "age": {"type": "integer"},
  "tags": {"type": "array", "items": {"enum": ["a", "bc", 1, 12, null]}, "minItems": 1, "maxItems": 2},
  "score": {"type": "number"},
  "ok": {"type": "boolean"},
  "child": {"anyOf": [{"type": "object", "properties": {"x": {"type": "null"}}, "required": ["x"]}, {"type": "null"}]}},
  "required": ["name", "age", "tags"]})";

}  // namespace

TEST(JsonConstraint, AcceptsValidDocuments) {
  auto g = compile(kPerson);
  // nlohmann sorts properties, so the order is age, child, name, ok, score, tags.
  for (const char* doc : {
           R"({"age":1,"name":"","tags":["a"]})",
           R"({"age": -0, "name": "abcde", "tags": [12, null]})",
           R"({"age":10,"child":null,"name":"\u00e9\n","tags":[1]})",
           R"({"age":10,"child":{"x":null},"name":"ü","ok":true,"score":-1.5e+3,"tags":["bc","a"]})",
           "{\n  \"age\": 3,\n  \"name\": \"x\",\n  \"tags\": [1]\n}",
       })
    EXPECT_TRUE(accepts(g, doc)) << doc;
}

TEST(JsonConstraint, RejectsInvalidDocuments) {
  auto g = compile(kPerson);
  for (const char* doc : {
           R"({"name":"x","tags":["a"]})",                  // missing required (age comes first)
           R"({"age":1.5,"name":"x","tags":["a"]})",        // not an integer
           R"({"age":01,"name":"x","tags":["a"]})",         // leading zero
           R"({"age":1,"name":"abcdef","tags":["a"]})",     // maxLength
           R"({"age":1,"name":"x","tags":[]})",             // minItems
           R"({"age":1,"name":"x","tags":["a","a","a"]})",  // maxItems
           R"({"age":1,"name":"x","tags":["b"]})",          // not in the enum
           R"({"age":1,"name":"x","tags":[123]})",          // 12 is, 123 is not
           R"({"age":1,"name":"x","tags":["a"],})",         // trailing comma
           R"({"age":1,"name":"x","tags":["a"]} )",         // anything after the document
           R"({"age":1,"name":"x","extra":1,"tags":["a"]})",  // undeclared property
           R"({"age":1,"name":"a)" "\x01" R"(","tags":["a"]})",  // control byte in a string
           R"({"age":1,"name":"\q","tags":["a"]})",         // bad escape
           "{\"age\":1,\"name\":\"\xC3\",\"tags\":[\"a\"]}",  // broken UTF-8
           R"({"age":1,"child":{},"name":"x","tags":["a"]})",  // the union's object needs x
           "{\"age\":1,      \"name\":\"x\",\"tags\":[\"a\"]}",  // more whitespace than allowed
       })
    EXPECT_FALSE(accepts(g, doc)) << doc;
}

TEST(JsonConstraint, TopLevelScalarsEndAtTheEnd) {
  auto g = compile(R"({"type": "number"})");
  JsonMatcher m(g);
  ASSERT_TRUE(m.feed("-12.5"));
  EXPECT_TRUE(m.complete());
  ASSERT_TRUE(m.feed("e3"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.feed(" "));
  JsonMatcher m2(g);
  ASSERT_TRUE(m2.feed("1."));
  EXPECT_FALSE(m2.complete());
  EXPECT_EQ(m2.min_close(), 1);
}

TEST(JsonConstraint, RefsRecurse) {
  auto g = compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["next", "v"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(accepts(g, R"({"next":{"next":null,"v":2},"v":1})"));
  EXPECT_FALSE(accepts(g, R"({"next":{"v":2},"v":1})"));
  EXPECT_EQ(min_document_bytes(*g), (int)std::string(R"({"next":null,"v":0})").size());
}

TEST(JsonConstraint, SchemaErrorsNameTheKeyword) {
  struct Case { const char* schema; const char* needle; };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "string", "pattern": "a"})", "pattern"},
           {R"({"type": "integer", "minimum": 1})", "minimum"},
           {R"({"type": "wat"})", "wat"},
           {R"({"$ref": "#/$defs/none"})", "none"},
           {R"({"type": "object", "required": ["q"]})", "'q'"},
           {R"({"enum": []})", "enum"},
           {R"(false)", "false"},
           {R"({"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}, "$ref": "#/$defs/a"})",
            "finite"},
       }) {
    auto g = compile_json_schema(json::parse(c.schema));
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_NE(g.error().message.find(c.needle), std::string::npos) << g.error().message;
  }
}

// From any reachable state, min_close() is achievable one byte at a time, and a walk that never
// lets min_close() exceed what is left of its budget ends with a complete document that parses.
TEST(JsonConstraint, BudgetedRandomWalksAlwaysClose) {
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<const JsonGrammar>> grammars = {compile(kPerson), json_object_grammar(),
                                                              compile(R"({"type": "array", "items": {"type": "string"}})")};
  std::string alphabet = "{}[]\":,. -+eE0123456789abcdefnrtlsux\\\n";
  alphabet += "\xC3\xA9";
  for (int trial = 0; trial < 600; ++trial) {
    const auto& g = grammars[trial % grammars.size()];
    JsonMatcher m(g);
    const int budget = min_document_bytes(*g) + (int)(rng() % 60);
    std::string doc;
    int left = budget;
    while (!m.complete() || (left > 0 && rng() % 4 != 0)) {
      // Exactness: some byte lowers min_close by exactly one (unless complete).
      const int mc = m.min_close();
      ASSERT_LE(mc, left) << doc;
      std::vector<uint8_t> ok, closing;
      for (int b = 0; b < 256; ++b) {
        JsonMatcher n(g);
        n.copy_from(m);
        if (!n.feed_byte((uint8_t)b)) continue;
        ASSERT_GE(n.min_close(), mc - 1) << "min_close is not a lower bound after " << doc << (char)b;
        if (n.min_close() <= left - 1) ok.push_back((uint8_t)b);
        if (n.min_close() == mc - 1) closing.push_back((uint8_t)b);
      }
      if (mc > 0) {
        ASSERT_FALSE(closing.empty()) << "no byte lowers min_close from " << doc;
      }
      if (ok.empty()) break;
      // Mostly bytes from the alphabet (to reach deep states), sometimes the closing path.
      std::vector<uint8_t> pick;
      for (uint8_t b : ok)
        if (alphabet.find((char)b) != std::string::npos) pick.push_back(b);
      const auto& from = (pick.empty() || rng() % 5 == 0) ? (closing.empty() ? ok : closing) : pick;
      const uint8_t b = from[rng() % from.size()];
      ASSERT_TRUE(m.feed_byte(b));
      doc.push_back((char)b);
      --left;
      if (m.complete() && rng() % 3 == 0) break;
    }
    ASSERT_TRUE(m.complete()) << doc;
    ASSERT_LE((int)doc.size(), budget);
    EXPECT_FALSE(json::parse(doc, nullptr, false).is_discarded()) << doc;
  }
}
