// Reading any Chrome trace-event JSON file and the analyses behind `ouro trace`: summarize (time
// per op, per layer and per thread, against the machine's ceilings), overlap (how much of A runs
// under B) and diff (an end-to-end change explained by spans). Pure functions over parsed spans;
// the CLI (src/cli/cmd_trace.cpp) only formats. User documentation: docs/trace.md, "Reading a
// trace". Times inside are microseconds, as in the file; results are in seconds.
#pragma once
#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ouro::analysis {

// A thread is (pid, tid); each is kept as text ("1", "worker") so numbers and strings both work.
struct ThreadKey {
  std::string pid, tid;
  bool operator==(const ThreadKey&) const = default;
};
// Numbers in numeric order before other text, then text order ("2" < "10" < "abc").
bool natural_less(const std::string& a, const std::string& b);
struct ThreadLess {
  bool operator()(const ThreadKey& a, const ThreadKey& b) const;
};

// One timed span: an "X" event, or a matched "B"/"E" pair.
struct Span {
  std::string name, cat;
  ThreadKey thread;
  double start = 0, end = 0;          // microseconds
  std::optional<std::string> layer;   // args.layer (an integer or a string), as text
  std::optional<double> bytes, flops; // args.bytes / args.flops when finite numbers >= 0
  std::string precision;              // args.precision ("fp32", "bf16", "int8"), may be empty
};

struct Trace {
  std::string source;                                  // the file name, for messages
  std::vector<Span> spans;                             // X events in file order, then B/E pairs
  std::map<ThreadKey, std::string, ThreadLess> thread_names;  // from "M" thread_name events
  size_t events = 0;          // all entries of traceEvents
  size_t untimed_events = 0;  // metadata, counter, flow, instant, async, unknown phases
  size_t unmatched_end = 0;   // "E" with no open "B" on its thread (ignored)
  size_t unclosed_begin = 0;  // "B" never closed (ignored)
  double wall_start = 0, wall_end = 0;  // first span start, last span end (0, 0 without spans)
  bool single_pid = true;               // labels leave the pid out when there is one process
  double wall_us() const { return wall_end - wall_start; }
  std::string thread_label(const ThreadKey& t) const;  // "tid 0 (main)", "pid 2 tid 7"
};

// Parses the object form {"traceEvents": [...]} or a bare array. Malformed JSON, a missing or
// non-array traceEvents, a non-object event or a field of the wrong type is a runtime error
// naming `source`, the event index and the field.
Expected<Trace> parse_trace(std::string_view text, const std::string& source);
Expected<Trace> load_trace(const std::string& path);

// ---- intervals (microseconds) ------------------------------------------------------------
using Interval = std::pair<double, double>;
// Sorted, disjoint, merged; empty and zero-length intervals dropped.
std::vector<Interval> union_of(std::vector<Interval> v);
double total_length(const std::vector<Interval>& u);
std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b);
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);
// Length of [lo, hi] covered by the union u.
double covered_within(const std::vector<Interval>& u, double lo, double hi);
// Parts of an op by Ouro's conventions: "kernel" (a thread's share of a parallel region) and
// "sync-wait" (the caller waiting for helpers) spans.
bool is_part(const Span& s);
// Self time: each instant covered by at least one of `spans` (one thread) goes to the innermost
// span active then (latest start; ties: earliest end, then later in the list), where kernel and
// sync-wait spans rank below every other span: their time stays with the span that encloses
// them (the op) and is theirs only where no other span is active. The results sum to the union
// of the spans.
std::vector<double> self_times(const std::vector<const Span*>& spans);

// The thread a summary's table and a diff's attribution are taken on: the thread with the most
// time covered by "op" spans when the trace has any, else the one with the most time covered by
// any span (ties: the first thread in (pid, tid) order).
std::optional<ThreadKey> main_thread(const Trace& t);

// ---- patterns --------------------------------------------------------------------------------
// `GLOB` matches the span name, `cat:GLOB` the category, `name:GLOB` the name explicitly. The glob
// must match the whole text; `*` matches any run of characters (also none); nothing else is special.
struct Pattern {
  enum class Field { kName, kCat } field = Field::kName;
  std::string glob;
  std::string text;  // as given
  bool matches(const Span& s) const;
  static Expected<Pattern> parse(const std::string& text);  // empty glob: usage error
};
bool glob_match(std::string_view glob, std::string_view s);

// ---- ceilings (the probe) --------------------------------------------------------------------
struct Ceilings {
  std::string source;
  std::optional<double> read_gb_s, fp32_gflops, bf16_gflops, int8_gops;  // best over thread counts
};
// The shape of ProbeResult::to_json: read_gb_s / fp32_gflops / bf16_gflops / int8_gops are
// objects mapping thread counts ("1", "8") to numbers; absent keys leave that ceiling unknown.
Expected<Ceilings> parse_probe(std::string_view text, const std::string& source);
Expected<Ceilings> load_probe(const std::string& path);

