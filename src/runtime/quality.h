// Next-token distribution comparisons shared by `ouro quality` and the lab's correctness checks
// (docs/quantization.md): log-softmax, KL divergence, percentiles.
#pragma once
#include <cstdint>
#include <vector>

namespace ouro {

// log(sum(exp(x))) over n logits, computed stably in double.
double log_sum_exp(const float* x, int64_t n);

constexpr double kComputeLse = -1e308;

// KL(P || Q) in nats, where P = softmax(ref) and Q = softmax(cand): how much the candidate's
// next-token distribution loses against the reference's (llama.cpp's --kl-divergence figure).
// lse_ref/lse_cand: log_sum_exp of each row (kComputeLse: computed here).
double kl_divergence(const float* ref, const float* cand, int64_t n, double lse_ref = kComputeLse, double lse_cand = kComputeLse);

// Index of the largest value (first on ties).
int64_t argmax_row(const float* x, int64_t n);

// The q-quantile (0..1) of v by linear interpolation between order statistics (numpy's default).
double quantile(std::vector<double> v, double q);

}  // namespace ouro
