#include "trace/analyze.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace ouro::analysis {

using json = nlohmann::json;

namespace {

constexpr double kUsPerS = 1e6;

// "-12", "007": an optional minus and digits only.
bool is_integer_text(const std::string& s) {
  const size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  return true;
}

// Compares two integer texts by value without converting them (any length).
int compare_integer_text(const std::string& a, const std::string& b) {
  const bool na = a[0] == '-', nb = b[0] == '-';
  auto digits = [](const std::string& s, bool neg) {
    size_t i = neg ? 1 : 0;
    while (i + 1 < s.size() && s[i] == '0') ++i;
    return std::string_view(s).substr(i);
  };
  std::string_view da = digits(a, na), db = digits(b, nb);
  const bool za = da == "0", zb = db == "0";
  if (na && !za && !(nb && !zb)) return -1;  // negative < zero or positive
  if (nb && !zb && !(na && !za)) return 1;
  int c = da.size() != db.size() ? (da.size() < db.size() ? -1 : 1) : da.compare(db);
  if (c > 0) c = 1;
  if (c < 0) c = -1;
  return na && !za ? -c : c;  // both negative: larger magnitude is smaller
}

std::string json_type(const json& v) {
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  return "a binary value";
}

// Thread ids and layers may be numbers or strings in a trace; both become text.
std::string number_text(const json& v) {
  if (v.is_number_integer()) return v.dump();  // signed or unsigned
  const double d = v.get<double>();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string((long long)d);
  return v.dump();
}

// ---- building a Trace from events ------------------------------------------------------------

struct BeginEnd {
  double ts;
  bool begin;
  std::string name, cat;
  json args;
};

void fill_args(Span& s, const json& args) {
  if (!args.is_object()) return;
  if (auto it = args.find("layer"); it != args.end()) {
    if (it->is_string()) s.layer = it->get<std::string>();
    else if (it->is_number()) s.layer = number_text(*it);
  }
  auto num = [&](const char* k) -> std::optional<double> {
    auto it = args.find(k);
    if (it == args.end() || !it->is_number()) return std::nullopt;
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) return std::nullopt;
    return v;
  };
  s.bytes = num("bytes");
  s.flops = num("flops");
  if (auto it = args.find("precision"); it != args.end() && it->is_string()) s.precision = it->get<std::string>();
}

class Builder {
 public:
  explicit Builder(std::string source) { trace_.source = std::move(source); }
  const std::string& error() const { return err_; }
  bool fail(std::string m) {
    err_ = trace_.source + ": " + std::move(m);
    return false;
  }

  // Validates one entry of traceEvents and keeps what timing needs.
  bool add_event(json& ev, size_t index) {
    ++trace_.events;
    const std::string at = "event " + std::to_string(index);
    auto wrong = [&](const char* field, const json& v, const char* expected) {
      return fail(at + ": \"" + field + "\" is " + json_type(v) + ", expected " + expected);
    };
    auto field = [&](const char* k) -> const json* {
      auto it = ev.find(k);
      return it == ev.end() || it->is_null() ? nullptr : &*it;
    };
    const json* ph = field("ph");
    if (!ph) return fail(at + ": no \"ph\" (phase) field");
    if (!ph->is_string()) return wrong("ph", *ph, "a string");
    std::string name, cat;
    if (const json* v = field("name")) {
      if (!v->is_string()) return wrong("name", *v, "a string");
      name = v->get<std::string>();
    }
    if (const json* v = field("cat")) {
      if (!v->is_string()) return wrong("cat", *v, "a string");
      cat = v->get<std::string>();
    }
    ThreadKey thread{"0", "0"};
    for (const char* k : {"pid", "tid"}) {
      const json* v = field(k);
      if (!v) continue;
      std::string text;
      if (v->is_string()) text = v->get<std::string>();
      else if (v->is_number()) text = number_text(*v);
      else return wrong(k, *v, "a number or a string");
      (k[0] == 'p' ? thread.pid : thread.tid) = std::move(text);
    }
    std::optional<double> ts, dur;
    for (const char* k : {"ts", "dur"}) {
      const json* v = field(k);
      if (!v) continue;
      if (!v->is_number()) return wrong(k, *v, "a number (microseconds)");
      const double d = v->get<double>();
      if (!std::isfinite(d)) return fail(at + ": \"" + k + "\" is not finite");
      (k[0] == 't' ? ts : dur) = d;
    }
    json args;
    if (const json* v = field("args")) {
      if (!v->is_object()) return wrong("args", *v, "an object");
      args = std::move(ev["args"]);
    }
    const std::string& p = ph->get_ref<const std::string&>();
    if (p == "X") {
      if (!ts) return fail(at + ": complete event (\"ph\": \"X\") without \"ts\"");
      if (!dur) return fail(at + ": complete event (\"ph\": \"X\") without \"dur\"");
      if (*dur < 0) return fail(at + ": \"dur\" is negative");
      Span s;
      s.name = std::move(name);
      s.cat = std::move(cat);
      s.thread = std::move(thread);
      s.start = *ts;
      s.end = *ts + *dur;
      fill_args(s, args);
      add_span(std::move(s));
    } else if (p == "B" || p == "E") {
      if (!ts) return fail(at + ": \"ph\": \"" + p + "\" without \"ts\"");
      be_[thread].push_back({*ts, p == "B", std::move(name), std::move(cat), std::move(args)});
    } else {
      ++trace_.untimed_events;
      if (p == "M" && name == "thread_name" && args.is_object()) {
        auto it = args.find("name");
        if (it != args.end() && it->is_string()) trace_.thread_names[thread] = it->get<std::string>();
      }
    }
    return true;
  }

