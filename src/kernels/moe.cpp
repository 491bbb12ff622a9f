#include "kernels/moe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace ouro {

void MoeScratch::reserve(const MoeExperts& m, int max_tokens) {
  const size_t B = max_tokens, K = m.n_used, E = m.n_expert, d = m.d, ff = m.ff;
  sel.resize(B * K);
  sel_w.resize(B * K);
  tokens.resize(B * K);
  count.resize(E);
  order.resize(E);
  first.resize(E + 1);
  active.reserve(E);
  slot_out.resize(B * K * d);
  if (threads.empty()) threads.resize(1);
  Thread& t = threads[0];
  t.xe.resize(std::max(t.xe.size(), B * d));
  t.ye.resize(std::max(t.ye.size(), B * d));
  for (auto* v : {&t.g, &t.u, &t.h}) v->resize(std::max(v->size(), B * ff));
}

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Rows of xn of expert e's slots, in slot order, into dst ([count][d]).
void gather(const MoeExperts& m, const MoeScratch& s, int e, const float* xn, float* dst) {
  const int* toks = &s.tokens[s.first[e]];
  for (int j = 0, ne = s.count[e]; j < ne; ++j)
    std::memcpy(&dst[(size_t)j * m.d], &xn[(size_t)(toks[j] / m.n_used) * m.d], sizeof(float) * m.d);
}

// Expert e's output rows (src, [count][d]) to its slots' rows of slot_out.
void scatter(const MoeExperts& m, MoeScratch& s, int e, const float* src) {
  const int* toks = &s.tokens[s.first[e]];
  for (int j = 0, ne = s.count[e]; j < ne; ++j)
    std::memcpy(&s.slot_out[(size_t)toks[j] * m.d], &src[(size_t)j * m.d], sizeof(float) * m.d);
}

// Sizes a thread's scratch for ne tokens.
void grow(MoeScratch::Thread& t, const MoeExperts& m, int ne) {
  if (t.xe.size() < (size_t)ne * m.d) {
    t.xe.resize((size_t)ne * m.d);
    t.ye.resize((size_t)ne * m.d);
  }
  if (t.g.size() < (size_t)ne * m.ff) {
    t.g.resize((size_t)ne * m.ff);
    t.u.resize((size_t)ne * m.ff);
    t.h.resize((size_t)ne * m.ff);
  }
}

// Each chosen expert over its tokens, one after another, each product's rows split across the
// threads: for few experts per step (decode with many threads).
void one_by_one(const MoeExperts& m, const float* xn, MoeScratch& s, ThreadPool& pool, const MatmulKernels& k) {
  MoeScratch::Thread& t = s.threads[0];
  auto quantize = [&](const float* src, int n, int cols, const PackedMatrix& W, const char* region) {
    t.qa.resize(n, cols, wants_per_token(W));
    t.qa.x = src;
    parallel_ranges(pool, n, region, [&](int64_t b, int64_t e) { quantize_acts(src, b, e, t.qa); });
  };
  for (int e : s.active) {
    const int ne = s.count[e];
    grow(t, m, ne);
    gather(m, s, e, xn, t.xe.data());
    quantize(t.xe.data(), ne, m.d, m.gate[e], "moe_expert_gate_up");
    const MatmulJob gu[] = {{&m.gate[e], t.g.data(), m.ff}, {&m.up[e], t.u.data(), m.ff}};
    matmul_parallel(k, pool, t.qa, gu, 2, "moe_expert_gate_up");
    swiglu(t.g.data(), t.u.data(), t.h.data(), (int64_t)ne * m.ff);
    quantize(t.h.data(), ne, m.ff, m.down[e], "moe_expert_down");
    const MatmulJob dn[] = {{&m.down[e], t.ye.data(), m.d}};
    matmul_parallel(k, pool, t.qa, dn, 1, "moe_expert_down");
    scatter(m, s, e, t.ye.data());
  }
}

