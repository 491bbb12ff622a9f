// The pure pieces of the trace tools (src/trace/analyze.h): intervals, self time, globs, natural
// order, parsing errors. The commands end to end are in tests/trace/test_trace_tools.py.
#include "trace/analyze.h"

#include <gtest/gtest.h>

namespace ouro::analysis {
namespace {

using V = std::vector<Interval>;

TEST(TraceAnalyze, Intervals) {
  const V u = union_of({{5, 7}, {0, 2}, {1, 3}, {3, 4}, {9, 9}, {8, 6}});
  EXPECT_EQ(u, (V{{0, 4}, {5, 7}}));  // touching merge; empty and reversed dropped
  EXPECT_DOUBLE_EQ(total_length(u), 6);
  const V b = union_of({{1, 2}, {3, 6}});
  EXPECT_EQ(intersect(u, b), (V{{1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(subtract(u, b), (V{{0, 1}, {2, 3}, {6, 7}}));
  EXPECT_EQ(subtract(b, u), (V{{4, 5}}));
  EXPECT_DOUBLE_EQ(covered_within(u, 1.5, 5.5), 3.0);
  EXPECT_DOUBLE_EQ(covered_within(u, 4, 5), 0.0);
}

TEST(TraceAnalyze, SelfTimeInnermostAndParts) {
  auto span = [](const char* cat, double a, double b) {
    Span s;
    s.cat = cat;
    s.start = a;
    s.end = b;
    return s;
  };
  // outer [0,10) > inner [2,5); a kernel [3,8) inside both ranks below them; a bare kernel [12,14).
  const std::vector<Span> ss = {span("op", 0, 10), span("op", 2, 5), span("kernel", 3, 8), span("kernel", 12, 14),
                                span("x", 20, 20)};
  std::vector<const Span*> p;
  for (const Span& s : ss) p.push_back(&s);
  const auto self = self_times(p);
  EXPECT_EQ(self, (std::vector<double>{7, 3, 0, 2, 0}));
}

TEST(TraceAnalyze, Globs) {
  EXPECT_TRUE(glob_match("attn*", "attn_norm"));
  EXPECT_TRUE(glob_match("*norm", "ffn_norm"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(glob_match("a*b*c", "aXbYbZ"));
  EXPECT_FALSE(glob_match("qkv", "qkv2"));
  EXPECT_TRUE(glob_match("a?[", "a?["));
  auto p = Pattern::parse("cat:op");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->field, Pattern::Field::kCat);
  EXPECT_FALSE(Pattern::parse("cat:").ok());
  EXPECT_FALSE(Pattern::parse("").ok());
}

TEST(TraceAnalyze, NaturalOrder) {
  EXPECT_TRUE(natural_less("2", "10"));
  EXPECT_TRUE(natural_less("-5", "-1"));
  EXPECT_TRUE(natural_less("-1", "0"));
  EXPECT_TRUE(natural_less("99999999999999999999999", "abc"));
  EXPECT_TRUE(natural_less("9", "0010"));
  EXPECT_FALSE(natural_less("10", "2"));
  EXPECT_TRUE(natural_less("abc", "abd"));
}

TEST(TraceAnalyze, ParseFormsAndErrors) {
  auto t = parse_trace(R"([{"ph":"B","ts":1,"name":"a","tid":3},{"ph":"X","ts":0,"dur":2},
                          {"ph":"E","ts":4,"tid":3,"args":{"bytes":8}},{"ph":"E","ts":5}])", "t.json");
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->spans.size(), 2u);
  EXPECT_EQ(t->spans[1].name, "a");
  EXPECT_EQ(*t->spans[1].bytes, 8);
  EXPECT_EQ(t->unmatched_end, 1u);
  EXPECT_DOUBLE_EQ(t->wall_us(), 4);
  for (const char* bad : {"", "{", "[1]", "{}", R"({"traceEvents":3})", R"([{"ph":"X","ts":1}])",
                          R"([{"ph":"X","ts":1,"dur":1,"args":5}])", R"([{"ts":1}])"}) {
    auto r = parse_trace(bad, "bad.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message.rfind("bad.json: ", 0), 0u) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace ouro::analysis