  // Pairs B/E per thread (a stack, in time order; file order breaks ties) and sets the wall.
  Trace finish() {
    for (auto& [thread, evs] : be_) {
      std::stable_sort(evs.begin(), evs.end(), [](const BeginEnd& a, const BeginEnd& b) { return a.ts < b.ts; });
      std::vector<size_t> open;
      for (size_t i = 0; i < evs.size(); ++i) {
        if (evs[i].begin) {
          open.push_back(i);
          continue;
        }
        if (open.empty()) {
          ++trace_.unmatched_end;
          continue;
        }
        BeginEnd& b = evs[open.back()];
        open.pop_back();
        BeginEnd& e = evs[i];
        Span s;
        s.name = b.name.empty() ? e.name : b.name;
        s.cat = b.cat.empty() ? e.cat : b.cat;
        s.thread = thread;
        s.start = b.ts;
        s.end = e.ts;
        json args = b.args.is_object() ? b.args : json::object();
        if (e.args.is_object())
          for (auto it = e.args.begin(); it != e.args.end(); ++it) args[it.key()] = it.value();
        fill_args(s, args);
        add_span(std::move(s));
      }
      trace_.unclosed_begin += open.size();
    }
    be_.clear();
    if (!trace_.spans.empty()) {
      trace_.wall_start = std::numeric_limits<double>::infinity();
      trace_.wall_end = -std::numeric_limits<double>::infinity();
      for (const Span& s : trace_.spans) {
        trace_.wall_start = std::min(trace_.wall_start, s.start);
        trace_.wall_end = std::max(trace_.wall_end, s.end);
      }
    }
    std::set<std::string> pids;
    for (const Span& s : trace_.spans) pids.insert(s.thread.pid);
    for (const auto& [t, n] : trace_.thread_names) pids.insert(t.pid);
    trace_.single_pid = pids.size() <= 1;
    return std::move(trace_);
  }

 private:
  void add_span(Span s) { trace_.spans.push_back(std::move(s)); }

  Trace trace_;
  std::string err_;
  std::map<ThreadKey, std::vector<BeginEnd>, ThreadLess> be_;
};

// SAX handler: walks the document without building it; each entry of traceEvents is built as a
// small json value (fields and args' members; anything nested deeper is kept as an empty
// placeholder of its type) and handed to the Builder at once. Memory stays proportional to the
// spans, not to the JSON tree, and nothing recurses on the document's depth.
class Sax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit Sax(Builder& b) : b_(b) {}
  bool saw_events() const { return saw_events_; }
  char top() const { return top_; }

  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(number_integer_t v) { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) { return scalar(json(v)); }
  bool string(string_t& v) { return scalar(json(std::move(v))); }
  bool binary(binary_t&) { return scalar(json()); }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    if (skip_) return true;
    if (!stack_.empty()) pending_key_ = k;
    else if (top_ == 'o' && depth_ == 1) top_key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    if (what.rfind("[json.exception.", 0) == 0)
      if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    b_.fail("not valid JSON: " + what);
    return false;
  }

 private:
  static const char* kind(const json& v) {
    if (v.is_object()) return "an object";
    if (v.is_array()) return "an array";
    if (v.is_string()) return "a string";
    if (v.is_number()) return "a number";
    if (v.is_boolean()) return "a boolean";
    return "null";
  }
  bool in_events_array() const { return events_depth_ != 0 && depth_ == events_depth_; }
  bool at_trace_events_value() const { return top_ == 'o' && depth_ == 1 && top_key_ == "traceEvents"; }

  void insert(json v) {
    json& parent = *stack_.back();
    if (parent.is_object()) parent[pending_key_] = std::move(v);
    else parent.push_back(std::move(v));
  }

  bool scalar(json v) {
    if (skip_) return true;
    if (!stack_.empty()) {
      insert(std::move(v));
      return true;
    }
    if (depth_ == 0) return b_.fail(std::string("the top level is ") + kind(v) + ", expected an object with \"traceEvents\" or an array");
    if (in_events_array()) return b_.fail("event " + std::to_string(index_) + " is " + kind(v) + ", expected an object");
    if (at_trace_events_value()) return b_.fail(std::string("\"traceEvents\" is ") + kind(v) + ", expected an array");
    return true;
  }

  bool open(bool object) {
    if (skip_) {
      ++skip_;
      return true;
    }
    if (!stack_.empty()) {
      json child = object ? json::object() : json::array();
      if (stack_.size() >= 2) {  // deeper than an event's fields: keep the type only
        insert(std::move(child));
        skip_ = 1;
        return true;
      }
      insert(std::move(child));
      json& parent = *stack_.back();
      stack_.push_back(parent.is_object() ? &parent[pending_key_] : &parent.back());
      return true;
    }
    if (depth_ == 0) {
      top_ = object ? 'o' : 'a';
      depth_ = 1;
      if (!object) {
        events_depth_ = 1;
        saw_events_ = true;
      }
      return true;
    }
    if (in_events_array()) {
      if (!object) return b_.fail("event " + std::to_string(index_) + " is an array, expected an object");
      event_ = json::object();
      stack_.push_back(&event_);
      return true;
    }
    if (at_trace_events_value()) {
      if (object) return b_.fail("\"traceEvents\" is an object, expected an array");
      if (saw_events_) return b_.fail("\"traceEvents\" appears twice");
      saw_events_ = true;
      depth_ = 2;
      events_depth_ = 2;
      return true;
    }
    ++depth_;
    return true;
  }

  bool close() {
    if (skip_) {
      --skip_;
      return true;
    }
    if (!stack_.empty()) {
      stack_.pop_back();
      if (stack_.empty()) {
        if (!b_.add_event(event_, index_)) return false;
        ++index_;
        event_ = json();
      }
      return true;
    }
    --depth_;
    if (events_depth_ && depth_ < events_depth_) events_depth_ = 0;
    return true;
  }

  Builder& b_;
  char top_ = 0;          // 'o' object, 'a' array
  int depth_ = 0;         // open containers outside an event being built
  int events_depth_ = 0;  // depth inside the traceEvents array (0: not inside)
  bool saw_events_ = false;
  std::string top_key_, pending_key_;
  size_t index_ = 0;
  json event_;
  std::vector<json*> stack_;
  size_t skip_ = 0;
};