// Every chosen expert whole on one thread (gather, quantize, gate/up, SwiGLU, down), the largest
// first, taken by whichever thread is free: one parallel region instead of two barriers per expert.
void in_parallel(const MoeExperts& m, const float* xn, MoeScratch& s, ThreadPool& pool, const MatmulKernels& k) {
  std::stable_sort(s.active.begin(), s.active.end(), [&](int a, int b) { return s.count[a] > s.count[b]; });
  if (s.threads.size() < (size_t)pool.size()) s.threads.resize(pool.size());
  std::atomic<int> next{0};
  pool.run([&](int th, int) {
    MoeScratch::Thread& t = s.threads[th];
    for (int a = next.fetch_add(1); a < (int)s.active.size(); a = next.fetch_add(1)) {
      const int e = s.active[a], ne = s.count[e];
      grow(t, m, ne);
      gather(m, s, e, xn, t.xe.data());
      t.qa.resize(ne, m.d, wants_per_token(m.gate[e]));
      t.qa.x = t.xe.data();
      quantize_acts(t.xe.data(), 0, ne, t.qa);
      gemm_rows(k, m.gate[e], t.qa, 0, m.ff, t.g.data(), m.ff);
      gemm_rows(k, m.up[e], t.qa, 0, m.ff, t.u.data(), m.ff);
      swiglu(t.g.data(), t.u.data(), t.h.data(), (int64_t)ne * m.ff);
      t.qa.resize(ne, m.ff, wants_per_token(m.down[e]));
      t.qa.x = t.h.data();
      quantize_acts(t.h.data(), 0, ne, t.qa);
      gemm_rows(k, m.down[e], t.qa, 0, m.d, t.ye.data(), m.d);
      scatter(m, s, e, t.ye.data());
    }
  }, "moe_experts");
}

}  // namespace

void moe_route(const MoeExperts& m, float* router, int T, MoeScratch& s) {
  const int E = m.n_expert, K = m.n_used;
  std::fill(s.count.begin(), s.count.end(), 0);
  std::vector<int>& order = s.order;
  for (int t = 0; t < T; ++t) {
    float* p = &router[(size_t)t * E];
    for (int e = 0; e < E; ++e) p[e] = sigmoid(p[e]);
    for (int e = 0; e < E; ++e) order[e] = e;
    // Top K by p + bias, ties to the lower expert index (a stable order).
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
      const float sa = p[a] + m.bias[a], sb = p[b] + m.bias[b];
      return sa > sb || (sa == sb && a < b);
    });
    float sum = 0;
    for (int j = 0; j < K; ++j) sum += p[order[j]];
    const float norm = m.weights_norm ? 1.0f / std::max(sum, 6.103515625e-5f) : 1.0f;
    std::sort(order.begin(), order.begin() + K);  // a token's slots in expert order (the combine's)
    for (int j = 0; j < K; ++j) {
      s.sel[(size_t)t * K + j] = order[j];
      s.sel_w[(size_t)t * K + j] = p[order[j]] * norm * m.weights_scale;
      s.count[order[j]]++;
    }
  }
  // The slots of each expert, bucketed in slot order.
  s.first[0] = 0;
  for (int e = 0; e < E; ++e) s.first[e + 1] = s.first[e] + s.count[e];
  s.active.clear();
  for (int e = 0; e < E; ++e)
    if (s.count[e] > 0) s.active.push_back(e);
  for (int e = 0; e < E; ++e) order[e] = s.first[e];  // the next free place of each bucket
  for (int i = 0; i < T * K; ++i) s.tokens[order[s.sel[i]]++] = i;
}

OpCost moe_experts_cost(const MoeExperts& m, const MoeScratch& s) {
  OpCost cost;
  for (int e : s.active) {
    const int ne = s.count[e];
    cost += matmul_cost(m.gate[e], ne);
    cost += matmul_cost(m.up[e], ne);
    cost += matmul_cost(m.down[e], ne);
    cost.flops += 6.0 * ne * m.ff;  // SwiGLU
  }
  return cost;
}

void moe_experts(const MoeExperts& m, const float* xn, MoeScratch& s, ThreadPool& pool, const MatmulKernels& k) {
  if (s.active.empty()) return;
  const int nt = pool.size();
  if (nt > 1 && (int)s.active.size() >= 2 * nt) in_parallel(m, xn, s, pool, k);
  else one_by_one(m, xn, s, pool, k);
}

void moe_combine(const MoeExperts& m, int T, const MoeScratch& s, float* out, ThreadPool& pool) {
  const int d = m.d, K = m.n_used;
  parallel_ranges(pool, T, "moe_combine", [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* dst = &out[(size_t)t * d];
      for (int64_t i = t * K; i < (t + 1) * K; ++i) {  // the router wrote them in expert order
        const float w = s.sel_w[i];
        const float* src = &s.slot_out[(size_t)i * d];
        for (int j = 0; j < d; ++j) dst[j] += w * src[j];
      }
    }
  });
}

}  // namespace ouro
