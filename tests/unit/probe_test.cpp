// The probe result's JSON form: round trip, and clear errors for malformed input. (Measuring is
// covered by tests/lab/test_probe.py, which runs the binary.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lab/probe.h"

using namespace ouro;

namespace {

ProbeResult sample() {
  ProbeResult r;
  r.cpu_model = "Test CPU (R) 9000";
  r.cpu_features = "avx2 fma f16c";
  r.max_threads = 2;
  r.read_gb_s = {{1, 17.25}, {2, 25.0000001}};
  r.triad_gb_s = {{1, 15.5}, {2, 21.0}};
  r.fp32_gflops = {{1, 101.3}, {2, 0.1 + 0.2}};
  r.int8_gops = {{1, 400.0}, {2, 800.5}};
  r.measured_at = "2026-01-01T00:00:00Z";
  r.buffer_mib = 240;
  r.fp32_kernel = "avx2 vfmadd231ps ymm";
  r.int8_kernel = "avx2 vpmaddubsw+vpmaddwd+vpaddd ymm";
  return r;
}

std::string error_of(const std::string& text) {
  auto r = ProbeResult::from_json(text, "cache.json");
  return r ? "" : r.error().message;
}

}  // namespace

TEST(Probe, JsonRoundTripIsExact) {
  const ProbeResult r = sample();
  auto back = ProbeResult::from_json(r.to_json(), "x");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->to_json(), r.to_json());
  EXPECT_EQ(back->read_gb_s, r.read_gb_s);
  EXPECT_EQ(back->fp32_gflops.at(2), 0.1 + 0.2);
  EXPECT_TRUE(back->bf16_gflops.empty());
  EXPECT_EQ(back->max_threads, 2);
  EXPECT_DOUBLE_EQ(back->best_read_gb_s(), 25.0000001);
  EXPECT_DOUBLE_EQ(back->best_int8_gops(), 800.5);
}

TEST(Probe, MalformedInputNamesTheProblem) {
  EXPECT_NE(error_of("").find("cache.json: not a valid probe result: malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"version\": 1").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{}").find("'version'"), std::string::npos);

  nlohmann::json j = nlohmann::json::parse(sample().to_json());
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json k = j;
    if (v.is_discarded()) k.erase(key);
    else k[key] = v;
    return error_of(k.dump());
  };
  const nlohmann::json erase = nlohmann::json::value_t::discarded;
  EXPECT_NE(with("version", 2).find("format version 2"), std::string::npos);
  EXPECT_NE(with("read_gb_s", erase).find("'read_gb_s' is missing"), std::string::npos);
  EXPECT_NE(with("read_gb_s", "fast").find("'read_gb_s' is not an object"), std::string::npos);
  EXPECT_NE(with("read_gb_s", nlohmann::json::object()).find("'read_gb_s' is empty"), std::string::npos);
  EXPECT_NE(with("triad_gb_s", {{"two", 3.0}}).find("'two' is not a thread count"), std::string::npos);
  EXPECT_NE(with("triad_gb_s", {{"0", 3.0}}).find("'0' is not a thread count"), std::string::npos);
  EXPECT_NE(with("fp32_gflops", {{"1", -3.0}}).find("not a positive number"), std::string::npos);
  EXPECT_NE(with("fp32_gflops", {{"1", "9"}}).find("not a positive number"), std::string::npos);
  EXPECT_NE(with("cpu_model", 7).find("'cpu_model' is not a string"), std::string::npos);
  EXPECT_NE(with("max_threads", 0).find("'max_threads'"), std::string::npos);
  EXPECT_NE(with("max_threads", 1.5).find("'max_threads'"), std::string::npos);
  EXPECT_EQ(with("bf16_gflops", erase), "");  // optional: absent where the CPU lacks BF16
  EXPECT_EQ(with("buffer_mib", erase), "");
}