Expected<std::string> read_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return runtime_error(path + ": cannot read " + what + ": is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) return runtime_error(path + ": cannot open " + what + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return runtime_error(path + ": cannot read " + what);
  return ss.str();
}

double us_to_s(double us) { return us / kUsPerS; }

// bytes / microseconds -> GB/s (1e9 bytes/s); flops / microseconds -> GFLOP/s.
double per_us_to_giga(double amount, double us) { return amount / us / 1e3; }

}  // namespace

// ---- threads ---------------------------------------------------------------------------------

bool natural_less(const std::string& a, const std::string& b) {
  const bool na = is_integer_text(a), nb = is_integer_text(b);
  if (na && nb) {
    if (const int c = compare_integer_text(a, b); c != 0) return c < 0;
    return a < b;
  }
  if (na != nb) return na;
  return a < b;
}

bool ThreadLess::operator()(const ThreadKey& a, const ThreadKey& b) const {
  if (a.pid != b.pid) return natural_less(a.pid, b.pid);
  return natural_less(a.tid, b.tid);
}

std::string Trace::thread_label(const ThreadKey& t) const {
  std::string s = single_pid ? "tid " + t.tid : "pid " + t.pid + " tid " + t.tid;
  if (auto it = thread_names.find(t); it != thread_names.end() && !it->second.empty()) s += " (" + it->second + ")";
  return s;
}

// ---- parsing ---------------------------------------------------------------------------------

Expected<Trace> parse_trace(std::string_view text, const std::string& source) {
  Builder b(source);
  Sax sax(b);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, true, false);
  } catch (const json::exception& e) {  // not expected from the SAX interface; reported, never fatal
    b.fail(std::string("not valid JSON: ") + e.what());
    ok = false;
  }
  if (!ok) return runtime_error(b.error().empty() ? source + ": not valid JSON" : b.error());
  if (sax.top() == 'o' && !sax.saw_events()) return runtime_error(source + ": no \"traceEvents\" array in the top-level object");
  return b.finish();
}

Expected<Trace> load_trace(const std::string& path) {
  auto text = read_file(path, "the trace");
  if (!text) return text.error();
  return parse_trace(*text, path);
}

// ---- intervals -------------------------------------------------------------------------------

std::vector<Interval> union_of(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return !(i.second > i.first); }), v.end());
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second) out.back().second = std::max(out.back().second, i.second);
    else out.push_back(i);
  }
  return out;
}

double total_length(const std::vector<Interval>& u) {
  double s = 0;
  for (const Interval& i : u) s += i.second - i.first;
  return s;
}

std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) out.push_back({lo, hi});
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return out;
}

std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (const Interval& x : a) {
    double lo = x.first;
    while (j < b.size() && b[j].second <= lo) ++j;
    size_t k = j;
    while (k < b.size() && b[k].first < x.second) {
      if (b[k].first > lo) out.push_back({lo, b[k].first});
      lo = std::max(lo, b[k].second);
      ++k;
    }
    if (x.second > lo) out.push_back({lo, x.second});
  }
  return out;
}

