// ouro bench: prefill (ppN) and decode (tgN) throughput, median/min/max over repeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cli/common.h"
#include "core/fault.h"
#include "ouro_version.h"
#include "lab/probe.h"
#include "runtime/sampler.h"
#include "trace/trace.h"

namespace ouro {

namespace {

const char* kUsage =
    "usage: ouro bench [--prompt-len 512] [--gen-len 128] [--depth 0] [--repeats 5] [--warmup 1] [--json]\n"
    "  Prefill: one forward over prompt-len tokens from an empty cache (pp).\n"
    "  Decode: gen-len greedy single-token steps from an empty cache (tg), as llama-bench does.\n"
    "  --depth N: both start after N cached tokens (prefilled once, untimed), as llama-bench's -d does.\n"
    "  Quantization flags (--weights, --w8a8-ops, --w8a8-layers, --kv, --kv-layers): docs/quantization.md\n"
    "  --trace FILE       Chrome trace of the measured repeats (docs/trace.md); --trace-buffer N\n"
    "  --markers          print @timed-start / @timed-end lines around each measured repeat (the lab\n"
    "                     stamps them on its own clock to check the figures this prints)\n"
    "  -m, --model PATH   -t, --threads N   --ctx N   --isa auto|avx512|avx2|scalar\n";

struct Stats { double median, min, max; };
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {med, v.front(), v.back()};
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(concat(kCommonValueFlags, kTraceFlags), {"--prompt-len", "--gen-len", "--depth", "--repeats", "--warmup"}), {"--json", "--markers"}); !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  auto pl = a.integer("--prompt-len", 512, 0, 1 << 20);
  auto gl = a.integer("--gen-len", 128, 0, 1 << 20);
  auto reps = a.integer("--repeats", 5, 1, 1000);
  auto warm = a.integer("--warmup", 1, 0, 100);
  auto depth = a.integer("--depth", 0, 0, 1 << 24);
  for (auto* v : {&pl, &gl, &reps, &warm, &depth})
    if (!*v) return report(v->error());
  if (*pl == 0 && *gl == 0) return report(usage_error("nothing to measure: --prompt-len and --gen-len are both 0"));
  auto eng = load_engine(a);
  if (!eng) return report(eng.error());
  Engine& e = **eng;
  const int n_vocab = e.model().info().n_vocab;
  // The trace covers the measured repeats, not the warm-up (started when warm-up ends).
  if (*warm == 0)
    if (Status s = start_trace(a); !s) return report(s.error());
  auto st = e.new_state();
  if (*depth + *pl > st->n_ctx() || *depth + *gl > st->n_ctx())
    return report(usage_error("--depth plus --prompt-len/--gen-len exceed the context of " + std::to_string(st->n_ctx()) +
                              " (raise --ctx)"));

