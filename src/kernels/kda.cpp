// Scalar KDA kernels (kernels/kda.h): the reference the vector families are tested against, and
// the family `--isa scalar` runs. Plain loops in the order the equations are written.
#include "kernels/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ouro {

namespace {

// out[dv] = S^T x, S [dk][dv].
void state_t_times(const float* S, const float* x, int dk, int dv, float* out) {
  std::fill(out, out + dv, 0.0f);
  for (int c = 0; c < dk; ++c) {
    const float* row = S + (int64_t)c * dv;
    const float xc = x[c];
    for (int j = 0; j < dv; ++j) out[j] += row[j] * xc;
  }
}

}  // namespace

void kda_recurrent(const KdaHead& h, int64_t T, int dk, int dv, float scale, float* S) {
  std::vector<float> u(dv);
  float* pred = u.data();
  for (int64_t t = 0; t < T; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    const float* g = h.g + t * h.g_stride;
    const float beta = h.beta[t * h.beta_stride];
    float* o = h.o + t * h.o_stride;
    // Decay, and the prediction p = S^T k from the decayed state, in one pass over S.
    std::fill(pred, pred + dv, 0.0f);
    for (int c = 0; c < dk; ++c) {
      float* row = S + (int64_t)c * dv;
      const float a = std::exp(g[c]), kc = k[c];
      for (int j = 0; j < dv; ++j) {
        row[j] *= a;
        pred[j] += row[j] * kc;
      }
    }
    // u = beta (v - p); rank-1 write; read o = scale S^T q after the write.
    for (int j = 0; j < dv; ++j) pred[j] = beta * (v[j] - pred[j]);
    std::fill(o, o + dv, 0.0f);
    for (int c = 0; c < dk; ++c) {
      float* row = S + (int64_t)c * dv;
      const float kc = k[c], qc = q[c] * scale;
      for (int j = 0; j < dv; ++j) {
        row[j] += kc * pred[j];
        o[j] += row[j] * qc;
      }
    }
  }
}

int64_t kda_chunked_scratch(int dk, int dv, int chunk) {
  // G [chunk][dk], U [chunk][dv], A and P [chunk][chunk], two dk vectors.
  return (int64_t)chunk * dk + (int64_t)chunk * dv + 2LL * chunk * chunk + 2LL * dk;
}

void kda_chunked(const KdaHead& h, int64_t T, int dk, int dv, float scale, int chunk, float* S, float* scratch) {
  float* G = scratch;
  float* U = G + (int64_t)chunk * dk;
  float* A = U + (int64_t)chunk * dv;
  float* P = A + (int64_t)chunk * chunk;
  float* e = P + (int64_t)chunk * chunk;  // dk: exp(G_i - G_j), then exp(G_i) (.) x
  float* xd = e + dk;                     // dk
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int n = (int)std::min<int64_t>(chunk, T - t0);
    auto Q = [&](int i) { return h.q + (t0 + i) * h.qk_stride; };
    auto K = [&](int i) { return h.k + (t0 + i) * h.qk_stride; };
    // 1. Cumulative log-decay within the chunk.
    for (int i = 0; i < n; ++i) {
      const float* g = h.g + (t0 + i) * h.g_stride;
      float* Gi = G + (int64_t)i * dk;
      const float* prev = i ? Gi - dk : nullptr;
      for (int c = 0; c < dk; ++c) Gi[c] = (prev ? prev[c] : 0.0f) + g[c];
    }
    // 2. A[i][j] = beta_i sum_c k_i k_j exp(G_i - G_j) (j < i); P[i][j] the same with q_i (j <= i).
    for (int i = 0; i < n; ++i) {
      const float* Gi = G + (int64_t)i * dk;
      const float* ki = K(i);
      const float* qi = Q(i);
      const float beta = h.beta[(t0 + i) * h.beta_stride];
      for (int j = 0; j < i; ++j) {
        const float* Gj = G + (int64_t)j * dk;
        const float* kj = K(j);
        float sa = 0, sp = 0;
        for (int c = 0; c < dk; ++c) {
          const float w = std::exp(Gi[c] - Gj[c]) * kj[c];
          sa += ki[c] * w;
          sp += qi[c] * w;
        }
        A[i * chunk + j] = beta * sa;
        P[i * chunk + j] = sp;
      }
      float sd = 0;
      for (int c = 0; c < dk; ++c) sd += qi[c] * ki[c];
      P[i * chunk + i] = sd;
    }
    // 3. Right-hand side w_i = beta_i (v_i - S^T (exp(G_i) (.) k_i)), then forward substitution
    //    u_i = w_i - sum_{j<i} A[i][j] u_j (the unit lower-triangular solve (I + A) U = W).
    for (int i = 0; i < n; ++i) {
      const float* Gi = G + (int64_t)i * dk;
      const float* ki = K(i);
      const float* v = h.v + (t0 + i) * h.v_stride;
      const float beta = h.beta[(t0 + i) * h.beta_stride];
      float* ui = U + (int64_t)i * dv;
      for (int c = 0; c < dk; ++c) xd[c] = std::exp(Gi[c]) * ki[c];
      state_t_times(S, xd, dk, dv, ui);
      for (int j = 0; j < dv; ++j) ui[j] = beta * (v[j] - ui[j]);
      for (int jj = 0; jj < i; ++jj) {
        const float a = A[i * chunk + jj];
        const float* uj = U + (int64_t)jj * dv;
        for (int j = 0; j < dv; ++j) ui[j] -= a * uj[j];
      }
    }
    // 4. o_i = scale (S^T (exp(G_i) (.) q_i) + sum_{j<=i} P[i][j] u_j), from the chunk-start S.
    for (int i = 0; i < n; ++i) {
      const float* Gi = G + (int64_t)i * dk;
      const float* qi = Q(i);
      float* o = h.o + (t0 + i) * h.o_stride;
      for (int c = 0; c < dk; ++c) xd[c] = std::exp(Gi[c]) * qi[c];
      state_t_times(S, xd, dk, dv, o);
      for (int jj = 0; jj <= i; ++jj) {
        const float pij = P[i * chunk + jj];
        const float* uj = U + (int64_t)jj * dv;
        for (int j = 0; j < dv; ++j) o[j] += pij * uj[j];
      }
      for (int j = 0; j < dv; ++j) o[j] *= scale;
    }
    // 5. S <- Diag(exp(G_n)) S + sum_j Diag(exp(G_n - G_j)) k_j u_j^T.
    const float* Gn = G + (int64_t)(n - 1) * dk;
    for (int c = 0; c < dk; ++c) {
      float* row = S + (int64_t)c * dv;
      const float a = std::exp(Gn[c]);
      for (int j = 0; j < dv; ++j) row[j] *= a;
    }
    for (int jj = 0; jj < n; ++jj) {
      const float* Gj = G + (int64_t)jj * dk;
      const float* kj = K(jj);
      const float* uj = U + (int64_t)jj * dv;
      for (int c = 0; c < dk; ++c) e[c] = std::exp(Gn[c] - Gj[c]) * kj[c];
      for (int c = 0; c < dk; ++c) {
        float* row = S + (int64_t)c * dv;
        const float x = e[c];
        for (int j = 0; j < dv; ++j) row[j] += x * uj[j];
      }
    }
  }
}

