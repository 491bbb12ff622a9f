// The Llama architecture's forward pass (model.h's interface, llama.h's weights), layer by layer as
// the model card reads: embed; per layer attn_norm -> qkv -> rope_kv (and the K/V rows written to
// the paged cache) -> attention -> attn_out (+ residual), ffn_norm -> gate_up -> swiglu -> down
// (+ residual); output_norm -> lm_head. One trace span per op with its bytes and FLOPs. Loading is
// in llama_load.cpp.
#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "core/fault.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "trace/trace.h"

namespace ouro {

// The arithmetic a matmul's FLOPs run in (traces compare them with that peak).
static const char* precision_of(const PackedMatrix& W) { return W.kind == PackedKind::kRows ? nullptr : "int8"; }

Status LlamaModel::forward(const ModelMemory& mem, Workspace& ws_base, const SeqBatch* seqs, int n_seqs, float* logits,
                           ThreadPool& pool, const MatmulKernels& k) const {
  const LlamaModel& m = *this;
  LlamaWorkspace& ws = static_cast<LlamaWorkspace&>(ws_base);
  PagedKvCache& kv = mem.kv;
  const LlamaConfig& c = m.config();
  const LlamaWeights& w = m.weights();
  const int d = c.n_embd, hd = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  const int q_dim = nh * hd, kv_dim = nkv * hd, ff = c.n_ff;
  const float attn_scale = 1.0f / std::sqrt((float)hd);
  const int64_t bs = kv.block_size();

  fault::at_start();
  // Flatten the batch: token t of the batch is sequence seq_[t]'s token at position pos_[t].
  int T = 0, n_out = 0, max_keys = 0;
  for (int s = 0; s < n_seqs; ++s) T += std::max(0, seqs[s].n);
  if (T <= 0) return usage_error("no tokens to process");
  fault::at_batch(T, pool.size());
  if (T > ws.max_tokens())
    return usage_error("batch of " + std::to_string(T) + " tokens exceeds the workspace of " +
                       std::to_string(ws.max_tokens()));
  ws.cum_keys_[0] = 0;
  for (int s = 0, t = 0; s < n_seqs; ++s) {
    const SeqBatch& b = seqs[s];
    for (int i = 0; i < b.n; ++i, ++t) {
      ws.tok_[t] = b.tokens[i];
      ws.pos_[t] = b.n_past + i;
      ws.seq_[t] = s;
      ws.cum_keys_[t + 1] = ws.cum_keys_[t] + b.n_past + i + 1;
      if (b.all_logits || (b.want_logits && i == b.n - 1)) ws.out_rows_[n_out++] = t;
    }
    max_keys = std::max(max_keys, b.n_past + b.n);
  }
  if ((int64_t)ws.scores_.size() < (int64_t)pool.size() * max_keys) ws.scores_.resize((size_t)pool.size() * max_keys);
  const int* pos = ws.pos_.data();
  // The K (v = false) or V row of batch token t in layer l.
  auto kv_row = [&](int l, bool v, int t) {
    return kv.row(l, v, seqs[ws.seq_[t]].blocks[pos[t] / bs], (int)(pos[t] % bs));
  };
  const KvSpec& kvs = kv.spec();
  std::vector<float>& x_ = ws.x_;
  std::vector<float>& xn_ = ws.xn_;
  QuantActs& qa_ = ws.qa_;

  // x: [T, d] residual stream; with each token its position's RoPE angles, taken once for q and k
  // of every layer
  const int half = hd / 2;
  {
    trace::Span sp("embed", "op", -1, T, 8.0 * T * d);
    fault::at_op("embed");
    for (int t = 0; t < T; ++t) {
      m.embed(ws.tok_[t], &x_[(size_t)t * d]);
      rope_angles(pos[t], w.rope_inv_freq.data(), half, &ws.rope_[(size_t)t * hd], &ws.rope_[(size_t)t * hd + half]);
    }
  }
  const double act_bytes = 4.0 * T * d;  // one [T, d] float activation

  // Norm then int8 quantization of [T, cols] activations, as one traced op.
  auto norm_and_quantize = [&](const char* name, int layer, const float* weight, const float* src, int cols,
                               const PackedMatrix& consumer) {
    trace::Span sp(name, "op", layer, T, 2 * act_bytes + 4.0 * cols, 6.0 * T * cols);
    fault::at_op(name);
    qa_.resize(T, cols, wants_per_token(consumer));
    qa_.x = xn_.data();
    parallel_ranges(pool, T, name, [&](int64_t t0, int64_t t1) {
      for (int t = t0; t < t1; ++t) rmsnorm(src + (size_t)t * cols, weight, &xn_[(size_t)t * cols], cols, c.rms_eps);
      quantize_acts(xn_.data(), t0, t1, qa_);
    });
    if (ws.stats_) {  // calibration: per-channel max |x| of this op's input
      std::vector<float>& st = name[0] == 'a' ? ws.stats_->attn : ws.stats_->ffn;
      float* mx = &st[(size_t)layer * cols];
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < cols; ++j) mx[j] = std::max(mx[j], std::fabs(xn_[(size_t)t * cols + j]));
    }
  };
  auto quantize_only = [&](const char* region, const float* src, int cols, const PackedMatrix& consumer) {
    qa_.resize(T, cols, wants_per_token(consumer));
    qa_.x = src;
    parallel_ranges(pool, T, region, [&](int64_t t0, int64_t t1) { quantize_acts(src, t0, t1, qa_); });
  };
  // One traced matmul op: quantize its input (unless already done), then all jobs in one region.
  auto matmul_op = [&](const char* name, int layer, const MatmulJob* jobs, int n) {
    OpCost cost;
    for (int j = 0; j < n; ++j) cost += matmul_cost(*jobs[j].W, T);
    trace::Span sp(name, "op", layer, T, cost.bytes, cost.flops);
    fault::at_op(name);
    sp.precision(precision_of(*jobs[0].W));
    matmul_parallel(k, pool, qa_, jobs, n, name);
  };
  float *q_ = ws.q_.data(), *k_ = ws.k_.data(), *v_ = ws.v_.data(), *att_ = ws.att_.data(), *tmp_ = ws.tmp_.data();

