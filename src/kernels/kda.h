// Kimi Delta Attention (KDA) kernels, in llama.cpp's `kimi-linear` form (docs/hybrid.md): the
// per-channel gated delta rule over one head's fp32 state, in two forms that compute the same
// thing, plus the short causal convolution and the L2 norm that feed it.
//
// One head, per token t (S is dk x dv, row = key channel; g <= 0 is the log-decay per key channel):
//   S <- Diag(exp(g_t)) S;   u_t = beta_t (v_t - S^T k_t);   S <- S + k_t u_t^T;   o_t = scale S^T q_t
//
// - kda_recurrent: token by token, as written above (decode, and the reference of the other).
// - kda_chunked: chunks of `chunk` tokens in the WY/UT form (REFERENCE.md §1.6), every exponent a
//   difference G_i - G_j <= 0 of cumulative log-decays within the chunk, so nothing overflows
//   whatever the gate. The same result within fp32 rounding (tests/unit/kda_test.cpp).
// Both carry S across calls: two calls over T1 then T2 tokens equal one call over T1 + T2.
// Plain functions over plain memory; the caller splits heads across threads.
//
// The functions below are the scalar reference. KdaKernels is a family of the ops the forward pass
// calls (recurrent step, short conv + SiLU, L2 norm), picked once per run by ISA as the matmul
// family is: scalar (these), AVX2 (kda_avx2.cpp) and AVX-512 (kda_avx512.cpp), each tested against
// the scalar one at odd shapes (tests/unit/kda_test.cpp).
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace ouro {

// One head of one sequence over T tokens: row t of q, k (dk floats), g (dk), v (dv), o (dv) is at
// t * *_stride; beta_t at beta[t * beta_stride]. q and k are already L2-normalised.
struct KdaHead {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  float* o = nullptr;
  int64_t qk_stride = 0, v_stride = 0, g_stride = 0, beta_stride = 0, o_stride = 0;
};

void kda_recurrent(const KdaHead& h, int64_t T, int dk, int dv, float scale, float* S);

// Floats of scratch kda_chunked needs for one head.
int64_t kda_chunked_scratch(int dk, int dv, int chunk);
void kda_chunked(const KdaHead& h, int64_t T, int dk, int dv, float scale, int chunk, float* S, float* scratch);

// Causal depthwise convolution of T tokens of `channels` channels, then SiLU:
//   y_t[c] = silu(sum_{i<K} w[c*K + i] * x_{t-K+1+i}[c])
// (taps oldest first, GGUF ne [K, 1, channels]). Inputs before this call's first token come from
// `window` ([K-1][channels], oldest first), which is left holding the last K-1 inputs seen.
void short_conv_silu(const float* x, int64_t x_stride, int64_t T, int channels, const float* w, int K, float* window,
                     float* y, int64_t y_stride);

// x <- x / max(||x||, eps) over n values: ggml's l2_norm, which llama.cpp's kimi-linear uses (FLA
// puts the epsilon inside the square root instead; docs/hybrid.md).
void l2norm_inplace(float* x, int n, float eps);

// The window update of short_conv_silu alone: `window` ([K-1][channels]) left holding the last K-1
// rows of (window ++ x[0..T)). Shared by every family.
void short_conv_window_update(const float* x, int64_t x_stride, int64_t T, int channels, int K, float* window);

// A family. Limits of the vector ones: dk <= 1024 and K <= 64 (the kimi-linear loader's bounds).
struct KdaKernels {
  const char* name;
  void (*recurrent)(const KdaHead& h, int64_t T, int dk, int dv, float scale, float* S);
  void (*conv_silu)(const float* x, int64_t x_stride, int64_t T, int channels, const float* w, int K, float* window,
                    float* y, int64_t y_stride);
  void (*l2norm)(float* x, int n, float eps);
};
const KdaKernels& kda_kernels(Isa isa);
const KdaKernels& kda_kernels_scalar();
const KdaKernels& kda_kernels_avx2();
const KdaKernels& kda_kernels_avx512();

// FLOPs of one head over T tokens, counting an exp as one: recurrent per token decay (dk*dv),
// prediction, write and read (2*dk*dv each), plus the vectors; chunked as its five steps do them.
double kda_recurrent_flops(int64_t T, int dk, int dv);
double kda_chunked_flops(int64_t T, int dk, int dv, int chunk);
// Bytes of one head's fp32 state (read once and written once per call at the least).
inline double kda_state_bytes(int dk, int dv) { return 4.0 * dk * dv; }

}  // namespace ouro
