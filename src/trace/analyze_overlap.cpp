// `ouro trace overlap`: how much of pattern A runs under pattern B.
#include "trace/analyze.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "trace/analyze_internal.h"

namespace ouro::analysis {

using json = nlohmann::json;

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

}  // namespace ouro::analysis
