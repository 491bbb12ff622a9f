// Parsing traces and probe files, and the interval and pattern helpers the three verbs share
// (summarize, overlap and diff are analyze_summarize.cpp, analyze_overlap.cpp, analyze_diff.cpp).
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

}  // namespace ouro::analysis
