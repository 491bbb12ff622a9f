// ouro quality: what a quantization costs in quality. Runs a fixed evaluation text through the
// candidate configuration (the launch flags: --weights, --w8a8-ops, --kv, --kv-layers, ...) and
// through the reference (the same model with native weights and an f32 KV cache; --ref-model: the
// same model in another file, e.g. F32 for a Q8_0 one), and reports
// perplexity, the KL divergence of the next-token distributions (mean, median, p99, max), top-1
// agreement and where greedy continuations first diverge. docs/quantization.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "ouro_version.h"
#include "runtime/quality.h"

namespace ouro {

namespace {

const char* kUsage =
    "usage: ouro quality [--text FILE] [--ctx 512] [--chunks N] [--prompts 8] [--greedy-len 32] [--json]\n"
    "                    [--ref-model PATH]\n"
    "                    [--weights w8a8|native] [--w8a8-ops LIST] [--w8a8-layers RANGES]\n"
    "                    [--kv TYPE|k=TYPE,v=TYPE] [--kv-layers RANGE:TYPE,...]\n"
    "  Compares the configuration given by the flags (the candidate) with the same model's reference\n"
    "  (native weights, f32 KV cache) on an evaluation text (default: data/eval/ouro-eval.txt):\n"
    "  the text is cut into chunks of --ctx tokens and the second half of each chunk is scored, as\n"
    "  llama.cpp's perplexity tool does. Reports perplexity of both, KL(reference || candidate) of\n"
    "  the next-token distribution (mean, median, p99, max), top-1 agreement, and the first position\n"
    "  where greedy continuations (--greedy-len tokens after --prompts prompts taken from the text)\n"
    "  differ. --chunks 0 (default) uses every whole chunk.\n"
    "  --ref-model PATH: the reference is that file instead (the same model in another format, e.g.\n"
    "  the F32 file for a Q8_0 one: same architecture, layers, width and vocabulary), native + f32.\n"
    "  -m, --model PATH   -t, --threads N   --isa auto|avx512|avx2|scalar\n";


}  // namespace

int cmd_quality(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(kCommonValueFlags, {"--text", "--chunks", "--prompts", "--greedy-len", "--ref-model"}),
                         {"--json"});
      !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  auto chunks = a.integer("--chunks", 0, 0, 1 << 20);
  auto prompts = a.integer("--prompts", 8, 0, 1000);
  auto glen = a.integer("--greedy-len", 32, 1, 4096);
  for (auto* v : {&chunks, &prompts, &glen})
    if (!*v) return report(v->error());
  auto cfg = launch_config_from(a);
  if (!cfg) return report(cfg.error());
  if (cfg->n_ctx <= 0) cfg->n_ctx = 512;
  const std::string text_path = a.has("--text") ? a.str("--text") : find_repo_file("data/eval/ouro-eval.txt");
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return report(usage_error("cannot read the evaluation text '" + text_path + "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  auto eng = Engine::load(*cfg);
  if (!eng) return report(eng.error());
  Engine& e = **eng;
  // The reference: the same file (or --ref-model's) with native weights; it runs on the candidate's
  // threads (one pool).
  const std::string ref_path = a.has("--ref-model") ? a.str("--ref-model") : cfg->model_path;
  auto ref_model = Model::load(ref_path, WeightRequest{}, cfg->isa, e.pool());
  if (!ref_model) return report(ref_model.error());
  {
    const ModelInfo &mi = e.model().info(), &ri = (*ref_model)->info();
    if (mi.arch != ri.arch || mi.n_layer != ri.n_layer || mi.n_embd != ri.n_embd || mi.n_vocab != ri.n_vocab)
      return report(usage_error("flag --ref-model: '" + ref_path + "' is not the same model as '" + cfg->model_path + "' (" +
                                ri.arch + ", " + std::to_string(ri.n_layer) + " layers, width " + std::to_string(ri.n_embd) +
                                ", " + std::to_string(ri.n_vocab) + " tokens against " + mi.arch + ", " +
                                std::to_string(mi.n_layer) + ", " + std::to_string(mi.n_embd) + ", " +
                                std::to_string(mi.n_vocab) + ")"));
  }
  const int n_ctx = e.config().n_ctx, nv = e.model().info().n_vocab;
  if (n_ctx < 16) return report(usage_error("--ctx must be at least 16 for quality"));
  const std::vector<int> toks = e.tokenizer().encode(text, false, false);
  const int n_chunks_all = (int)(toks.size() / n_ctx);
  if (n_chunks_all < 1)
    return report(usage_error("the evaluation text has " + std::to_string(toks.size()) + " tokens, fewer than one chunk of " +
                              std::to_string(n_ctx)));
  const int n_chunks = *chunks > 0 ? std::min<int>((int)*chunks, n_chunks_all) : n_chunks_all;

  SequenceState cand(e.model(), n_ctx, std::min(n_ctx, 512), e.kv_spec());
  SequenceState ref(**ref_model, n_ctx, std::min(n_ctx, 512), KvSpec{});
  std::vector<float> lc((size_t)n_ctx * nv), lr((size_t)n_ctx * nv);
  const int first = n_ctx / 2;  // score the second half of each chunk (llama.cpp's convention)
  std::vector<double> kls;
  double nll_c = 0, nll_r = 0, top1 = 0;
  for (int ch = 0; ch < n_chunks; ++ch) {
    const int* chunk = toks.data() + (size_t)ch * n_ctx;
    for (auto [st, lg] : {std::pair{&cand, &lc}, std::pair{&ref, &lr}}) {
      st->reset();
      if (Status s = st->forward(chunk, n_ctx, lg->data(), true, e.pool(), e.kernels()); !s) return report(s.error());
    }
    const int n_pos = n_ctx - 1 - first;
    std::vector<double> kl(n_pos), lpc(n_pos), lpr(n_pos), same(n_pos);
    e.pool().run([&](int t, int nt) {
      int64_t b, en;
      ThreadPool::split(n_pos, t, nt, 1, &b, &en);
      for (int64_t k = b; k < en; ++k) {
        const int i = first + (int)k;
        const float* r = &lr[(size_t)i * nv];
        const float* c = &lc[(size_t)i * nv];
        const double lse_r = log_sum_exp(r, nv), lse_c = log_sum_exp(c, nv);
        kl[k] = kl_divergence(r, c, nv, lse_r, lse_c);
        lpr[k] = r[chunk[i + 1]] - lse_r;
        lpc[k] = c[chunk[i + 1]] - lse_c;
        same[k] = argmax_row(r, nv) == argmax_row(c, nv);
      }
    }, "quality");
    for (int k = 0; k < n_pos; ++k) {
      kls.push_back(kl[k]);
      nll_c -= lpc[k];
      nll_r -= lpr[k];
      top1 += same[k];
    }
  }
  const double n = (double)kls.size();
  double kl_mean = 0;
  for (double v : kls) kl_mean += v / n;

  // Greedy continuations from prompts spread over the text.
  const int plen = std::min(64, n_ctx / 4), L = (int)*glen;
  std::vector<int> first_div;
  int identical = 0;
  if (*prompts > 0 && plen + L > n_ctx) return report(usage_error("--greedy-len does not fit in --ctx"));
  std::vector<float> row(nv);
  for (int g = 0; g < *prompts; ++g) {
    const size_t span = toks.size() > (size_t)plen ? toks.size() - plen : 0;
    const size_t off = (size_t)((double)g / (double)*prompts * (double)span);
    std::vector<int> outs[2];
    int side = 0;
    for (SequenceState* st : {&cand, &ref}) {
      st->reset();
      if (Status s = st->forward(toks.data() + off, plen, row.data(), false, e.pool(), e.kernels()); !s)
        return report(s.error());
      for (int i = 0; i < L; ++i) {
        int tok = (int)argmax_row(row.data(), nv);
        outs[side].push_back(tok);
        if (i + 1 < L)
          if (Status s = st->decode(tok, row.data(), e.pool(), e.kernels()); !s) return report(s.error());
      }
      ++side;
    }
    int d = 0;
    while (d < L && outs[0][d] == outs[1][d]) ++d;
    first_div.push_back(d);
    identical += d == L;
  }
  double fd_mean = 0;
  for (int d : first_div) fd_mean += (double)d / std::max<size_t>(1, first_div.size());

  const double secs = std::chrono::duration<double>(clock::now() - t_start).count();
  nlohmann::json j = {
      {"commit", OURO_COMMIT},
      {"model", e.config().model_path},
      {"text", text_path},
      {"text_tokens", toks.size()},
      {"ctx", n_ctx},
      {"chunks", n_chunks},
      {"scored_tokens", kls.size()},
      {"candidate", {{"weights", e.model().weights_desc()}, {"kv", e.kv_spec().describe()}}},
      {"reference", {{"model", ref_path}, {"weights", "native"}, {"kv", "f32"}}},
      {"kv_bytes_per_token", {{"candidate", cand.kv_bytes_per_token()}, {"reference", ref.kv_bytes_per_token()}}},
      {"ppl", std::exp(nll_c / n)},
      {"ppl_ref", std::exp(nll_r / n)},
      {"ln_ppl_ratio", (nll_c - nll_r) / n},
      {"kl_mean", kl_mean},
      {"kl_median", quantile(kls, 0.5)},
      {"kl_p99", quantile(kls, 0.99)},
      {"kl_max", quantile(kls, 1.0)},
      {"top1_agreement", top1 / n},
      {"greedy",
       {{"prompts", first_div.size()},
        {"prompt_len", plen},
        {"len", L},
        {"first_divergence", first_div},
        {"first_divergence_mean", fd_mean},
        {"first_divergence_min", first_div.empty() ? 0 : *std::min_element(first_div.begin(), first_div.end())},
        {"identical", first_div.empty() ? 0.0 : (double)identical / first_div.size()}}},
      {"seconds", secs}};
  if (a.has("--json")) {
    std::puts(j.dump().c_str());
    return 0;
  }
  std::printf("candidate  weights %s  kv %s  (%zu KV bytes/token; reference %s native + f32, %zu)\n",
              e.model().weights_desc().c_str(), e.kv_spec().describe().c_str(), cand.kv_bytes_per_token(),
              ref_path == cfg->model_path ? "the same file" : ref_path.c_str(), ref.kv_bytes_per_token());
  std::printf("text       %s: %zu tokens, %d chunks of %d, %zu scored\n", text_path.c_str(), toks.size(), n_chunks, n_ctx,
              kls.size());
  std::printf("perplexity %.4f (reference %.4f, ln ratio %+.5f)\n", std::exp(nll_c / n), std::exp(nll_r / n),
              (nll_c - nll_r) / n);
  std::printf("KL         mean %.6f  median %.6f  p99 %.6f  max %.6f\n", kl_mean, quantile(kls, 0.5),
              quantile(kls, 0.99), quantile(kls, 1.0));
  std::printf("top-1      %.4f agreement\n", top1 / n);
  if (!first_div.empty())
    std::printf("greedy     first divergence mean %.1f of %d tokens, min %d, identical %d/%zu\n", fd_mean, L,
                *std::min_element(first_div.begin(), first_div.end()), identical, first_div.size());
  std::printf("(%.1f s)\n", secs);
  return 0;
}

}  // namespace ouro
