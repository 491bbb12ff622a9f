// Fault injection for the lab's own tests: a candidate made slower in one op, one that crashes, one
// that hangs, one that replays cached outputs. Read once from the OURO_FAULT environment variable;
// when it is unset every hook is one predictable branch on a global flag.
//
//   OURO_FAULT=delay:OP:US    spin US microseconds inside each call of op OP (e.g. delay:swiglu:20)
//   OURO_FAULT=slow:OP:PCT    spin inside each call of op OP for PCT% of the time since its previous
//                             call, so the whole run is PCT% slower whatever the machine's speed
//   OURO_FAULT=crash          abort() at the first forward pass or kernel run
//   OURO_FAULT=hang           sleep forever at the first forward pass or kernel run
//   OURO_FAULT=badscale:kv:F  the KV cache's fp8/int8 encoder stores each scale times F (a broken
//                             quantizer that the quality bounds must catch); badscale:w8a8:F does
//                             the same to W8A8 weight scales
//   OURO_FAULT=memo:DIR       outputs for inputs found in DIR are replayed from DIR; any other input
//                             gets a cheap wrong answer (a candidate that memorized its test inputs)
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
  bool crash = false;
  bool hang = false;
  std::string memo_dir;  // empty: no memo
  float kv_scale = 1.0f, w8a8_scale = 1.0f;  // badscale factors
};

extern bool g_active;  // any fault configured (set before main by the parser)
const Config& config();

void op_hook_slow(const char* op);
// The badscale factors (1 unless OURO_FAULT asks otherwise).
inline float kv_scale_factor() { return __builtin_expect(g_active, 0) ? config().kv_scale : 1.0f; }
inline float w8a8_scale_factor() { return __builtin_expect(g_active, 0) ? config().w8a8_scale : 1.0f; }
void start_hook_slow();
// Called at the start of each traced op of the model (the op's name as in the trace).
inline void at_op(const char* op) {
  if (__builtin_expect(g_active, 0)) op_hook_slow(op);
}
// Called at the start of a forward pass or a microbenchmark run.
inline void at_start() {
  if (__builtin_expect(g_active, 0)) start_hook_slow();
}

}  // namespace ouro::fault