void short_conv_silu(const float* x, int64_t x_stride, int64_t T, int channels, const float* w, int K, float* window,
                     float* y, int64_t y_stride) {
  const int W = K - 1;
  // The input of token t - W + i (i < K): from the window for the first W tokens, else from x.
  auto in = [&](int64_t t, int i, int c) -> float {
    const int64_t src = t - W + i;
    return src < 0 ? window[(int64_t)(src + W) * channels + c] : x[src * x_stride + c];
  };
  for (int64_t t = 0; t < T; ++t) {
    float* yt = y + t * y_stride;
    for (int c = 0; c < channels; ++c) {
      float s = 0;
      for (int i = 0; i < K; ++i) s += w[(int64_t)c * K + i] * in(t, i, c);
      yt[c] = s / (1.0f + std::exp(-s));
    }
  }
  short_conv_window_update(x, x_stride, T, channels, K, window);
}

void short_conv_window_update(const float* x, int64_t x_stride, int64_t T, int channels, int K, float* window) {
  const int W = K - 1;
  if (W <= 0) return;
  if (T >= W) {
    for (int i = 0; i < W; ++i)
      std::copy(x + (T - W + i) * x_stride, x + (T - W + i) * x_stride + channels, window + (int64_t)i * channels);
  } else {
    const int keep = W - (int)T;
    std::copy(window + (int64_t)(W - keep) * channels, window + (int64_t)W * channels, window);
    for (int64_t i = 0; i < T; ++i)
      std::copy(x + i * x_stride, x + i * x_stride + channels, window + (int64_t)(keep + i) * channels);
  }
}

double kda_recurrent_flops(int64_t T, int dk, int dv) {
  return (double)T * (7.0 * dk * dv + 3.0 * dv + 2.0 * dk);
}

double kda_chunked_flops(int64_t T, int dk, int dv, int chunk) {
  double f = 0;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const double n = (double)std::min<int64_t>(chunk, T - t0), pairs = n * (n - 1) / 2;
    f += n * dk;                                    // cumulative log-decay
    f += pairs * 6.0 * dk + n * 2.0 * dk;           // A and P (exp, difference, two products)
    f += n * (2.0 * dk + 2.0 * dk * dv + 2.0 * dv); // right-hand sides from S
    f += pairs * 2.0 * dv;                          // forward substitution
    f += n * (2.0 * dk + 2.0 * dk * dv + dv) + (pairs + n) * 2.0 * dv;  // outputs
    f += 2.0 * dk + dk * dv + n * (3.0 * dk + 2.0 * dk * dv);          // state update
  }
  return f;
}

void l2norm_inplace(float* x, int n, float eps) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  const float r = 1.0f / std::max(std::sqrt(s), eps);
  for (int i = 0; i < n; ++i) x[i] *= r;
}

const KdaKernels& kda_kernels_scalar() {
  static const KdaKernels k{"scalar", &kda_recurrent, &short_conv_silu, &l2norm_inplace};
  return k;
}

const KdaKernels& kda_kernels(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return kda_kernels_avx512();
    case Isa::kAvx2: return kda_kernels_avx2();
    case Isa::kScalar: break;
  }
  return kda_kernels_scalar();
}

}  // namespace ouro
