// The span recorder: nothing recorded when off, ring-buffer drops counted, Chrome JSON shape.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "trace/trace.h"

using namespace ouro;

TEST(Trace, OffRecordsNothingOnRecordsEverything) {
  trace::disable();
  const size_t before = trace::held_events();
  { trace::Span s("x", "op"); }
  EXPECT_EQ(trace::held_events(), before);

  trace::enable(100);
  for (int i = 0; i < 10; ++i) trace::Span s("x", "op", i, 1, 100.0, 200.0);
  std::thread t([] {
    trace::set_thread_name("helper");
    trace::Span s("y", "kernel");
    s.region("x");
  });
  t.join();
  trace::counter("kv_cache", 42);
  trace::disable();
  const std::string path = ::testing::TempDir() + "/trace_test.json";
  ASSERT_TRUE(trace::write_chrome_json(path, R"({"threads": 2})").ok());
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  int xs = 0, ys = 0, counters = 0;
  bool helper_named = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "helper") helper_named = true;
    if (e["ph"] == "C") { ++counters; EXPECT_EQ(e["args"]["value"], 42.0); }
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (e["name"] == "x") {
      EXPECT_EQ(e["args"]["layer"], xs);
      EXPECT_EQ(e["args"]["bytes"], 100.0);
      EXPECT_EQ(e["args"]["flops"], 200.0);
      ++xs;
    }
    if (e["name"] == "y") { ++ys; EXPECT_EQ(e["args"]["region"], "x"); }
  }
  EXPECT_EQ(xs, 10);
  EXPECT_EQ(ys, 1);
  EXPECT_EQ(counters, 1);
  EXPECT_TRUE(helper_named);
  EXPECT_EQ(doc["otherData"]["threads"], 2);
  std::remove(path.c_str());
}

TEST(Trace, FullBufferDropsOldestAndCounts) {
  trace::enable(16);
  for (int i = 0; i < 50; ++i) trace::Span s("z", "op", i);
  trace::disable();
  EXPECT_EQ(trace::dropped_events(), 34u);
  const std::string path = ::testing::TempDir() + "/trace_drop.json";
  ASSERT_TRUE(trace::write_chrome_json(path, "").ok());
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  int first_layer = -1, n = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "z") { if (first_layer < 0) first_layer = e["args"]["layer"]; ++n; }
  EXPECT_EQ(n, 16);
  EXPECT_EQ(first_layer, 34);  // the newest 16 remain
  uint64_t dropped = 0;
  for (const auto& [k, v] : doc["otherData"]["dropped_events"].items()) dropped += v.get<uint64_t>();
  EXPECT_EQ(dropped, 34u);
  std::remove(path.c_str());
}