  std::mt19937 rng(1234);
  std::vector<int> prompt(*pl), ctx_tokens(*depth);
  for (auto& t : prompt) t = (int)(rng() % (uint32_t)n_vocab);
  for (auto& t : ctx_tokens) t = (int)(rng() % (uint32_t)n_vocab);
  // Starts a measurement with exactly the --depth tokens cached: filled once (untimed), later
  // measurements go back to the mark set there (the recurrent state copied back, the positions
  // after it dropped), so a hybrid model does not fill the depth again either.
  std::optional<SequenceState::Mark> at_depth;
  auto start_at_depth = [&]() -> Status {
    if (at_depth && st->rewind(*at_depth)) return Ok{};
    st->reset();
    if (!ctx_tokens.empty()) {
      trace::Span phase("depth_fill", "phase", -1, (int)ctx_tokens.size());
      if (Status s = st->forward(ctx_tokens.data(), (int)ctx_tokens.size(), nullptr, false, e.pool(), e.kernels()); !s) return s;
    }
    at_depth = st->mark();
    return Ok{};
  };
  std::vector<float> logits(n_vocab);
  fault::at_run_start();
  const double inflate = fault::inflation("bench");  // 1 unless the lab's inflating adversary is on
  using clock = std::chrono::steady_clock;
  std::vector<double> pp, tg;
  // The lab's frame: a line before each measured repeat's clock starts and one after it stops.
  const bool markers = a.has("--markers");
  auto mark = [&](bool keep, const char* line) {
    if (!markers || !keep) return;
    std::fputs(line, stdout);
    std::fflush(stdout);
  };
  for (int r = 0; r < *warm + *reps; ++r) {
    const bool keep = r >= *warm;
    if (r == *warm && *warm > 0)
      if (Status s = start_trace(a); !s) return report(s.error());
    if (*pl > 0) {
      if (Status s = start_at_depth(); !s) return report(s.error());
      mark(keep, "@timed-start\n");
      auto t0 = clock::now();
      {
        trace::Span phase("prefill", "phase", -1, (int)prompt.size());
        phase.pos(st->n_past());
        if (Status s = st->forward(prompt.data(), (int)prompt.size(), logits.data(), false, e.pool(), e.kernels()); !s)
          return report(s.error());
      }
      const auto t1 = clock::now();
      mark(keep, "@timed-end\n");
      if (keep) pp.push_back(*pl / std::chrono::duration<double>(t1 - t0).count());
      trace::counter("kv_cache", st->n_past());
    }
    if (*gl > 0) {
      if (Status s = start_at_depth(); !s) return report(s.error());
      int tok = prompt.empty() ? 1 : prompt[0];
      mark(keep, "@timed-start\n");
      auto t0 = clock::now();
      for (int i = 0; i < *gl; ++i) {
        {
          trace::Span phase("decode", "phase", -1, 1);
          phase.pos(st->n_past());
          if (Status s = st->decode(tok, logits.data(), e.pool(), e.kernels()); !s) return report(s.error());
        }
        trace::Span sp("sample", "sample", -1, 1, 4.0 * n_vocab);
        tok = argmax(logits.data(), n_vocab);
      }
      const auto t1 = clock::now();
      mark(keep, "@timed-end\n");
      if (keep) tg.push_back(inflate * *gl / std::chrono::duration<double>(t1 - t0).count());
    }
  }
  if (Status s = finish_trace(a, e); !s) return report(s.error());
  // Decode reads every weight once per token plus, on average, the depth and half the new tokens' KV,
  // and reads and writes the recurrent state once (KDA's; 0 for llama).
  const double kv_avg = ((double)*depth + 0.5 * (double)*gl) * st->kv_bytes_per_token();
  const double state_rw = 2.0 * (double)st->state_bytes();
  const double bytes_per_tok = (double)e.model().weight_bytes_per_token() + kv_avg + state_rw;
  nlohmann::json j = {{"commit", OURO_COMMIT},
                      {"model", e.config().model_path},
                      {"threads", e.config().threads},
                      {"isa", isa_name(e.config().isa)},
                      {"cpu", cpu_features().model_name},
                      {"cpu_features", cpu_features().flags_string()},
                      {"build_flags", OURO_BUILD_DESC},
                      {"prompt_len", *pl},
                      {"gen_len", *gl},
                      {"depth", *depth},
                      {"weights", e.model().weights_desc()},
                      {"kv", e.kv_spec().describe()},
                      {"kv_bytes_per_token", st->kv_bytes_per_token()},
                      {"state_bytes", st->state_bytes()},
                      {"state_bytes_per_decode_token", state_rw},
                      {"repeats", *reps},
                      {"warmup", *warm},
                      {"bytes_per_decode_token", bytes_per_tok}};
  // The machine's ceiling from `ouro probe`'s cache (not measured here: run `ouro probe` once).
  if (auto probe = load_cached_probe()) {
    j["probe"] = nlohmann::json::parse(probe->to_json());
    if (probe->best_read_gb_s() > 0 && !tg.empty())
      j["decode_fraction_of_read_bw"] = stats(tg).median * bytes_per_tok / 1e9 / probe->best_read_gb_s();
  } else {
    j["probe"] = nullptr;
  }
  if (!pp.empty()) {
    Stats s = stats(pp);
    j["prefill_tok_s"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"samples", pp}};
  }
  if (!tg.empty()) {
    Stats s = stats(tg);
    j["decode_tok_s"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"samples", tg}};
    j["decode_gb_s"] = s.median * bytes_per_tok / 1e9;
  }
  if (a.has("--json")) {
    std::puts(j.dump().c_str());
  } else {
    std::printf("model %s  threads %d  isa %s  commit %s\n", e.config().model_path.c_str(), e.config().threads,
                isa_name(e.config().isa), OURO_COMMIT);
    std::printf("weights %s  kv %s (%zu bytes/token)  depth %lld\n", e.model().weights_desc().c_str(),
                e.kv_spec().describe().c_str(), st->kv_bytes_per_token(), *depth);
    if (!pp.empty()) {
      Stats s = stats(pp);
      std::printf("pp%lld  %8.1f tok/s  (min %.1f, max %.1f, %lld runs)\n", *pl, s.median, s.min, s.max, *reps);
    }
    if (!tg.empty()) {
      Stats s = stats(tg);
      std::printf("tg%lld  %8.1f tok/s  (min %.1f, max %.1f)  %.1f GB/s achieved", *gl, s.median, s.min, s.max,
                  s.median * bytes_per_tok / 1e9);
      if (j.contains("decode_fraction_of_read_bw"))
        std::printf(", %.0f%% of the probe's read bandwidth", 100 * j["decode_fraction_of_read_bw"].get<double>());
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace ouro
