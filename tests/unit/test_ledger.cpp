// The lab ledger (src/lab/ledger.h): the hash chain and what verify reports for each kind of
// damage, lookups, refusing to extend a damaged ledger, readers that survive odd records, and the
// report's escaping. The CLI end to end (and a Python re-derivation of the chain) is
// tests/lab/test_report.py.
#include "lab/ledger.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lab/report.h"

namespace ouro::lab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Ledger : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ouro-ledger-" + std::to_string(getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    path_ = (dir_ / "experiments" / "ledger.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static json record(int i) {
    return {{"kind", "run"},
            {"spec", {{"question", "does change " + std::to_string(i) + " help?"}, {"level", "engine"}, {"repeats", 5}}},
            {"stats",
             {{"decode_tok_s",
               {{"baseline_median", 100.0}, {"candidate_median", 110.5}, {"ratio", 1.105}, {"ci", {1.05, 1.15}}}}}},
            {"samples", {{"baseline", {{"decode_tok_s", {99.0, 100.0, 101.0}}}},
                         {"candidate", {{"decode_tok_s", {110.0, 110.5, 111.0}}}}}},
            {"verdict", i == 2 ? "reject" : "accept"},
            {"reasons", {"reason " + std::to_string(i)}}};
  }
  void append3() {
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(append_record(path_, record(i)).ok());
  }
  std::vector<std::string> lines() const {
    std::ifstream f(path_);
    std::vector<std::string> v;
    for (std::string l; std::getline(f, l);) v.push_back(l);
    return v;
  }
  void write(const std::vector<std::string>& ls, bool final_newline = true) const {
    std::ofstream f(path_, std::ios::trunc);
    for (size_t i = 0; i < ls.size(); ++i) f << ls[i] << (i + 1 < ls.size() || final_newline ? "\n" : "");
  }
  std::string problems() const {
    std::string s;
    for (const auto& p : verify_ledger(path_, "").problems) s += p + "\n";
    return s;
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(Ledger, AppendBuildsTheChain) {
  append3();
  auto recs = read_ledger(path_);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 3u);
  std::string prev = kGenesisPrev;
  for (int i = 0; i < 3; ++i) {
    const json& r = (*recs)[i];
    EXPECT_EQ(r["seq"], i + 1);
    EXPECT_EQ(r["id"], "E000" + std::to_string(i + 1));
    EXPECT_EQ(r["prev"], prev);
    EXPECT_EQ(r["hash"], record_hash(r));
    EXPECT_EQ(r["hash"].get<std::string>().size(), 64u);
    EXPECT_TRUE(r["time"].is_string() && r["time"].get<std::string>().size() == 20) << r["time"];
    prev = r["hash"];
  }
  const VerifyResult v = verify_ledger(path_, dir_.string());  // not a git repository: no prefix check
  EXPECT_TRUE(v.ok()) << problems();
  EXPECT_EQ(v.records, 3u);
  // A given time is kept; a stale hash, id or seq from the caller is replaced.
  json r = record(4);
  r["time"] = "2026-01-02T03:04:05Z";
  r["hash"] = "x";
  r["id"] = "E9999";
  r["seq"] = 77;
  auto w = append_record(path_, r);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ((*w)["time"], "2026-01-02T03:04:05Z");
  EXPECT_EQ((*w)["id"], "E0004");
  EXPECT_TRUE(verify_ledger(path_, "").ok()) << problems();
}

TEST_F(Ledger, MissingFileIsEmpty) {
  auto recs = read_ledger(path_);
  ASSERT_TRUE(recs.ok());
  EXPECT_TRUE(recs->empty());
  EXPECT_TRUE(verify_ledger(path_, "").ok());
}

TEST_F(Ledger, InvalidUtf8AndNanStillVerify) {
  json r = record(1);
  r["note"] = std::string("bad \xff byte");
  r["stats"]["decode_tok_s"]["p_value"] = std::nan("");
  ASSERT_TRUE(append_record(path_, r).ok());
  ASSERT_TRUE(append_record(path_, record(2)).ok());
  EXPECT_TRUE(verify_ledger(path_, "").ok()) << problems();
}

TEST_F(Ledger, EditedNumberNamesTheLine) {
  append3();
  auto ls = lines();
  const size_t at = ls[1].find("\"repeats\":5");
  ASSERT_NE(at, std::string::npos);
  ls[1].replace(at, 11, "\"repeats\":6");
  write(ls);
  const VerifyResult v = verify_ledger(path_, "");
  ASSERT_EQ(v.problems.size(), 1u) << problems();
  EXPECT_EQ(v.problems[0], "line 2 (E0002): content edited: hash mismatch");
}

TEST_F(Ledger, DeletedLineBreaksTheChain) {
  append3();
  auto ls = lines();
  write({ls[0], ls[2]});
  const std::string p = problems();
  EXPECT_NE(p.find("line 2 (E0003): seq 3 does not follow seq 1: a record is missing"), std::string::npos) << p;
  EXPECT_NE(p.find("line 2 (E0003): prev does not match line 1's hash: a record was deleted or reordered"),
            std::string::npos)
      << p;
  EXPECT_EQ(p.find("hash mismatch"), std::string::npos) << p;
}