double covered_within(const std::vector<Interval>& u, double lo, double hi) {
  if (!(hi > lo)) return 0;
  auto it = std::lower_bound(u.begin(), u.end(), lo, [](const Interval& i, double v) { return i.second <= v; });
  double c = 0;
  for (; it != u.end() && it->first < hi; ++it) c += std::min(hi, it->second) - std::max(lo, it->first);
  return c;
}

bool is_part(const Span& s) { return s.cat == "kernel" || s.cat == "sync-wait"; }

std::vector<double> self_times(const std::vector<const Span*>& spans) {
  std::vector<double> self(spans.size(), 0.0);
  struct Edge {
    double t;
    bool start;
    size_t i;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    if (!(spans[i]->end > spans[i]->start)) continue;
    edges.push_back({spans[i]->start, true, i});
    edges.push_back({spans[i]->end, false, i});
  }
  // Ends before starts at the same instant: touching spans do not overlap.
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    if (a.t != b.t) return a.t < b.t;
    return a.start < b.start;
  });
  auto inner_first = [&](size_t a, size_t b) {
    const bool pa = is_part(*spans[a]), pb = is_part(*spans[b]);
    if (pa != pb) return pb;  // parts of an op only get time no other span claims
    if (spans[a]->start != spans[b]->start) return spans[a]->start > spans[b]->start;
    if (spans[a]->end != spans[b]->end) return spans[a]->end < spans[b]->end;
    return a > b;
  };
  std::set<size_t, decltype(inner_first)> active(inner_first);
  double prev = 0;
  for (const Edge& e : edges) {
    if (!active.empty()) self[*active.begin()] += e.t - prev;
    prev = e.t;
    if (e.start) active.insert(e.i);
    else active.erase(e.i);
  }
  return self;
}

std::optional<ThreadKey> main_thread(const Trace& t) {
  const bool op_mode = std::any_of(t.spans.begin(), t.spans.end(), [](const Span& s) { return s.cat == "op"; });
  std::map<ThreadKey, std::vector<Interval>, ThreadLess> per;
  for (const Span& s : t.spans)
    if (!op_mode || s.cat == "op") per[s.thread].push_back({s.start, s.end});
  std::optional<ThreadKey> best;
  double best_len = -1;
  for (auto& [th, v] : per) {
    const double len = total_length(union_of(std::move(v)));
    if (len > best_len) {
      best_len = len;
      best = th;
    }
  }
  return best;
}

// ---- patterns --------------------------------------------------------------------------------

bool glob_match(std::string_view g, std::string_view s) {
  // Iterative matcher with backtracking to the last '*': linear-ish, no recursion.
  size_t gi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (gi < g.size() && g[gi] == '*') {
      star = gi++;
      mark = si;
    } else if (gi < g.size() && g[gi] == s[si]) {
      ++gi;
      ++si;
    } else if (star != std::string_view::npos) {
      gi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (gi < g.size() && g[gi] == '*') ++gi;
  return gi == g.size();
}

bool Pattern::matches(const Span& s) const { return glob_match(glob, field == Field::kCat ? s.cat : s.name); }

Expected<Pattern> Pattern::parse(const std::string& text) {
  Pattern p;
  p.text = text;
  p.glob = text;
  if (text.rfind("cat:", 0) == 0) {
    p.field = Field::kCat;
    p.glob = text.substr(4);
  } else if (text.rfind("name:", 0) == 0) {
    p.glob = text.substr(5);
  }
  if (p.glob.empty()) return usage_error("pattern '" + text + "' is empty");
  return p;
}

// ---- probe -----------------------------------------------------------------------------------

Expected<Ceilings> parse_probe(std::string_view text, const std::string& source) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return runtime_error(source + ": not valid JSON (expected a probe result)");
  if (!j.is_object()) return runtime_error(source + ": the probe result is " + json_type(j) + ", expected an object");
  Ceilings c;
  c.source = source;
  for (auto [key, out] : {std::pair<const char*, std::optional<double>*>{"read_gb_s", &c.read_gb_s},
                          {"fp32_gflops", &c.fp32_gflops},
                          {"bf16_gflops", &c.bf16_gflops},
                          {"int8_gops", &c.int8_gops}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object())
      return runtime_error(source + ": \"" + key + "\" is " + json_type(*it) + ", expected an object of thread count -> number");
    for (auto v = it->begin(); v != it->end(); ++v) {
      if (v->is_null()) continue;  // a measurement that failed (NaN is written as null)
      if (!v->is_number())
        return runtime_error(source + ": \"" + key + "\"[\"" + v.key() + "\"] is " + json_type(*v) + ", expected a number");
      const double x = v->get<double>();
      if (std::isfinite(x) && x > 0 && (!*out || x > **out)) *out = x;
    }
  }
  if (!c.read_gb_s && !c.fp32_gflops && !c.bf16_gflops && !c.int8_gops)
    return runtime_error(source + ": no ceilings (read_gb_s, fp32_gflops, int8_gops) in the probe result");
  return c;
}

Expected<Ceilings> load_probe(const std::string& path) {
  auto text = read_file(path, "the probe result");
  if (!text) return text.error();
  return parse_probe(*text, path);
}

// ---- summarize -------------------------------------------------------------------------------