// ---- summarize -------------------------------------------------------------------------------
// Verdict thresholds (docs/trace.md, "Reading a trace").
struct Thresholds {
  double bound_fraction = 0.5;    // >= this share of a ceiling: memory- or compute-bound
  double waiting_fraction = 0.5;  // >= this share of an op's time in sync-wait spans: waiting
  double short_call_us = 20.0;    // mean call shorter than this and no roof reached: overhead-bound
};

struct OpRow {
  std::string name, cat;
  size_t calls = 0;
  double total_s = 0;  // sum of durations
  double self_s = 0;   // time attributed to this row (innermost), on the main thread
  double share = 0;    // self_s / wall
  double mean_s = 0;   // total_s / calls
  double wait_s = 0;   // time inside these calls covered by sync-wait spans on the main thread
  std::optional<double> bytes, flops;        // sums over calls that carry them
  std::optional<double> gb_s, gflop_s;       // bytes / total, flops / total
  std::optional<double> bw_fraction, flop_fraction;  // of the read-bandwidth / compute ceiling
  std::string peak;                          // which compute ceiling: fp32, bf16 or int8
  std::string verdict;  // memory-bound, compute-bound, waiting, overhead-bound, under-utilized, unknown
};

struct LayerRow {
  std::string layer;  // "(no layer)" for spans without args.layer
  size_t calls = 0;
  double total_s = 0, self_s = 0, share = 0;
  std::optional<double> bytes, flops, gb_s, gflop_s;
};

struct ThreadRow {
  ThreadKey thread;
  std::string label;
  size_t spans = 0;
  double busy_s = 0, waiting_s = 0, idle_s = 0;
};

struct Summary {
  std::string source;
  std::string mode;  // "op": cat "op" spans exist; "all-spans": every span of the main thread
  std::optional<ThreadKey> main;
  std::string main_label;
  size_t spans = 0;
  size_t table_spans_elsewhere = 0;  // op spans on other threads (not in the tables)
  double wall_s = 0, wall_start_us = 0;
  std::vector<OpRow> ops;            // by self time, descending
  double residual_s = 0, residual_share = 0;  // wall not covered by any table span on main
  std::vector<LayerRow> layers;      // empty when no table span has a layer
  std::vector<ThreadRow> threads;    // (pid, tid) order
  std::string busy_rule;             // which spans count as busy
  std::optional<Ceilings> ceilings;
  Thresholds thresholds;
  size_t unmatched_end = 0, unclosed_begin = 0;
};
Summary summarize(const Trace& t, const std::optional<Ceilings>& c, const Thresholds& th = {});
nlohmann::json to_json(const Summary& s);

// ---- overlap ---------------------------------------------------------------------------------
struct OverlapResult {
  std::string source;
  Pattern a, b;
  size_t a_spans = 0, b_spans = 0;
  double a_s = 0, b_s = 0;     // union lengths
  double overlap_s = 0;        // |A ∩ B|
  double fraction = 0;         // overlap / A (0 when A is empty)
  double wall_start_us = 0;
  std::vector<Interval> stretches;  // longest stretches of A \ B (us, absolute), longest first
};
OverlapResult overlap(const Trace& t, const Pattern& a, const Pattern& b, size_t top = 5);
nlohmann::json to_json(const OverlapResult& r);

// ---- diff ------------------------------------------------------------------------------------
struct DiffKey {
  std::string cat, name;
  std::optional<std::string> layer;
  bool operator<(const DiffKey& o) const;
  std::string label() const;  // "op qkv layer=3"
};
struct DiffRow {
  DiffKey key;
  double base_s = 0, cand_s = 0, delta_s = 0;  // self time on the main thread
  size_t base_calls = 0, cand_calls = 0;        // all threads
  double base_total_s = 0, cand_total_s = 0;    // sum of durations, all threads
};
struct DiffResult {
  std::string base_source, cand_source;
  std::string base_main, cand_main;
  double base_wall_s = 0, cand_wall_s = 0, delta_wall_s = 0;
  std::vector<DiffRow> rows;  // by |delta| descending (ties: larger |total delta|, then key)
  // Main-thread time in no span; delta is delta_wall minus the rows' deltas, so the sum is exact.
  double residual_base_s = 0, residual_cand_s = 0, residual_delta_s = 0;
  std::vector<DiffKey> added, vanished;  // keys only in CAND / only in BASE (any thread)
  std::vector<DiffRow> by_name;          // the rows summed over layers, per (cat, name), same order
};
DiffResult diff(const Trace& base, const Trace& cand);
nlohmann::json to_json(const DiffResult& d);

}  // namespace ouro::analysis