TEST_F(Ledger, DeletedFirstLine) {
  append3();
  auto ls = lines();
  write({ls[1], ls[2]});
  EXPECT_NE(problems().find("line 1 (E0002): prev is not the genesis value"), std::string::npos) << problems();
}

TEST_F(Ledger, ReorderedLines) {
  append3();
  auto ls = lines();
  write({ls[0], ls[2], ls[1]});
  const std::string p = problems();
  EXPECT_NE(p.find("line 2 (E0003): prev does not match line 1's hash"), std::string::npos) << p;
  EXPECT_NE(p.find("line 3 (E0002): seq 2 does not follow seq 3: records were reordered"), std::string::npos) << p;
}

TEST_F(Ledger, TruncatedAndGarbageLines) {
  append3();
  auto ls = lines();
  write({ls[0], ls[1], ls[2].substr(0, ls[2].size() / 2)}, false);
  std::string p = problems();
  EXPECT_NE(p.find("line 3: not a JSON object"), std::string::npos) << p;
  EXPECT_NE(p.find("line 3: no newline at the end"), std::string::npos) << p;
  auto r = read_ledger(path_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("line 3 is not a JSON object"), std::string::npos) << r.error().message;

  write({ls[0], "garbage {", ls[1], ls[2]});
  p = problems();
  EXPECT_NE(p.find("line 2: not a JSON object"), std::string::npos) << p;
  EXPECT_EQ(verify_ledger(path_, "").problems.size(), 1u) << p;  // the next line is not blamed too
  write({ls[0], "[1,2]", ls[1], ls[2]});
  EXPECT_NE(problems().find("line 2: not a JSON object"), std::string::npos);
}

TEST_F(Ledger, AppendRefusesADamagedLedger) {
  append3();
  auto ls = lines();
  ls[1].replace(ls[1].find("reason 2"), 8, "reason X");
  write(ls);
  auto r = append_record(path_, record(4));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("refusing to append"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("line 2 (E0002)"), std::string::npos) << r.error().message;
  EXPECT_EQ(lines().size(), 3u);
  EXPECT_FALSE(append_record(path_, json::array()).ok());
}

TEST_F(Ledger, FindRecord) {
  append3();
  auto recs = *read_ledger(path_);
  const std::string h2 = recs[1]["hash"];
  for (const std::string& ref : std::vector<std::string>{"E0002", "e0002", "2", "E2", h2.substr(0, 6), h2.substr(0, 12), h2}) {
    auto r = find_record(recs, ref);
    ASSERT_TRUE(r.ok()) << ref << ": " << r.error().message;
    EXPECT_EQ((*r)["id"], "E0002") << ref;
  }
  auto none = find_record(recs, "E0099");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::kRuntime);
  auto bad = find_record(recs, "abc");  // too short for a hash prefix, not a number
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUsage);
  EXPECT_FALSE(find_record(recs, "").ok());
  std::vector<json> twins = {{{"id", "E0001"}, {"seq", 1}, {"hash", "abcdef01" + std::string(56, '0')}},
                             {{"id", "E0002"}, {"seq", 2}, {"hash", "abcdef02" + std::string(56, '0')}}};
  auto amb = find_record(twins, "abcdef");
  ASSERT_FALSE(amb.ok());
  EXPECT_NE(amb.error().message.find("ambiguous"), std::string::npos);
  EXPECT_EQ((*find_record(twins, "abcdef02"))["id"], "E0002");
}

TEST(LedgerReaders, ToleratesOddRecords) {
  const std::vector<json> odd = {
      json::parse(R"({"id": 5, "seq": "x", "time": 7, "verdict": null, "spec": "not an object", "stats": [1, 2],
                      "headline": 3, "samples": {"baseline": {"decode_tok_s": "x"}, "candidate": 4},
                      "criteria": {"a": 1}, "reasons": "r", "revisions": {"baseline": 3, "candidate":
                      {"dirty": "yes", "build": "x", "env": [1]}}, "machine": [], "correctness":
                      {"heldout": 1, "top1_agreement": "1"}, "attribution": [1, {"name": 2, "delta_ms": "x"}]})"),
      json::parse(R"({"stats": {"decode_tok_s": {"ratio": "x", "ci": [1], "p_value": null, "higher_is_better": 1},
                      "m2": 5}, "samples": {"baseline": {"decode_tok_s": [1, "a", null, 2]},
                      "candidate": {"decode_tok_s": []}}, "criteria": [1, {"verdict": 3}], "reasons": [1, null],
                      "spec": {"question": ["q"], "level": {}}, "verdict": "accept"})"),
      json(42), json::array({1, 2}), json(nullptr), json::object(), json("string")};
  for (const json& r : odd) {
    EXPECT_NO_THROW({
      (void)log_line(r);
      (void)log_line(r, "decode_tok_s");
      (void)show_record(r);
      (void)headline_metric(r);
      (void)record_hash(r);
    }) << r.dump();
  }
  EXPECT_NO_THROW((void)render_report(odd, "odd"));
  EXPECT_NO_THROW((void)find_record(odd, "E0005"));
  EXPECT_NO_THROW((void)find_record(odd, "abcdef"));
}