namespace {

std::optional<double> compute_peak(const Ceilings& c, const std::string& precision, std::string* which) {
  if (precision == "int8") {
    *which = "int8";
    return c.int8_gops;
  }
  if (precision == "bf16") {
    *which = "bf16";
    return c.bf16_gflops;
  }
  *which = "fp32";
  return c.fp32_gflops;
}

std::string verdict(const OpRow& r, const std::optional<Ceilings>& c, const std::optional<double>& peak,
                    const Thresholds& th) {
  if (r.cat == "sync-wait") return "waiting";
  bool checked = false;
  if (c && r.bw_fraction) {
    checked = true;
    bool below_ridge = true;  // without FLOPs (or a compute ceiling) the memory roof is the only one
    if (r.flops && r.bytes && *r.bytes > 0 && peak && c->read_gb_s)
      below_ridge = *r.flops / *r.bytes < *peak / *c->read_gb_s;
    if (*r.bw_fraction >= th.bound_fraction && below_ridge) return "memory-bound";
  }
  if (c && r.flop_fraction) {
    checked = true;
    if (*r.flop_fraction >= th.bound_fraction) return "compute-bound";
  }
  if (r.total_s > 0 && r.wait_s / r.total_s >= th.waiting_fraction) return "waiting";
  if (!checked) return "unknown";
  return r.mean_s * kUsPerS < th.short_call_us ? "overhead-bound" : "under-utilized";
}

void add_opt(std::optional<double>& acc, const std::optional<double>& v) {
  if (v) acc = acc.value_or(0) + *v;
}

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json thread_json(const ThreadKey& t) { return {{"pid", t.pid}, {"tid", t.tid}}; }

}  // namespace

Summary summarize(const Trace& t, const std::optional<Ceilings>& c, const Thresholds& th) {
  Summary s;
  s.source = t.source;
  s.spans = t.spans.size();
  s.ceilings = c;
  s.thresholds = th;
  s.unmatched_end = t.unmatched_end;
  s.unclosed_begin = t.unclosed_begin;
  s.wall_start_us = t.wall_start;
  const double wall_us = t.wall_us();
  s.wall_s = us_to_s(wall_us);
  const bool op_mode = std::any_of(t.spans.begin(), t.spans.end(), [](const Span& x) { return x.cat == "op"; });
  s.mode = op_mode ? "op" : "all-spans";
  s.main = main_thread(t);
  if (s.main) s.main_label = t.thread_label(*s.main);

  // The table: op spans (or all spans) of the main thread; each instant goes to the innermost.
  std::vector<const Span*> table;
  std::vector<Interval> waits;
  for (const Span& x : t.spans) {
    const bool on_main = s.main && x.thread == *s.main;
    if (on_main && x.cat == "sync-wait") waits.push_back({x.start, x.end});
    if (op_mode && x.cat != "op") continue;
    if (on_main) table.push_back(&x);
    else if (op_mode) ++s.table_spans_elsewhere;
  }
  const std::vector<Interval> wait_u = union_of(std::move(waits));
  const std::vector<double> self = self_times(table);

  struct Acc {
    OpRow row;
    double total_us = 0, self_us = 0, wait_us = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> groups;  // (name, cat)
  std::map<std::string, LayerRow, decltype(&natural_less)> layers(&natural_less);
  std::map<std::string, std::pair<double, double>, decltype(&natural_less)> layer_us(&natural_less);  // total, self
  LayerRow no_layer;
  no_layer.layer = "(no layer)";
  double no_layer_total = 0, no_layer_self = 0;
  bool any_layer = false;
  double self_sum = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const Span& x = *table[i];
    const double dur = x.end - x.start;
    Acc& a = groups[{x.name, x.cat}];
    if (a.row.calls == 0) {
      a.row.name = x.name;
      a.row.cat = x.cat;
    }
    ++a.row.calls;
    a.total_us += dur;
    a.self_us += self[i];
    self_sum += self[i];
    a.wait_us += x.cat == "sync-wait" ? dur : covered_within(wait_u, x.start, x.end);
    add_opt(a.row.bytes, x.bytes);
    add_opt(a.row.flops, x.flops);
    if (a.row.peak.empty() && !x.precision.empty()) a.row.peak = x.precision;
    LayerRow* lr = &no_layer;
    double *lt = &no_layer_total, *ls = &no_layer_self;
    if (x.layer) {
      any_layer = true;
      lr = &layers[*x.layer];
      lr->layer = *x.layer;
      auto& u = layer_us[*x.layer];
      lt = &u.first;
      ls = &u.second;
    }
    ++lr->calls;
    *lt += dur;
    *ls += self[i];
    add_opt(lr->bytes, x.bytes);
    add_opt(lr->flops, x.flops);
  }

  auto share = [&](double us) { return wall_us > 0 ? us / wall_us : 0.0; };
  for (auto& [k, a] : groups) {
    OpRow r = std::move(a.row);
    r.total_s = us_to_s(a.total_us);
    r.self_s = us_to_s(a.self_us);
    r.share = share(a.self_us);
    r.mean_s = r.total_s / (double)r.calls;
    r.wait_s = us_to_s(a.wait_us);
    if (a.total_us > 0) {
      if (r.bytes) r.gb_s = per_us_to_giga(*r.bytes, a.total_us);
      if (r.flops) r.gflop_s = per_us_to_giga(*r.flops, a.total_us);
    }
    std::optional<double> peak;
    if (c) {
      std::string which;
      peak = compute_peak(*c, r.peak, &which);
      r.peak = which;
      if (r.gb_s && c->read_gb_s) r.bw_fraction = *r.gb_s / *c->read_gb_s;
      if (r.gflop_s && peak) r.flop_fraction = *r.gflop_s / *peak;
    }
    r.verdict = verdict(r, c, peak, th);
    s.ops.push_back(std::move(r));
  }
  std::sort(s.ops.begin(), s.ops.end(), [](const OpRow& a, const OpRow& b) {
    if (a.self_s != b.self_s) return a.self_s > b.self_s;
    if (a.name != b.name) return a.name < b.name;
    return a.cat < b.cat;
  });
  const double residual_us = wall_us - self_sum;
  s.residual_s = us_to_s(residual_us);
  s.residual_share = share(residual_us);

  if (any_layer) {
    auto finish_layer = [&](LayerRow r, double total_us, double self_us) {
      r.total_s = us_to_s(total_us);
      r.self_s = us_to_s(self_us);
      r.share = share(self_us);
      if (total_us > 0) {
        if (r.bytes) r.gb_s = per_us_to_giga(*r.bytes, total_us);
        if (r.flops) r.gflop_s = per_us_to_giga(*r.flops, total_us);
      }
      s.layers.push_back(std::move(r));
    };
    for (auto& [k, r] : layers) finish_layer(std::move(r), layer_us[k].first, layer_us[k].second);
    if (no_layer.calls) finish_layer(std::move(no_layer), no_layer_total, no_layer_self);
  }

  // Threads: busy = union of kernel and op spans (every span when the trace has neither).
  const bool ouro_cats = std::any_of(t.spans.begin(), t.spans.end(),
                                     [](const Span& x) { return x.cat == "op" || x.cat == "kernel"; });
  s.busy_rule = ouro_cats ? "union of cat kernel and op spans" : "union of all spans (no kernel/op spans in the trace)";
  std::map<ThreadKey, std::pair<std::vector<Interval>, std::vector<Interval>>, ThreadLess> per;
  std::map<ThreadKey, size_t, ThreadLess> counts;
  for (const auto& [th_key, name] : t.thread_names) per[th_key];
  for (const Span& x : t.spans) {
    auto& p = per[x.thread];
    ++counts[x.thread];
    if (!ouro_cats || x.cat == "op" || x.cat == "kernel") p.first.push_back({x.start, x.end});
    if (x.cat == "sync-wait") p.second.push_back({x.start, x.end});
  }
  for (auto& [th_key, p] : per) {
    ThreadRow r;
    r.thread = th_key;
    r.label = t.thread_label(th_key);
    r.spans = counts[th_key];
    const double busy = total_length(union_of(std::move(p.first)));
    r.busy_s = us_to_s(busy);
    r.waiting_s = us_to_s(total_length(union_of(std::move(p.second))));
    r.idle_s = us_to_s(wall_us - busy);
    s.threads.push_back(std::move(r));
  }
  return s;
}

