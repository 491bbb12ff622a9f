// ouro logits: final-position or all-position logits, as .npy or JSON, for oracles.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "cli/common.h"
#include "core/npy.h"

namespace ouro {

namespace {
const char* kUsage =
    "usage: ouro logits (--text TEXT | --tokens ID,ID,...) [--all] [--out FILE.npy | --json] [--hidden FILE.npy]\n"
    "  --text TEXT     tokenized with special tokens parsed\n"
    "  --tokens IDS    comma-separated token ids\n"
    "  --all           every position ([n_tokens, n_vocab]); default: the last ([n_vocab])\n"
    "  --out FILE.npy  float32 .npy;  --json: {\"n_tokens\", \"n_vocab\", \"logits\": [[...]]}\n"
    "  --hidden FILE.npy  also the residual stream after every layer, [n_layer, n_tokens, n_embd]\n"
    "  -m, --model PATH   -t, --threads N   --ctx N   --isa auto|avx512|avx2|scalar\n";
}  // namespace

int cmd_logits(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(kCommonValueFlags, {"--text", "--tokens", "--out", "--hidden"}), {"--all", "--json"}); !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  if (a.has("--text") == a.has("--tokens")) return report(usage_error("logits needs exactly one of --text or --tokens"));
  if (a.has("--out") == a.has("--json")) return report(usage_error("logits needs exactly one of --out FILE.npy or --json"));
  std::vector<int> ids;
  if (a.has("--tokens")) {
    auto v = parse_id_list(a.str("--tokens"));
    if (!v) return report(v.error());
    ids = *v;
  }
  auto eng = load_engine(a);
  if (!eng) return report(eng.error());
  Engine& e = **eng;
  if (a.has("--text")) ids = e.tokenizer().encode(a.str("--text"));
  if (ids.empty()) return report(usage_error("no tokens"));
  const bool all = a.has("--all");
  const int nv = e.model().info().n_vocab;
  auto st = e.new_state();
  if ((int)ids.size() > st->n_ctx())
    return report(usage_error(std::to_string(ids.size()) + " tokens exceed the context of " + std::to_string(st->n_ctx())));
  std::vector<float> logits((all ? ids.size() : 1) * (size_t)nv);
  if (const std::string memo = memo_stem(ids); !memo.empty() && a.has("--out")) {
    std::error_code ec;
    if (std::filesystem::exists(memo + ".npy")) {  // replay (fault injection, see memo_stem)
      std::filesystem::copy_file(memo + ".npy", a.str("--out"), std::filesystem::copy_options::overwrite_existing, ec);
      return ec ? report(runtime_error(a.str("--out") + ": " + ec.message())) : 0;
    }
    const std::vector<size_t> shape = all ? std::vector<size_t>{ids.size(), (size_t)nv} : std::vector<size_t>{(size_t)nv};
    Status s = write_npy_f32(a.str("--out"), logits.data(), shape);  // zeros: cheap and wrong
    return s ? 0 : report(s.error());
  }
  std::vector<float> layers;
  if (a.has("--hidden")) st->collect_layers(&layers);
  if (Status s = st->forward(ids.data(), (int)ids.size(), logits.data(), all, e.pool(), e.kernels()); !s)
    return report(s.error());
  if (a.has("--hidden")) {
    // [call][layer][token of the call][d] (calls of --batch tokens) -> [layer][token][d]
    const size_t n = ids.size(), d = (size_t)e.model().info().n_embd, nl = (size_t)e.model().info().n_layer;
    const size_t chunk = (size_t)std::max(1, e.config().max_batch);
    std::vector<float> out(nl * n * d);
    if (layers.size() != out.size())
      return report(runtime_error("--hidden: " + std::to_string(layers.size()) + " layer values, expected " +
                                  std::to_string(out.size()) + " (a layer skipped?)"));
    for (size_t c0 = 0, src = 0; c0 < n; c0 += chunk) {
      const size_t tc = std::min(chunk, n - c0);
      for (size_t l = 0; l < nl; ++l, src += tc * d)
        std::copy(layers.begin() + src, layers.begin() + src + tc * d, out.begin() + (l * n + c0) * d);
    }
    if (Status s = write_npy_f32(a.str("--hidden"), out.data(), {nl, n, d}); !s) return report(s.error());
  }
  const size_t rows = all ? ids.size() : 1;
  if (a.has("--out")) {
    std::vector<size_t> shape = all ? std::vector<size_t>{rows, (size_t)nv} : std::vector<size_t>{(size_t)nv};
    if (Status s = write_npy_f32(a.str("--out"), logits.data(), shape); !s) return report(s.error());
  } else {
    nlohmann::json rowsj = nlohmann::json::array();
    for (size_t r = 0; r < rows; ++r)
      rowsj.push_back(std::vector<float>(logits.begin() + r * nv, logits.begin() + (r + 1) * nv));
    std::puts(nlohmann::json{{"n_tokens", ids.size()}, {"n_vocab", nv}, {"logits", rowsj}}.dump().c_str());
  }
  return 0;
}

}  // namespace ouro