TEST(LedgerReaders, LogAndShowContent) {
  json r = {{"id", "E0007"}, {"time", "2026-12-02T21:40:00Z"}, {"verdict", "accept"},
            {"spec", {{"question", "Is it \x1b[31mfaster?"}, {"level", "kernel"}, {"hypothesis", "fewer loads"}}},
            {"headline", "ns_per_op"},
            {"stats", {{"ns_per_op", {{"ratio", 0.8}, {"ci", {0.75, 0.85}}, {"baseline_median", 10.0}}}}},
            {"criteria", {{{"expr", "a < b"}, {"verdict", "pass"}, {"source", "inline"}}}},
            {"reasons", {"faster"}}, {"note", "n"}};
  const std::string l = log_line(r);
  EXPECT_NE(l.find("E0007"), std::string::npos);
  EXPECT_NE(l.find("2026-12-02"), std::string::npos);
  EXPECT_NE(l.find("ns_per_op x0.800 [0.750, 0.850]"), std::string::npos) << l;
  EXPECT_EQ(l.find('\x1b'), std::string::npos) << "terminal escapes from records must not reach the terminal";
  const std::string s = show_record(r);
  for (const char* want : {"question:   Is it ?[31mfaster?", "hypothesis: fewer loads", "ns_per_op *", "0.8000",
                           "pass", "a < b", "[inline]", "  - faster", "note:       n"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
}

TEST(Report, EscapesRecordTextAndHasHooks) {
  std::vector<json> recs;
  for (int i = 1; i <= 3; ++i) {
    json r = {{"id", "E000" + std::to_string(i)}, {"seq", i}, {"verdict", i == 2 ? "reject" : "accept"},
              {"spec", {{"question", i == 2 ? "<script>alert(1)</script> & \"x\"" : "q"}}},
              {"stats", {{"decode_tok_s", {{"candidate_median", 100.0 + i}, {"ratio", 1.01}}}}},
              {"samples", {{"baseline", {{"decode_tok_s", {1.0, 2.0}}}}, {"candidate", {{"decode_tok_s", {3.0}}}}}}};
    recs.push_back(r);
  }
  recs[0]["reasons"] = {"</td><img src=x onerror=alert(2)>"};
  recs[2]["id"] = "E0003\"><b>";
  const std::string h = render_report(recs, "T <i>");
  EXPECT_EQ(h.find("<script>alert"), std::string::npos);
  EXPECT_NE(h.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;x&quot;"), std::string::npos);
  EXPECT_EQ(h.find("<img"), std::string::npos);
  EXPECT_EQ(h.find("<b>"), std::string::npos);
  EXPECT_EQ(h.find("<i>"), std::string::npos);
  size_t scripts = 0;
  for (size_t p = h.find("<script"); p != std::string::npos; p = h.find("<script", p + 1)) ++scripts;
  EXPECT_EQ(scripts, 1u);
  EXPECT_NE(h.find("id=\"verdicts\""), std::string::npos);
  EXPECT_NE(h.find("<svg class=\"trend\""), std::string::npos);  // E0001 and E0003: the same (empty) workload
  EXPECT_NE(h.find("<svg class=\"chart\""), std::string::npos);
  size_t rows = 0;
  for (size_t p = h.find("<tr class=\"exp\""); p != std::string::npos; p = h.find("<tr class=\"exp\"", p + 1)) ++rows;
  EXPECT_EQ(rows, 3u);
  for (const char* external : {"http://", "https://", "src=\"", "@import", "url("})
    EXPECT_EQ(h.find(external), std::string::npos) << external;
  EXPECT_EQ(html_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
}

// Committed records must stay: dropping the last committed record keeps the chain valid, so only
// the comparison with HEAD can catch it.
TEST_F(Ledger, CommittedPrefixCheck) {
  if (std::system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "git not installed";
  append3();
  const std::string d = dir_.string();
  const std::string git = "git -C '" + d + "' -c user.name=t -c user.email=t@example.com ";
  ASSERT_EQ(std::system((git + "init -q && " + git + "add experiments/ledger.jsonl && " + git + "commit -q -m l")
                            .c_str()),
            0);
  EXPECT_TRUE(verify_ledger(path_, d).ok()) << problems();
  ASSERT_TRUE(append_record(path_, record(4), d).ok());  // appending keeps HEAD a prefix
  EXPECT_TRUE(verify_ledger(path_, d).ok());
  auto ls = lines();
  write({ls[0], ls[1]});
  EXPECT_TRUE(verify_ledger(path_, "").ok());  // the chain alone cannot tell
  VerifyResult v = verify_ledger(path_, d);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_EQ(v.problems[0],
            "line 3 (E0003): committed in HEAD but missing from the file: committed records were deleted or truncated");
  EXPECT_FALSE(append_record(path_, record(5), d).ok());
  // A subdirectory as repo_root works too (git show HEAD:./rel resolves from there).
  EXPECT_FALSE(verify_ledger(path_, (dir_ / "experiments").string()).ok());
}

}  // namespace
}  // namespace ouro::lab