json to_json(const Summary& s) {
  json j;
  j["file"] = s.source;
  j["mode"] = s.mode;
  j["spans"] = s.spans;
  j["wall_s"] = s.wall_s;
  j["wall_start_us"] = s.wall_start_us;
  j["main_thread"] = s.main ? json{{"pid", s.main->pid}, {"tid", s.main->tid}, {"label", s.main_label}} : json(nullptr);
  json ops = json::array();
  for (const OpRow& r : s.ops)
    ops.push_back({{"name", r.name},
                   {"cat", r.cat},
                   {"calls", r.calls},
                   {"total_s", r.total_s},
                   {"self_s", r.self_s},
                   {"share", r.share},
                   {"mean_s", r.mean_s},
                   {"wait_s", r.wait_s},
                   {"bytes", opt(r.bytes)},
                   {"flops", opt(r.flops)},
                   {"gb_s", opt(r.gb_s)},
                   {"gflop_s", opt(r.gflop_s)},
                   {"bw_fraction", opt(r.bw_fraction)},
                   {"flop_fraction", opt(r.flop_fraction)},
                   {"peak", r.peak.empty() ? json(nullptr) : json(r.peak)},
                   {"verdict", r.verdict}});
  j["ops"] = ops;
  j["residual"] = {{"self_s", s.residual_s},
                   {"share", s.residual_share},
                   {"what", s.mode == "op" ? "wall time not covered by any op span on the main thread"
                                           : "wall time not covered by any span on the main thread"}};
  j["op_spans_off_main"] = s.table_spans_elsewhere;
  json layers = json::array();
  for (const LayerRow& r : s.layers)
    layers.push_back({{"layer", r.layer},
                      {"calls", r.calls},
                      {"total_s", r.total_s},
                      {"self_s", r.self_s},
                      {"share", r.share},
                      {"bytes", opt(r.bytes)},
                      {"flops", opt(r.flops)},
                      {"gb_s", opt(r.gb_s)},
                      {"gflop_s", opt(r.gflop_s)}});
  j["layers"] = layers;
  json threads = json::array();
  for (const ThreadRow& r : s.threads) {
    json tj = thread_json(r.thread);
    tj["label"] = r.label;
    tj["spans"] = r.spans;
    tj["busy_s"] = r.busy_s;
    tj["waiting_s"] = r.waiting_s;
    tj["idle_s"] = r.idle_s;
    threads.push_back(std::move(tj));
  }
  j["threads"] = threads;
  j["busy_rule"] = s.busy_rule;
  if (s.ceilings)
    j["probe"] = {{"source", s.ceilings->source},
                  {"read_gb_s", opt(s.ceilings->read_gb_s)},
                  {"fp32_gflops", opt(s.ceilings->fp32_gflops)},
                  {"bf16_gflops", opt(s.ceilings->bf16_gflops)},
                  {"int8_gops", opt(s.ceilings->int8_gops)}};
  else
    j["probe"] = nullptr;
  j["thresholds"] = {{"bound_fraction", s.thresholds.bound_fraction},
                     {"waiting_fraction", s.thresholds.waiting_fraction},
                     {"short_call_us", s.thresholds.short_call_us}};
  j["unmatched_end"] = s.unmatched_end;
  j["unclosed_begin"] = s.unclosed_begin;
  return j;
}

