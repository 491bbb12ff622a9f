// ouro generate / ouro chat
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "trace/trace.h"

namespace ouro {

namespace {

const char* kGenerateUsage =
    "usage: ouro generate -p TEXT [options]\n"
    "  -p, --prompt TEXT      prompt (special-token text such as <|im_start|> is parsed)\n"
    "  --tokens IDS           the prompt as comma-separated token ids instead (not with --chat)\n"
    "  -n, --n-predict N      tokens to generate (default 128)\n"
    "  --chat                 wrap the prompt as a user message in the model's chat template\n"
    "  --system TEXT          system message for --chat (default: the template's)\n"
    "  --temp T               temperature, 0 = greedy (default 0.8)\n"
    "  --top-k K              (default 40, 0 = off)     --top-p P   (default 0.95)\n"
    "  --min-p P              (default 0.05)            --seed S    (default 0)\n"
    "  --repeat-penalty R     (default 1.0 = off)       --repeat-last-n N (default 64)\n"
    "  --json                 print one JSON object (see docs/cli.md)\n"
    "  --trace FILE           write a Chrome trace of the run (docs/trace.md)\n"
    "  --trace-buffer N       events kept per thread (default 1000000; oldest dropped)\n"
    "  -m, --model PATH       GGUF model (default: $OURO_MODEL or models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
    "  -t, --threads N        threads (default: all CPUs)    --ctx N   context length\n"
    "  --isa auto|avx512|avx2|scalar   kernel family (default auto)\n";

const char* kChatUsage =
    "usage: ouro chat [options]\n"
    "Reads one user message per line from stdin and prints the assistant's reply; the history is\n"
    "kept. End of input (Ctrl-D) quits.\n"
    "  -n N, --system TEXT, sampling flags, --model, --threads, --ctx, --isa: as for generate\n";

}  // namespace

int cmd_generate(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kGenerateUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(concat(concat(kCommonValueFlags, kSamplingFlags), kTraceFlags), {"-p", "--prompt", "--tokens", "-n", "--n-predict", "--system"}),
                         {"--chat", "--json"});
      !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  const bool by_ids = a.has("--tokens");
  if (by_ids == (a.has("-p") || a.has("--prompt")))
    return report(usage_error("generate needs one prompt: -p TEXT or --tokens ID,ID,..."));
  if (by_ids && a.has("--chat")) return report(usage_error("--tokens is the prompt as ids: it does not go with --chat"));
  std::vector<int> ids;
  if (by_ids) {
    auto v = parse_id_list(a.str("--tokens"));
    if (!v) return report(v.error());
    ids = *v;
  }
  const std::string prompt = by_ids ? "" : a.has("-p") ? a.str("-p") : a.str("--prompt");
  auto n = a.integer(a.has("-n") ? "-n" : "--n-predict", 128, 0, 1 << 24);
  if (!n) return report(n.error());
  auto sp = sampling_from(a);
  if (!sp) return report(sp.error());
  if (Status s = start_trace(a); !s) return report(s.error());
  auto eng = load_engine(a);
  if (!eng) return report(eng.error());
  Engine& e = **eng;
  const bool chat = a.has("--chat");
  std::string text = prompt;
  if (chat && !e.chat()) return report(e.chat().error());
  if (chat) {
    std::vector<ChatMessage> msgs;
    if (a.has("--system")) msgs.push_back({"system", a.str("--system")});
    msgs.push_back({"user", prompt});
    text = e.chat()->render(msgs);
  }
  if (!by_ids) {
    trace::Span sp("tokenize", "io", -1, -1, (double)text.size());
    ids = e.tokenizer().encode(text);
  }
  const std::vector<int> stop = stop_ids_for(e, chat);
  auto st = e.new_state();
  const bool json = a.has("--json");
  if (const std::string memo = memo_stem(ids); !memo.empty() && json) {  // fault injection, see memo_stem
    std::ifstream in(memo + ".gen.json");
    std::stringstream ss;
    ss << in.rdbuf();
    if (in) std::fputs(ss.str().c_str(), stdout);
    else std::puts(nlohmann::json{{"text", ""}, {"tokens", std::vector<int>((size_t)*n, 0)}}.dump().c_str());
    return 0;
  }
  auto r = generate(e, *st, ids, (int)*n, *sp, stop, json ? std::function<void(const std::string&)>() : [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  if (!r) return report(r.error());
  if (Status s = finish_trace(a, e); !s) return report(s.error());
  if (json) {
    nlohmann::json j = {{"text", r->text},
                        {"prompt_tokens", r->prompt_tokens},
                        {"completion_tokens", (int)r->tokens.size()},
                        {"tokens", r->tokens},
                        {"finish_reason", r->finish_reason},
                        {"prefill_tok_s", r->prefill_seconds > 0 ? r->prompt_tokens / r->prefill_seconds : 0.0},
                        {"decode_tok_s", r->decode_seconds > 0 && r->tokens.size() > 1 ? (r->tokens.size() - 1) / r->decode_seconds : 0.0},
                        {"seed", sp->seed},
                        {"threads", e.config().threads},
                        {"isa", isa_name(e.config().isa)}};
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::puts("");
  }
  return 0;
}

int cmd_chat(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kChatUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(concat(kCommonValueFlags, kSamplingFlags), {"-n", "--n-predict", "--system"}), {}); !s)
    return report(s.error());
  if (!a.positional().empty()) return report(usage_error("unexpected argument '" + a.positional()[0] + "'"));
  auto n = a.integer(a.has("-n") ? "-n" : "--n-predict", 512, 1, 1 << 24);
  if (!n) return report(n.error());
  auto sp = sampling_from(a);
  if (!sp) return report(sp.error());
  auto eng = load_engine(a);
  if (!eng) return report(eng.error());
  Engine& e = **eng;
  if (!e.chat()) return report(e.chat().error());
  const ChatTemplate& tmpl = *e.chat();
  const std::vector<int> stop = stop_ids_for(e, true);
  auto st = e.new_state();
  std::vector<ChatMessage> history;
  if (a.has("--system")) history.push_back({"system", a.str("--system")});
  std::string rendered_so_far;  // the prompt text already in the KV cache
  std::string line;
  const bool tty = isatty(0);
  for (;;) {
    if (tty) { std::fputs("> ", stdout); std::fflush(stdout); }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    history.push_back({"user", line});
    const std::string full = tmpl.render(history);
    // Feed only what is new since the last turn (the cache holds the earlier turns).
    std::vector<int> ids = e.tokenizer().encode(full.substr(rendered_so_far.size()));
    if (st->n_past() + (int)ids.size() + 1 >= st->n_ctx()) {
      std::fputs("ouro: context full; starting a new conversation\n", stderr);
      st->reset();
      history.assign(history.end() - 1, history.end());
      rendered_so_far.clear();
      ids = e.tokenizer().encode(tmpl.render(history));
    }
    const int budget = std::min<int>((int)*n, st->n_ctx() - st->n_past() - (int)ids.size() - 1);
    auto r = generate(e, *st, ids, budget, *sp, stop, [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    });
    if (!r) return report(r.error());
    std::puts("");
    // A reply cut by the length limit leaves its last token sampled but not yet in the cache.
    if (r->finish_reason == "length" && !r->tokens.empty() && st->n_past() < st->n_ctx()) {
      std::vector<float> logits(e.model().info().n_vocab);
      if (Status s = st->decode(r->tokens.back(), logits.data(), e.pool(), e.kernels()); !s)
        return report(s.error());
    }
    history.push_back({"assistant", r->text});
    // The cache holds the prompt and the reply but not the closing "<|im_end|>\n": feed it next turn.
    rendered_so_far = tmpl.render(history, false);
    rendered_so_far.resize(rendered_so_far.size() - std::string("<|im_end|>\n").size());
  }
  return 0;
}

}  // namespace ouro
