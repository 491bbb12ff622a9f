// ouro: dispatches to one file per subcommand.
#include <cstdio>
#include <cstring>
#include <new>
#include <system_error>

#include "cli/cmd_lab.h"
#include "cli/common.h"

namespace {

const char* kUsage =
    "usage: ouro <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate    generate text from a prompt\n"
    "  chat        interactive chat (Ctrl-D quits)\n"
    "  tokenize    text -> token ids\n"
    "  detokenize  token ids -> text\n"
    "  logits      dump logits for text or token ids (.npy or JSON)\n"
    "  serve       OpenAI-compatible HTTP server with continuous batching\n"
    "  bench       prefill and decode throughput\n"
    "  worker      the engine answering the lab's timed and checked requests (JSON lines)\n"
    "  trace       read a trace: summarize, overlap, diff\n"
    "  probe       the machine's ceiling: memory bandwidth and peak compute\n"
    "  microbench  one kernel or op, timed, with its output for correctness checks\n"
    "  lab         experiments: run, plan, bisect, and the ledger (log, show, verify, report)\n"
    "  mcp         the lab as an MCP server on stdio, for coding agents (docs/agents.md)\n"
    "  loadtest    load an OpenAI-compatible server: throughput, TTFT/TPOT/ITL percentiles, goodput\n"
    "  quality     what a quantization costs: perplexity, KL divergence, top-1 and greedy agreement\n"
    "  agent       the loop that proposes experiments, runs them in the lab and learns from the verdicts\n"
    "\n"
    "Run 'ouro <command> --help' for a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("ouro: no command given (run 'ouro --help')\n", stderr);
    return 2;
  }
  const char* cmd = argv[1];
  if (!std::strcmp(cmd, "--help") || !std::strcmp(cmd, "-h") || !std::strcmp(cmd, "help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
#ifdef OURO_SERVE_ONLY
  // The ThreadSanitizer build: the server and the commands its tests start (CMakeLists.txt).
  struct { const char* name; int (*fn)(int, char**); } cmds[] = {
      {"generate", ouro::cmd_generate}, {"chat", ouro::cmd_chat}, {"tokenize", ouro::cmd_tokenize},
      {"detokenize", ouro::cmd_detokenize}, {"serve", ouro::cmd_serve},
  };
#else
  struct { const char* name; int (*fn)(int, char**); } cmds[] = {
      {"generate", ouro::cmd_generate}, {"chat", ouro::cmd_chat},       {"tokenize", ouro::cmd_tokenize},
      {"detokenize", ouro::cmd_detokenize}, {"logits", ouro::cmd_logits}, {"bench", ouro::cmd_bench}, {"worker", ouro::cmd_worker},
      {"trace", ouro::cmd_trace},       {"probe", ouro::cmd_probe}, {"serve", ouro::cmd_serve},
      {"microbench", ouro::cmd_microbench}, {"lab", ouro::cmd_lab},
      {"loadtest", ouro::cmd_loadtest}, {"quality", ouro::cmd_quality}, {"mcp", ouro::cmd_mcp}, {"agent", ouro::cmd_agent},
  };
#endif
  for (const auto& c : cmds) {
    if (std::strcmp(cmd, c.name) != 0) continue;
    // Resource exhaustion surfaces as exceptions from allocation and thread creation deep inside
    // loading; report it as a runtime error instead of aborting.
    try {
      return c.fn(argc - 2, argv + 2);
    } catch (const std::bad_alloc&) {
      std::fputs("ouro: out of memory\n", stderr);
    } catch (const std::system_error& e) {
      std::fprintf(stderr, "ouro: system error: %s\n", e.what());
    }
    return 1;
  }
#ifdef OURO_SERVE_ONLY
  std::fprintf(stderr, "ouro: unknown command '%s' (this is the ThreadSanitizer build: serve, generate, chat, tokenize, detokenize)\n", cmd);
#else
  std::fprintf(stderr, "ouro: unknown command '%s' (run 'ouro --help')\n", cmd);
#endif
  return 2;
}