// ---- overlap ---------------------------------------------------------------------------------

OverlapResult overlap(const Trace& t, const Pattern& a, const Pattern& b, size_t top) {
  OverlapResult r;
  r.source = t.source;
  r.a = a;
  r.b = b;
  r.wall_start_us = t.wall_start;
  std::vector<Interval> va, vb;
  for (const Span& s : t.spans) {
    if (a.matches(s)) {
      ++r.a_spans;
      va.push_back({s.start, s.end});
    }
    if (b.matches(s)) {
      ++r.b_spans;
      vb.push_back({s.start, s.end});
    }
  }
  const auto ua = union_of(std::move(va)), ub = union_of(std::move(vb));
  const double a_us = total_length(ua), b_us = total_length(ub), both_us = total_length(intersect(ua, ub));
  r.a_s = us_to_s(a_us);
  r.b_s = us_to_s(b_us);
  r.overlap_s = us_to_s(both_us);
  r.fraction = a_us > 0 ? both_us / a_us : 0.0;
  auto alone = subtract(ua, ub);
  std::stable_sort(alone.begin(), alone.end(), [](const Interval& x, const Interval& y) {
    return x.second - x.first > y.second - y.first;
  });
  if (alone.size() > top) alone.resize(top);
  r.stretches = std::move(alone);
  return r;
}

json to_json(const OverlapResult& r) {
  json st = json::array();
  for (const Interval& i : r.stretches)
    st.push_back({{"start_us", i.first},
                  {"end_us", i.second},
                  {"start_s", us_to_s(i.first - r.wall_start_us)},
                  {"duration_s", us_to_s(i.second - i.first)}});
  return {{"file", r.source},
          {"a", r.a.text},
          {"b", r.b.text},
          {"a_spans", r.a_spans},
          {"b_spans", r.b_spans},
          {"a_s", r.a_s},
          {"b_s", r.b_s},
          {"overlap_s", r.overlap_s},
          {"a_without_b_s", r.a_s - r.overlap_s},
          {"fraction", r.fraction},
          {"longest_a_without_b", st}};
}

// ---- diff ------------------------------------------------------------------------------------

bool DiffKey::operator<(const DiffKey& o) const {
  if (cat != o.cat) return cat < o.cat;
  if (name != o.name) return name < o.name;
  if (layer.has_value() != o.layer.has_value()) return !layer.has_value();
  if (layer && *layer != *o.layer) return natural_less(*layer, *o.layer);
  return false;
}

std::string DiffKey::label() const {
  std::string s = (cat.empty() ? "" : cat + " ") + name;
  if (layer) s += " layer " + *layer;
  return s;
}

namespace {

struct KeyAcc {
  size_t calls = 0;
  double total_us = 0, self_us = 0;
};
struct Profile {
  std::map<DiffKey, KeyAcc> keys;
  double self_sum_us = 0;
  std::string main;
};

Profile profile(const Trace& t) {
  Profile p;
  const auto main = main_thread(t);
  if (main) p.main = t.thread_label(*main);
  std::vector<const Span*> on_main;
  std::vector<DiffKey> main_keys;
  for (const Span& s : t.spans) {
    DiffKey k{s.cat, s.name, s.layer};
    KeyAcc& a = p.keys[k];
    ++a.calls;
    a.total_us += s.end - s.start;
    if (main && s.thread == *main) {
      on_main.push_back(&s);
      main_keys.push_back(std::move(k));
    }
  }
  const auto self = self_times(on_main);
  for (size_t i = 0; i < on_main.size(); ++i) {
    p.keys[main_keys[i]].self_us += self[i];
    p.self_sum_us += self[i];
  }
  return p;
}

json key_json(const DiffKey& k) {
  return {{"cat", k.cat}, {"name", k.name}, {"layer", k.layer ? json(*k.layer) : json(nullptr)}};
}

}  // namespace