  for (int l = 0; l < c.n_layer; ++l) {
    if (fault::skip_layer(l, c.n_layer)) continue;  // the lab's skip-a-layer adversary
    const LayerWeights& L = w.layers[l];

    // attention block: xn = norm(x); q,k,v = xn Wq, xn Wk, xn Wv    q: [T, nh*hd], k,v: [T, nkv*hd]
    norm_and_quantize("attn_norm", l, L.attn_norm, x_.data(), d, L.wq);
    const MatmulJob qkv[] = {{&L.wq, q_, q_dim}, {&L.wk, k_, kv_dim}, {&L.wv, v_, kv_dim}};
    matmul_op("qkv", l, qkv, 3);
    {
    trace::Span sp("rope_kv", "op", l, T, 4.0 * T * (q_dim + 3.0 * kv_dim), 6.0 * T * (q_dim + kv_dim));
    fault::at_op("rope_kv");
    parallel_ranges(pool, T, "rope_kv", [&](int64_t t0, int64_t t1) {
      for (int t = t0; t < t1; ++t) {
        const float *cs = &ws.rope_[(size_t)t * hd], *sn = cs + half;
        rope_rotate(&q_[(size_t)t * q_dim], nh, hd, cs, sn);
        rope_rotate(&k_[(size_t)t * kv_dim], nkv, hd, cs, sn);
        kv_encode_row(kvs.k[l], &k_[(size_t)t * kv_dim], nkv, hd, kv_row(l, false, t));
        kv_encode_row(kvs.v[l], &v_[(size_t)t * kv_dim], nkv, hd, kv_row(l, true, t));
      }
    });
    }
    // att[t, h] = softmax(q[t,h] . K[0..pos[t]] / sqrt(hd)) . V, query head h reads kv head h / (nh/nkv)
    {
    // Bytes: every query reads its kv head's keys and values (K/V of one kv head are shared by
    // nh/nkv query heads and count once); FLOPs: every query head's dot products and sums.
    const double keys = (double)ws.cum_keys_[T];
    trace::Span sp("attention", "op", l, T, keys * (double)(kv_row_bytes(kvs.k[l], nkv, hd) + kv_row_bytes(kvs.v[l], nkv, hd)) + 2 * 4.0 * T * q_dim,
                   keys * nh * attend_one_flops(1, hd));
    fault::at_op("attention");
    const int attn_reps = fault::repeats("attention");  // the lab's wasted-work baselines
    pool.run([&](int th, int nt) {
      // Token t reads pos[t] + 1 keys: split by keys, not by items (in a 512-token prefill an even
      // split of items gives the second thread 3x the first's work).
      int64_t b, e;
      ThreadPool::split_weighted(ws.cum_keys_.data(), T, nh, th, nt, &b, &e);
      float* scores = &ws.scores_[(size_t)th * max_keys];
      for (int64_t i = b; i < e; ++i) {
        const int t = (int)(i / nh), h = (int)(i % nh), kvh = h / (nh / nkv);
        const KvPages pages{seqs[ws.seq_[t]].blocks, bs, kv.side(l, false, kvh), kv.side(l, true, kvh)};
        for (int r = 0; r < attn_reps; ++r)
          attend_paged(&q_[(size_t)t * q_dim + h * hd], pages, fault::attention_keys(pos[t] + 1), hd, attn_scale, scores,
                       &att_[(size_t)t * q_dim + h * hd]);
      }
    }, "attention");
    }
    {
      const MatmulJob o[] = {{&L.wo, tmp_, d}};
      OpCost cost = matmul_cost(L.wo, T);
      trace::Span sp("attn_out", "op", l, T, cost.bytes + 2 * act_bytes, cost.flops + (double)T * d);
      fault::at_op("attn_out");
      sp.precision(precision_of(L.wo));
      quantize_only("attn_out", att_, q_dim, L.wo);
      matmul_parallel(k, pool, qa_, o, 1, "attn_out");
      for (size_t i = 0; i < (size_t)T * d; ++i) x_[i] += tmp_[i];
    }

    // MLP block: x += down(silu(gate(xn)) * up(xn))    g,u,h: [T, ff]
    norm_and_quantize("ffn_norm", l, L.ffn_norm, x_.data(), d, L.w_gate);
    float *g_ = ws.g_.data(), *u_ = ws.u_.data(), *h_ = ws.h_.data();
    const MatmulJob gu[] = {{&L.w_gate, g_, ff}, {&L.w_up, u_, ff}};
    matmul_op("gate_up", l, gu, 2);
    {
      trace::Span sp("swiglu", "op", l, T, 12.0 * T * ff, 6.0 * T * ff);
      fault::at_op("swiglu");
      parallel_ranges(pool, T, "swiglu", [&](int64_t t0, int64_t t1) {
        swiglu(&g_[(size_t)t0 * ff], &u_[(size_t)t0 * ff], &h_[(size_t)t0 * ff], (int64_t)(t1 - t0) * ff);
      });
    }
    {
      const MatmulJob down[] = {{&L.w_down, tmp_, d}};
      OpCost cost = matmul_cost(L.w_down, T);
      trace::Span sp("down", "op", l, T, cost.bytes + 4.0 * T * ff + 2 * act_bytes, cost.flops + (double)T * d);
      fault::at_op("down");
      sp.precision(precision_of(L.w_down));
      quantize_only("down", h_, ff, L.w_down);
      matmul_parallel(k, pool, qa_, down, 1, "down");
      for (size_t i = 0; i < (size_t)T * d; ++i) x_[i] += tmp_[i];
    }
    if (ws.layer_out) ws.layer_out->insert(ws.layer_out->end(), x_.begin(), x_.begin() + (size_t)T * d);
  }
  if (n_out == 0) return Ok{};

  // logits = norm(x) W_out^T for the rows asked for
  {
    trace::Span sp("output_norm", "op", -1, n_out, 8.0 * n_out * d, 6.0 * n_out * d);
    fault::at_op("output_norm");
    qa_.resize(n_out, d, wants_per_token(m.output_matrix()));
    qa_.x = xn_.data();
    for (int r = 0; r < n_out; ++r) rmsnorm(&x_[(size_t)ws.out_rows_[r] * d], w.output_norm, &xn_[(size_t)r * d], d, c.rms_eps);
    quantize_acts(xn_.data(), 0, n_out, qa_);
  }
  const OpCost cost = matmul_cost(m.output_matrix(), n_out);
  trace::Span sp("lm_head", "op", -1, n_out, cost.bytes, cost.flops);
  fault::at_op("lm_head");
  sp.precision(precision_of(m.output_matrix()));
  const MatmulJob head[] = {{&m.output_matrix(), logits, c.n_vocab}};
  matmul_parallel(k, pool, qa_, head, 1, "lm_head");
  return Ok{};
}

}  // namespace ouro
