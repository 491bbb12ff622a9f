// Fault injection for the lab's own tests: a candidate made slower in one op, one that crashes, one
// that hangs, one that replays cached outputs. Read once from the OURO_FAULT environment variable;
// when it is unset every hook is one predictable branch on a global flag.
//
//   OURO_FAULT=delay:OP:US    spin US microseconds inside each call of op OP (e.g. delay:swiglu:20)
//   OURO_FAULT=slow:OP:PCT    spin inside each call of op OP for PCT% of the time since its previous
//                             call, so the whole run is PCT% slower whatever the machine's speed
//   OURO_FAULT=slow:OP:PCT:WHEN  the same, only in forward passes of one shape: WHEN = prefill (more
//                             than one token), decode (one token) or t1 (a pool of one thread)
//   OURO_FAULT=repeat:OP:N    op OP computes its result N times (the same result: wasted work whose
//                             cost follows the op's, e.g. attention's grows with the depth)
//   OURO_FAULT=truncate:attention:N  attention reads at most the first N keys (a wrong speed-up)
//   OURO_FAULT=crash          abort() at the first forward pass or kernel run
//   OURO_FAULT=hang           sleep forever at the first forward pass or kernel run
//   OURO_FAULT=badscale:kv:F  the KV cache's fp8/int8 encoder stores each scale times F (a broken
//                             quantizer that the quality bounds must catch); badscale:w8a8:F does
//                             the same to W8A8 weight scales
//   OURO_FAULT=memo:DIR       outputs for inputs found in DIR are replayed from DIR; any other input
//                             gets a cheap wrong answer (a candidate that memorized its test inputs)
// The adversarial candidates of the lab's trust tests (docs/lab.md, "A lab an agent cannot fool"):
//   OURO_FAULT=inflate:WHERE:F  self-reported speed F times the measured one: WHERE = bench (the
//                             figures `ouro bench` prints), worker (the timestamps `ouro worker`
//                             streams), microbench (its timings) or all
//   OURO_FAULT=skiplayer:seen `ouro worker` skips the last layer for an input it has answered before
//                             (in any run: remembered under $TMPDIR), i.e. only when it guesses that
//                             a run repeating the checked inputs is the timed one
//   OURO_FAULT=memolearn      `ouro worker` stores every answer under $TMPDIR and replays it without
//                             computing when the same input comes again (memorised spec inputs)
//   OURO_FAULT=overthread     the thread pool uses every CPU whatever -t says (fast only on an idle
//                             machine, slow under load)
//   OURO_FAULT=flaky:N:crash  the N-th `worker`/`bench`/`microbench` run under the same $TMPDIR
//                             aborts at its first request (flaky:N:hang: hangs there)
//
// Several faults may be given separated by ','. An unparsable value is reported on stderr once and
// ignored (faults never change behaviour unless asked for precisely).
#pragma once
#include <string>

namespace ouro::fault {

struct Config {
  bool active = false;
  std::string delay_op;  // empty: no delay
  double delay_us = 0;
  std::string slow_op;   // empty: no proportional delay
  double slow_pct = 0;
  std::string slow_when;  // "", "prefill", "decode" or "t1"
  std::string repeat_op;  // empty: no repeated op
  int repeat_n = 1;
  int attn_key_limit = 0;  // 0: attention reads every key
  bool crash = false;
  bool hang = false;
  std::string memo_dir;  // empty: no memo
  float kv_scale = 1.0f, w8a8_scale = 1.0f;  // badscale factors
  std::string inflate_where;  // "", "bench", "worker" or "all"
  double inflate = 1;
  bool skip_seen = false, memo_learn = false, overthread = false;
  int flaky_n = 0;            // 0: off
  bool flaky_hang = false;
};

extern bool g_active;  // any fault configured (set before main by the parser)
const Config& config();

void op_hook_slow(const char* op);
// The worker's skip-a-layer fault: set per request; the model skips its last layer while it is.
extern bool g_skip_last_layer;
inline bool skip_layer(int layer, int n_layer) {
  return __builtin_expect(g_skip_last_layer, 0) && layer == n_layer - 1;
}
// The inflation factor for self-reported speed at `where` ("bench" or "worker"); 1 when off.
double inflation(const char* where);
// The thread count a pool really gets (the overthread fault: every CPU).
int pool_threads(int requested);
// Counts this run (flaky fault) and crashes or hangs when it is the chosen one. Call once per run
// of a measured subcommand, before its first timed work.
void at_run_start();
// The badscale factors (1 unless OURO_FAULT asks otherwise).
inline float kv_scale_factor() { return __builtin_expect(g_active, 0) ? config().kv_scale : 1.0f; }
inline float w8a8_scale_factor() { return __builtin_expect(g_active, 0) ? config().w8a8_scale : 1.0f; }
void start_hook_slow();
// Called at the start of each traced op of the model (the op's name as in the trace).
inline void at_op(const char* op) {
  if (__builtin_expect(g_active, 0)) op_hook_slow(op);
}
// The shape of the forward pass under way (the slow fault's WHEN); set by the model per pass.
extern int g_batch_tokens, g_pool_threads;
inline void at_batch(int tokens, int threads) {
  if (__builtin_expect(g_active, 0)) {
    g_batch_tokens = tokens;
    g_pool_threads = threads;
  }
}
// How many times op `op` computes its result (1 unless the repeat fault names it).
int repeats_slow(const char* op);
inline int repeats(const char* op) { return __builtin_expect(g_active, 0) ? repeats_slow(op) : 1; }
// The keys attention reads out of `keys` (all of them unless the truncate fault is on).
inline int attention_keys(int keys) {
  return __builtin_expect(g_active, 0) && config().attn_key_limit > 0 && keys > config().attn_key_limit ? config().attn_key_limit : keys;
}
// Called at the start of a forward pass or a microbenchmark run.
inline void at_start() {
  if (__builtin_expect(g_active, 0)) start_hook_slow();
}

}  // namespace ouro::fault