DiffResult diff(const Trace& base, const Trace& cand) {
  DiffResult d;
  d.base_source = base.source;
  d.cand_source = cand.source;
  const Profile pb = profile(base), pc = profile(cand);
  d.base_main = pb.main;
  d.cand_main = pc.main;
  d.base_wall_s = us_to_s(base.wall_us());
  d.cand_wall_s = us_to_s(cand.wall_us());
  d.delta_wall_s = d.cand_wall_s - d.base_wall_s;
  std::set<DiffKey> keys;
  for (const auto& [k, a] : pb.keys) keys.insert(k);
  for (const auto& [k, a] : pc.keys) keys.insert(k);
  double sum_base = 0, sum_cand = 0, sum_delta = 0;
  for (const DiffKey& k : keys) {
    DiffRow r;
    r.key = k;
    auto ib = pb.keys.find(k), ic = pc.keys.find(k);
    if (ib != pb.keys.end()) {
      r.base_s = us_to_s(ib->second.self_us);
      r.base_calls = ib->second.calls;
      r.base_total_s = us_to_s(ib->second.total_us);
    }
    if (ic != pc.keys.end()) {
      r.cand_s = us_to_s(ic->second.self_us);
      r.cand_calls = ic->second.calls;
      r.cand_total_s = us_to_s(ic->second.total_us);
    }
    r.delta_s = r.cand_s - r.base_s;
    sum_base += r.base_s;
    sum_cand += r.cand_s;
    sum_delta += r.delta_s;
    if (r.base_calls == 0) d.added.push_back(k);
    if (r.cand_calls == 0) d.vanished.push_back(k);
    d.rows.push_back(std::move(r));
  }
  auto by_delta = [](const DiffRow& a, const DiffRow& b) {
    const double da = std::fabs(a.delta_s), db = std::fabs(b.delta_s);
    if (da != db) return da > db;
    const double ta = std::fabs(a.cand_total_s - a.base_total_s), tb = std::fabs(b.cand_total_s - b.base_total_s);
    return ta > tb;
  };
  std::map<DiffKey, DiffRow> names;  // rows are in key order here, so sums are reproducible
  for (const DiffRow& r : d.rows) {
    DiffRow& n = names[DiffKey{r.key.cat, r.key.name, std::nullopt}];
    n.key = DiffKey{r.key.cat, r.key.name, std::nullopt};
    n.base_s += r.base_s;
    n.cand_s += r.cand_s;
    n.base_calls += r.base_calls;
    n.cand_calls += r.cand_calls;
    n.base_total_s += r.base_total_s;
    n.cand_total_s += r.cand_total_s;
  }
  for (auto& [k, n] : names) {
    n.delta_s = n.cand_s - n.base_s;
    d.by_name.push_back(std::move(n));
  }
  std::stable_sort(d.rows.begin(), d.rows.end(), by_delta);
  std::stable_sort(d.by_name.begin(), d.by_name.end(), by_delta);
  d.residual_base_s = d.base_wall_s - sum_base;
  d.residual_cand_s = d.cand_wall_s - sum_cand;
  d.residual_delta_s = d.delta_wall_s - sum_delta;
  return d;
}

json to_json(const DiffResult& d) {
  auto rows_json = [](const std::vector<DiffRow>& v, bool with_layer) {
    json rows = json::array();
    for (const DiffRow& r : v) {
      json k = key_json(r.key);
      if (!with_layer) k.erase("layer");
      k["base_s"] = r.base_s;
      k["cand_s"] = r.cand_s;
      k["delta_s"] = r.delta_s;
      k["base_calls"] = r.base_calls;
      k["cand_calls"] = r.cand_calls;
      k["base_total_s"] = r.base_total_s;
      k["cand_total_s"] = r.cand_total_s;
      rows.push_back(std::move(k));
    }
    return rows;
  };
  json added = json::array(), vanished = json::array();
  for (const DiffKey& k : d.added) added.push_back(key_json(k));
  for (const DiffKey& k : d.vanished) vanished.push_back(key_json(k));
  return {{"base", {{"file", d.base_source}, {"wall_s", d.base_wall_s}, {"main_thread", d.base_main}}},
          {"cand", {{"file", d.cand_source}, {"wall_s", d.cand_wall_s}, {"main_thread", d.cand_main}}},
          {"delta_wall_s", d.delta_wall_s},
          {"rows", rows_json(d.rows, true)},
          {"by_name", rows_json(d.by_name, false)},
          {"residual",
           {{"what", "main-thread wall time not in any span"},
            {"base_s", d.residual_base_s},
            {"cand_s", d.residual_cand_s},
            {"delta_s", d.residual_delta_s}}},
          {"new", added},
          {"vanished", vanished}};
}

}  // namespace ouro::analysis
