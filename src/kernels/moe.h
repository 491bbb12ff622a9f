// The routed part of a mixture-of-experts layer (kimi-linear's and DeepSeek-V3's form): a sigmoid
// router whose selection adds a per-expert bias picks each token's top n_used experts; a token's
// weights are its chosen sigmoid scores, renormalised (weights_norm) and scaled (weights_scale).
// The tokens are grouped by expert so each expert's matrices are read once per call, and each
// token's slot outputs are added in expert order, whichever way the experts ran. Used by the
// hybrid's forward pass (model/kimi_linear.cpp) and timed alone by `ouro microbench moe`.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace ouro {

class ThreadPool;

struct MoeExperts {
  int d = 0, ff = 0, n_expert = 0, n_used = 0;  // hidden size, expert width, experts, chosen per token
  bool weights_norm = true;
  float weights_scale = 1.0f;
  const float* bias = nullptr;         // [n_expert]: the selection bias (added for the choice only)
  const PackedMatrix* gate = nullptr;  // [n_expert], each ff x d
  const PackedMatrix* up = nullptr;    // [n_expert], each ff x d
  const PackedMatrix* down = nullptr;  // [n_expert], each d x ff
};

// One call's routing and scratch. Slot i (token i / n_used) goes to expert sel[i] with weight
// sel_w[i]; a token's slots are in expert order. The slots of expert e are
// tokens[first[e] .. first[e + 1]) (count[e] of them); active: the experts with slots.
struct MoeScratch {
  std::vector<int> sel, tokens, count, first, order, active;
  std::vector<float> sel_w, slot_out;  // slot_out: [slots][d], each slot's expert output
  struct Thread {                      // one per pool thread, grown to the tokens it gets
    std::vector<float> xe, g, u, h, ye;
    QuantActs qa;
  };
  std::vector<Thread> threads;
  // Sizes everything for up to max_tokens tokens (thread 0's scratch too; the others grow on use).
  void reserve(const MoeExperts& m, int max_tokens);
};

// router: [T][n_expert] logits in, sigmoid scores out. Fills the routing of s.
void moe_route(const MoeExperts& m, float* router, int T, MoeScratch& s);
// Bytes and FLOPs of running the experts the last moe_route chose (weights once per expert).
OpCost moe_experts_cost(const MoeExperts& m, const MoeScratch& s);
// Each chosen expert over its tokens' rows of xn ([T][d], T of the last moe_route): SwiGLU(gate,
// up) then down, into s.slot_out. With several threads and at least two experts per thread every
// expert runs whole on one thread (one parallel region); otherwise one expert after another with
// each product's rows split across the threads. Either way every slot gets the same bits.
void moe_experts(const MoeExperts& m, const float* xn, MoeScratch& s, ThreadPool& pool, const MatmulKernels& k);
// out[t] += sum of each slot's weight times its output, in expert order ([T][d]).
void moe_combine(const MoeExperts& m, int T, const MoeScratch& s, float* out, ThreadPool& pool);

}  // namespace ouro
