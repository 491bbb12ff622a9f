#include "lab/trust.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lab/stats.h"

namespace ouro::lab {

namespace {

std::string f3(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}
std::string pct(double r) {
  char b[48];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * r);
  return b;
}
bool lower_better(const std::string& m) { return m.rfind("ns", 0) == 0; }
// log(x / y) oriented so that positive means "x claims more speed".
double speed_log(const std::string& m, double x, double y) {
  if (!(x > 0) || !(y > 0)) return 0;  // no figure: nothing claimed
  const double l = std::log(x / y);
  return lower_better(m) ? -l : l;
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}
double var(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (v.size() - 1);
}

// One figure's self-report against the lab's clock, process by process (log(self / lab) of each):
// the noise is the baseline's spread around its own median disagreement (the pipe's latency is in
// the lab's figures, not the process's own): both the baseline's bias and the candidate's
// difference from it must stay inside it.
void against_clock(const std::string& what, const std::vector<double>& db, const std::vector<double>& dc, double floor, TrustCheck& c) {
  const double cm = median(dc), bm = median(db);
  // Robust spread (1.4826 MAD): a run whose marker the lab stamped late (the lab's process was not
  // scheduled at once) must not widen the tolerance for every run.
  std::vector<double> dev;
  for (double d : db) dev.push_back(std::fabs(d - bm));
  const double noise = 1.4826 * median(dev);
  const double tol = std::max(floor, 5 * noise);
  const std::string line = what + ": the candidate's own timing says " + f3(std::exp(cm)) + "x what the lab's clock measured (median of " +
                           std::to_string(dc.size()) + " runs), the baseline's " + f3(std::exp(bm)) + "x; tolerance " + pct(tol);
  c.detail += (c.detail.empty() ? "" : "; ") + line;
  if (std::fabs(bm) > tol) {
    c.verdict = "fail";
    c.baseline_at_fault = true;
  } else if (std::fabs(cm - bm) > tol) {
    c.verdict = "fail";
  }
}

// Self-report against the lab's clock, run by run: the worker's timestamps, then each `ouro bench`
// process's figure against the lab's clock between its markers.
void self_report(const TrustInput& in, std::vector<TrustCheck>& out) {
  std::vector<std::string> metrics;
  for (const auto& run : in.base)
    for (const auto& [m, v] : run.self)
      if (run.lab.count(m) && std::find(metrics.begin(), metrics.end(), m) == metrics.end()) metrics.push_back(m);
  if (metrics.empty()) {
    out.push_back({"measurement_mismatch", "skipped", "no self-reported figures to compare"});
    return;
  }
  TrustCheck c{"measurement_mismatch", "pass", ""};
  for (const auto& m : metrics) {
    std::vector<double> db, dc;
    for (const auto& r : in.base)
      if (r.self.count(m) && r.lab.count(m)) db.push_back(speed_log(m, r.self.at(m), r.lab.at(m)));
    for (const auto& r : in.cand)
      if (r.self.count(m) && r.lab.count(m)) dc.push_back(speed_log(m, r.self.at(m), r.lab.at(m)));
    if (!db.empty() && !dc.empty()) against_clock(m, db, dc, 0.03, c);
  }
  for (const auto& [m, bl] : in.bench_lab[0]) {
    if (!in.bench_self[0].count(m) || !in.bench_self[1].count(m)) continue;
    if (!in.bench_lab[1].count(m)) {  // said, not failed: an older candidate revision has no --markers
      c.detail += (c.detail.empty() ? "" : "; ") + std::string("`ouro bench` ") + m +
                  ": the candidate's bench rejected --markers (a revision from before them?), so only the pair check below applies";
      continue;
    }
    std::vector<double> d[2];
    int unframed = 0;
    for (int side = 0; side < 2; ++side) {
      const auto &self = in.bench_self[side].at(m), &lab = in.bench_lab[side].at(m);
      for (size_t k = 0; k < self.size() && k < lab.size(); ++k)
        if (std::isfinite(lab[k]) && lab[k] > 0) d[side].push_back(speed_log(m, self[k], lab[k]));
        else if (side == 1) ++unframed;
    }
    if (d[0].empty()) continue;  // the baseline printed no markers: nothing sets the noise
    if (d[1].empty()) {
      c.verdict = "fail";
      c.detail += (c.detail.empty() ? "" : "; ") + std::string("`ouro bench` ") + m + ": the candidate accepted --markers but printed none in " +
                  std::to_string(unframed) + " processes, so its figures cannot be checked against the lab's clock";
      continue;
    }
    // At least 10%: a bench process's frame is one repeat (~0.1 s here), and with its threads on
    // every core the lab's read of a marker waits for a core now and then: 3.2% off on a busy
    // host at -t 2 (2026-12-06). A smaller lie changes no verdict (the lab's clock decides).
    against_clock("`ouro bench` " + m + " (between its markers)", d[0], d[1], 0.10, c);
  }
  // `ouro bench`'s own figures, in pairs run back to back (drift cancels within a pair as in the
  // timed pairs): the median pair ratio against the lab's. Its noise is the larger of the timed
  // pairs' and the bench pairs' own spread, shrunk for a median of several; at least 15%, because
  // a bench process's decode figure alone swings by 10-15% here, and a smaller lie changes no
  // verdict (the lab's clock decides), it only goes unnamed.
  for (const auto& [m, bc] : in.bench_self[1]) {
    if (!in.bench_self[0].count(m)) continue;
    const auto& bb = in.bench_self[0].at(m);
    std::vector<double> logr, blogr;
    for (size_t i = 0; i < in.base.size() && i < in.cand.size(); ++i)
      if (in.base[i].lab.count(m) && in.cand[i].lab.count(m)) logr.push_back(speed_log(m, in.cand[i].lab.at(m), in.base[i].lab.at(m)));
    for (size_t k = 0; k < bc.size() && k < bb.size(); ++k) blogr.push_back(speed_log(m, bc[k], bb[k]));
    if (logr.size() < 2 || blogr.empty()) continue;
    const double e = median(blogr) - median(logr);
    const double n = (double)blogr.size();
    const double spread = std::max(std::sqrt(var(logr)), blogr.size() >= 3 ? std::sqrt(var(blogr)) : 0.0);
    const double tol = std::max(0.15, 3.5 * spread * (n > 1 ? 1.25 / std::sqrt(n) : 1.0));
    const std::string line = "`ouro bench` " + m + ": the candidate's own benchmark says " + f3(std::exp(median(blogr))) +
                             "x the baseline's (median of " + std::to_string(blogr.size()) + " back-to-back pairs), the lab's clock " +
                             f3(std::exp(median(logr))) + "x; tolerance " + pct(tol);
    c.detail += (c.detail.empty() ? "" : "; ") + line;
    if (std::fabs(e) > tol) c.verdict = "fail";
  }
  out.push_back(c);
}

void outputs(const TrustInput& in, std::vector<TrustCheck>& out) {
  TrustCheck c{"timed_outputs_differ", "pass", ""};
  int own = 0, vs_base = 0, compared = 0;
  std::string first;
  for (int side = 0; side < 2; ++side) {
    const auto& runs = side ? in.cand : in.base;
    for (size_t i = 0; i < runs.size(); ++i)
      for (const auto& s : runs[i].slots) {
        const std::string got = s.output_sha256.empty() ? tokens_key(s.tokens) : s.output_sha256;
        auto it = in.checked[side].find(s.key);
        if (it != in.checked[side].end() && it->second != got) {
          if (side == 0) {
            c.verdict = "fail";
            c.baseline_at_fault = true;
            c.detail = "the baseline's timed output for " + s.key + " differs from its own checked output: it is not reproducible";
            out.push_back(c);
            return;
          }
          if (!own++) first = "pair " + std::to_string(i + 1) + ", input " + s.key;
        }
      }
  }
  // Inputs both sides also ran in checked runs with different answers (a timed input rechecked
  // after timing, runner.cpp): the candidate computes this answer when checked too, so it is its
  // numerics (the correctness criteria judge them), not a guess that it is timed.
  int numerics = 0;
  auto checked_differ = [&](const std::string& key) {
    auto b = in.checked[0].find(key), d = in.checked[1].find(key);
    return b != in.checked[0].end() && d != in.checked[1].end() && b->second != d->second;
  };
  if (in.checked_all_equal)
    for (size_t i = 0; i < in.base.size() && i < in.cand.size(); ++i)
      for (size_t k = 0; k < in.base[i].slots.size() && k < in.cand[i].slots.size(); ++k) {
        const TrustSlot &b = in.base[i].slots[k], &d = in.cand[i].slots[k];
        const std::string gb = b.output_sha256.empty() ? tokens_key(b.tokens) : b.output_sha256;
        const std::string gd = d.output_sha256.empty() ? tokens_key(d.tokens) : d.output_sha256;
        ++compared;
        if (gb == gd) continue;
        if (b.key == d.key && checked_differ(d.key)) {
          ++numerics;
          continue;
        }
        if (!vs_base++ && first.empty()) first = "pair " + std::to_string(i + 1) + ", input " + d.key;
      }
  const std::string rechecked =
      numerics ? "; " + std::to_string(numerics) + " differ from the baseline's where both sides' checked runs of the input differ too "
                     "(the candidate's numerics, judged by the correctness criteria)"
               : "";
  if (own || vs_base) {
    c.verdict = "fail";
    c.detail = std::to_string(own) + " timed output(s) differ from the candidate's own checked outputs for the same input" +
               (in.checked_all_equal ? ", " + std::to_string(vs_base) + " of " + std::to_string(compared) +
                                           " from the baseline's (whose checked outputs it matched exactly)"
                                     : "") +
               "; first: " + first + rechecked;
  } else {
    c.detail = "every timed output equals the checked output for its input" +
               std::string(in.checked_all_equal ? " and the baseline's timed output (" + std::to_string(compared - numerics) + " compared)"
                                                : "") +
               rechecked;
  }
  out.push_back(c);
}

void heldout_speed(const TrustInput& in, std::vector<TrustCheck>& out) {
  std::vector<std::string> metrics;
  for (const auto& r : in.base)
    for (const auto& sl : r.slots)
      for (const auto& [m, v] : sl.lab)
        if (std::find(metrics.begin(), metrics.end(), m) == metrics.end()) metrics.push_back(m);
  TrustCheck c{"heldout_speed_differs", "pass", ""};
  bool any = false;
  for (const auto& m : metrics) {
    std::vector<double> spec, held;
    for (size_t i = 0; i < in.base.size() && i < in.cand.size(); ++i)
      for (size_t k = 0; k < in.base[i].slots.size() && k < in.cand[i].slots.size(); ++k) {
        const TrustSlot &b = in.base[i].slots[k], &d = in.cand[i].slots[k];
        if (!b.lab.count(m) || !d.lab.count(m)) continue;
        (d.heldout ? held : spec).push_back(speed_log(m, d.lab.at(m), b.lab.at(m)));
      }
    if (spec.size() < 2 || held.size() < 2) continue;
    any = true;
    // One noise for both groups (an honest change speeds up every input of the same length alike):
    // the pooled sd of the request ratios around their group's mean, with n - 2 degrees of freedom,
    // and Student's t at one-sided 1 in 2000. With few pairs the sd is itself uncertain: the old
    // rule, 4 Welch standard errors, rested on two held-out requests in a 5-pair run, and an honest
    // candidate 1.74x faster on 3 spec requests and 1.55x on 2 held-out ones (prefill of a single
    // request per run, CI 2026-12-06) failed by 0.7%. A memorising candidate is hundreds of times
    // faster on the inputs it has seen, far beyond any of these tolerances.
    const double ns = (double)spec.size(), nh = (double)held.size();
    const double delta = mean(spec) - mean(held);
    const double pooled = std::sqrt(((ns - 1) * var(spec) + (nh - 1) * var(held)) / (ns + nh - 2));
    const double se = pooled * std::sqrt(1 / ns + 1 / nh);
    const double tol = std::max(0.10, student_t_quantile(0.9995, ns + nh - 2) * se);
    c.detail += (c.detail.empty() ? "" : "; ") + m + ": candidate/baseline " + f3(std::exp(mean(spec))) + "x on " +
                std::to_string(spec.size()) + " spec-input runs, " + f3(std::exp(mean(held))) + "x on " + std::to_string(held.size()) +
                " held-out ones; tolerance " + pct(tol);
    if (delta > tol) c.verdict = "fail";
  }
  if (!any) {
    c.verdict = "skipped";
    c.detail = "fewer than 2 timed runs on spec inputs or on held-out inputs";
  }
  out.push_back(c);
}

void cpu(const TrustInput& in, std::vector<TrustCheck>& out) {
  if (in.allowed_cores <= 0) {
    out.push_back({"cpu_overuse", "skipped", "the spec does not limit threads"});
    return;
  }
  std::vector<double> cc, bc;
  for (const auto& r : in.cand)
    if (r.cpu_cores > 0) cc.push_back(r.cpu_cores);
  for (const auto& r : in.base)
    if (r.cpu_cores > 0) bc.push_back(r.cpu_cores);
  if (cc.empty()) {
    out.push_back({"cpu_overuse", "skipped", "no CPU figures"});
    return;
  }
  const double limit = in.allowed_cores + 0.3;
  TrustCheck c{"cpu_overuse", median(cc) > limit ? "fail" : "pass",
               "the candidate used " + f3(median(cc)) + " cores while timed (median of " + std::to_string(cc.size()) +
                   " runs; the baseline " + (bc.empty() ? std::string("?") : f3(median(bc))) + "), " + f3(in.allowed_cores) +
                   " thread(s) allowed, limit " + f3(limit)};
  out.push_back(c);
}

}  // namespace

std::string tokens_key(const std::vector<int>& t) {
  std::string s;
  for (int x : t) s += std::to_string(x) + ",";
  return s;
}

std::vector<TrustCheck> check_trust(const TrustInput& in) {
  std::vector<TrustCheck> out;
  // The most specific explanation first: rejected_for names the first failure.
  outputs(in, out);
  heldout_speed(in, out);
  cpu(in, out);
  self_report(in, out);
  return out;
}

nlohmann::json trust_json(const std::vector<TrustCheck>& checks) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& c : checks) a.push_back({{"check", c.code}, {"verdict", c.verdict}, {"detail", c.detail}});
  return a;
}

}  // namespace ouro::lab
