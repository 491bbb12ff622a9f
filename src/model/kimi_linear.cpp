// The `kimi-linear` forward pass (model.h's interface, kimi_linear.h's weights), layer by layer as
// docs/hybrid.md writes the math: embed; per layer h += mixer(attn_norm(h)) with the mixer KDA or
// MLA, then h += ffn(ffn_norm(h)) with the FFN dense or a mixture of experts; output_norm ->
// lm_head. The sequences of a batch run one after the other, each through every layer, its KDA
// state in its slot of the recurrent-state store and its MLA latent rows in its blocks of the paged
// KV cache. One trace span per op with its bytes and FLOPs. Loading is in kimi_linear_load.cpp.
#include "model/kimi_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fault.h"
#include "core/thread_pool.h"
#include "kernels/kda.h"
#include "kernels/ops.h"
#include "trace/trace.h"

namespace ouro {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// ggml's softplus: the identity above 20, where log1p(exp(x)) rounds to x anyway.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Prompt tokens per MLA attention work item (attend_paged_tokens): each cached row is read once per
// tile instead of once per token; the scratch scores grow with it (tile * heads * keys floats per
// thread: 32 MiB at 8 heads and 131,072 keys).
constexpr int kMlaTokenTile = 8;
// Cached keys per block of the decompressing form (Pass::mla_given): a block's latent rows, one
// head's keys and values and the scores of 512 tokens over it stay in L2.
constexpr int kMlaKeyBlock = 128;
// Cached keys per chunk when one sampled token attends in the absorbed form (Pass::mla_sampled):
// the threads take chunks (and, when there are few, groups of heads), so every row is read from
// memory once per token for all heads and found in L2 by the weighted sum; the chunks' softmaxes
// then merge (merge_attention_chunks). Chunks sit at fixed positions, so the bits depend on the
// depth only, never on the thread count; up to 256 keys it is one chunk, the unchunked arithmetic.
constexpr int kMlaDecodeChunk = 256;

// The arithmetic a matmul's FLOPs run in (traces compare them with that peak).
const char* precision_of(const PackedMatrix& W) { return W.kind == PackedKind::kRows ? nullptr : "int8"; }

// One sequence's pass: the model, its memory and the scratch, and the ops every layer uses.
struct Pass {
  const KimiLinearModel& m;
  const KimiConfig& c;
  PagedKvCache& kv;
  float* state;  // the sequence's slot of the recurrent-state store
  const SeqBatch& b;
  KimiWorkspace& ws;
  ThreadPool& pool;
  const MatmulKernels& k;
  int T, n_past;

  // KDA layer li's conv window of input j (0 q, 1 k, 2 v), and its S.
  float* conv_window(int li, int j) const { return state + li * c.kda_layer_floats() + j * c.conv_floats(); }
  float* kda_S(int li) const { return state + li * c.kda_layer_floats() + 3 * c.conv_floats(); }
  // The KV cache row of this sequence's position pos in MLA layer li.
  uint8_t* latent_row(int li, int pos) const {
    const int bs = kv.block_size();
    return kv.row(li, false, b.blocks[pos / bs], pos % bs);
  }

  // Quantizes rows [0, n) of src ([n][cols]) for products with `consumer`.
  void quantize(const char* region, const float* src, int n, int cols, const PackedMatrix& consumer) {
    ws.qa.resize(n, cols, wants_per_token(consumer));
    ws.qa.x = src;
    parallel_ranges(pool, n, region, [&](int64_t b, int64_t e) { quantize_acts(src, b, e, ws.qa); });
  }
  // xn = rmsnorm(src) * weight for every token, quantized for `consumer`, as one traced op.
  void norm(const char* name, int layer, const float* weight, const float* src, const PackedMatrix& consumer) {
    const int d = c.n_embd;
    trace::Span sp(name, "op", layer, T, 8.0 * T * d + 4.0 * d, 6.0 * T * d);
    fault::at_op(name);
    parallel_ranges(pool, T, name, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) rmsnorm(src + t * d, weight, &ws.xn[t * d], d, c.rms_eps);
    });
    quantize(name, ws.xn.data(), T, d, consumer);
  }
  // Every job over the activations last quantized, in one parallel region.
  void matmul(const char* name, int layer, std::initializer_list<MatmulJob> jobs) {
    OpCost cost;
    for (const MatmulJob& j : jobs) cost += matmul_cost(*j.W, ws.qa.T);
    trace::Span sp(name, "op", layer, (int)ws.qa.T, cost.bytes, cost.flops);
    fault::at_op(name);
    sp.precision(precision_of(*jobs.begin()->W));
    matmul_parallel(k, pool, ws.qa, jobs.begin(), (int)jobs.size(), name);
  }
  // One quantize + product over n rows of src, as one op.
  void project(const char* name, int layer, const float* src, int n, int cols, const PackedMatrix& W, float* y, int64_t ldy) {
    quantize(name, src, n, cols, W);
    matmul(name, layer, {{&W, y, ldy}});
  }
  void add_residual(const char* name, int layer) {
    const int64_t n = (int64_t)T * c.n_embd;
    trace::Span sp(name, "op", layer, T, 12.0 * n, (double)n);
    for (int64_t i = 0; i < n; ++i) ws.x[i] += ws.tmp[i];
  }

  void kda(int l);
  // n tokens at positions past.. in tiles of tt: each token's key count (n_keys, through the lab's
  // truncating fault) and the tiles' running key totals (cum_keys, for split_weighted); the tiles.
  int token_tiles(int past, int n, int tt) {
    const int units = (n + tt - 1) / tt;
    ws.cum_keys[0] = 0;
    for (int u = 0; u < units; ++u) {
      int64_t keys = 0;
      for (int t = u * tt; t < std::min(n, u * tt + tt); ++t) {
        ws.n_keys[t] = fault::attention_keys(past + t + 1);
        keys += past + t + 1;
      }
      ws.cum_keys[u + 1] = ws.cum_keys[u] + keys;
    }
    return units;
  }
  void mla(int l);
  void mla_given(int l, int n);
  void mla_sampled(int l, int t0);
  void mla_one_chunked(int past, const float* qk, float scale, const KvPages& pages, float* ctx);
  void dense_ffn(int l);
  void moe(int l);
  void head(float* logits, bool all_logits);
};

// Kimi Delta Attention: projections, short causal conv + SiLU, L2 norm of q and k, the forget gate
// per key channel and beta per head, the delta rule over the fp32 state, the gated head norm, W_o.
void Pass::kda(int l) {
  const KdaWeights& K = m.layers()[l].kda;
  const int H = c.n_head, D = c.head_dim, I = c.d_inner(), li = c.mixer_index[l];
  float* proj[3] = {ws.proj[0].data(), ws.proj[1].data(), ws.proj[2].data()};
  float* qkv[3] = {ws.conv[0].data(), ws.conv[1].data(), ws.conv[2].data()};
  float *fa = ws.fa.data(), *ga = ws.ga.data(), *gate = ws.gate.data(), *og = ws.og.data(), *beta = ws.beta.data();
  float* o = ws.o.data();
  matmul("kda_proj", l, {{&K.wq, proj[0], I}, {&K.wk, proj[1], I}, {&K.wv, proj[2], I},
                         {&K.f_a, fa, D}, {&K.g_a, ga, D}, {&K.beta, beta, H}});
  project("kda_gate", l, fa, T, D, K.f_b, gate, I);
  project("kda_out_gate", l, ga, T, D, K.g_b, og, I);
  {
    trace::Span sp("kda_conv", "op", l, T, 3 * 8.0 * T * I, 3 * 2.0 * T * I * c.d_conv);
    fault::at_op("kda_conv");
    parallel_ranges(pool, 3, "kda_conv", [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j)
        m.kda_kernels().conv_silu(proj[j], I, T, I, K.conv[j], c.d_conv, conv_window(li, (int)j), qkv[j], I);
    }, T >= 4 ? 2 : 4);
  }
  {
    trace::Span sp("kda_gates", "op", l, T, 16.0 * T * I, 12.0 * T * I);
    fault::at_op("kda_gates");
    parallel_ranges(pool, T, "kda_gates", [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        for (int h = 0; h < H; ++h) {
          m.kda_kernels().l2norm(&qkv[0][t * I + h * D], D, c.rms_eps);
          m.kda_kernels().l2norm(&qkv[1][t * I + h * D], D, c.rms_eps);
          beta[t * H + h] = sigmoid(beta[t * H + h]);
        }
        for (int i = 0; i < I; ++i) gate[t * I + i] = K.a[i / D] * softplus(gate[t * I + i] + K.dt_bias[i]);
      }
    });
  }
  {
    trace::Span sp("kda_recurrent", "op", l, T, (double)H * (2 * kda_state_bytes(D, D) + 20.0 * T * D),
                   (double)H * kda_recurrent_flops(T, D, D));
    fault::at_op("kda_recurrent");
    const float scale = 1.0f / std::sqrt((float)D);
    parallel_ranges(pool, H, "kda_recurrent", [&](int64_t b, int64_t e) {
      for (int64_t h = b; h < e; ++h) {
        KdaHead hd;
        hd.q = qkv[0] + h * D, hd.k = qkv[1] + h * D, hd.v = qkv[2] + h * D;
        hd.g = gate + h * D, hd.beta = beta + h, hd.o = o + h * D;
        hd.qk_stride = hd.v_stride = hd.g_stride = hd.o_stride = I;
        hd.beta_stride = H;
        m.kda_kernels().recurrent(hd, T, D, D, scale, kda_S(li) + h * D * D);
      }
    }, 2);
  }
  {
    trace::Span sp("kda_out_norm", "op", l, T, 12.0 * T * I, 10.0 * T * I);
    fault::at_op("kda_out_norm");
    parallel_ranges(pool, T, "kda_out_norm", [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        for (int h = 0; h < H; ++h) {
          float* oh = &o[t * I + h * D];
          rmsnorm(oh, K.out_norm, oh, D, c.rms_eps);
          for (int i = 0; i < D; ++i) oh[i] *= sigmoid(og[t * I + h * D + i]);
        }
    });
  }
  project("kda_out", l, o, T, I, K.wo, ws.tmp.data(), c.n_embd);
}

// Multi-head latent attention. The paged cache holds per position one row: the normed latent and
// the shared rope key part, in --kv's type. Tokens given to the model (a prompt) attend in the
// decompressing form (mla_given): every cached row is multiplied out into each head's key and
// values, which the tokens' own queries then attend over. Tokens the model sampled (decode) attend
// in the absorbed form (mla_sampled): each head's query is moved into latent space (W_kb), attends
// over the cached rows themselves (keys and values at once), and its latent context is moved out
// (W_vb), which reads 576 values per key instead of decompressing every key for one token. The form
// follows the token's kind, never the chunk's length, so a token's arithmetic does not depend on how
// its prompt was chunked (docs/hybrid.md). No RoPE: kimi-linear applies none.
void Pass::mla(int l) {
  const MlaWeights& A = m.layers()[l].mla;
  const int W = c.latent(), L = c.kv_lora;
  const int li = c.mixer_index[l];
  float* ckv = ws.ckv.data();
  matmul("mla_proj", l, {{&A.wq, ws.q.data(), (int64_t)c.n_head * c.k_mla}, {&A.wkv_a, ckv, W}});
  {
    trace::Span sp("mla_latent", "op", l, T, 8.0 * T * W, 6.0 * T * L);
    fault::at_op("mla_latent");
    const KvType type = kv.spec().k[li];
    for (int t = 0; t < T; ++t) {
      float* row = &ckv[(size_t)t * W];
      rmsnorm(row, A.kv_norm, row, L, c.rms_eps);
      kv_encode_row(type, row, 1, W, latent_row(li, n_past + t));
    }
  }
  const int given = T - std::clamp(b.n_sampled, 0, T);
  if (given > 0) mla_given(l, given);
  if (given < T) mla_sampled(l, given);
  project("mla_out", l, ws.mo.data(), T, c.n_head * c.v_mla, A.wo, ws.tmp.data(), c.n_embd);
}

// Tokens [0, n), in the decompressing form, with an online softmax over blocks of kMlaKeyBlock
// cached keys at fixed positions. Per block the latent rows are read once; per head they become the
// head's keys as columns (W_kb^h times the block's latent columns, the shared rope part under them)
// and its values as rows (the latent rows times W_vb^h); then one product gives the scores of the
// tokens that see the block, the softmax's running maximum and sum are updated, and one product adds
// the weighted values. A token's arithmetic depends on its position and the cached rows only, never
// on how its prompt was chunked: the blocks sit at absolute positions, every product's output is one
// fma chain whatever rows come with it (rows_times_matrix), and masked keys weigh exactly 0.
// Threads take whole heads.
void Pass::mla_given(int l, int n) {
  const MlaWeights& A = m.layers()[l].mla;
  const int H = c.n_head, L = c.kv_lora, R = c.rope, KQ = c.k_mla, NOPE = c.nope(), V = c.v_mla, W = L + R;
  const int li = c.mixer_index[l];
  const int D = n_past + n, nt = pool.size(), B = kMlaKeyBlock;
  const KvType type = kv.spec().k[li];
  const int64_t blocks = (D + B - 1) / B;
  const int64_t keys = (int64_t)n * n_past + (int64_t)n * (n + 1) / 2;
  const int readers = std::min(nt, H);
  trace::Span sp("mla_attention", "op", l, n,
                 (double)kv_row_bytes(type, 1, W) * D * readers + 4.0 * H * L * (NOPE + V) + 8.0 * n * H * (KQ + V),
                 (double)H * (2.0 * D * L * (NOPE + V) + keys * (2.0 * (KQ + V) + 5.0)));
  fault::at_op("mla_attention");
  for (int t = 0; t < n; ++t) ws.n_keys[t] = fault::attention_keys(n_past + t + 1);
  // Per thread: the block's latent rows and columns, one head's keys and values, scores, output, factors.
  const size_t per_thread = (size_t)2 * B * W + (size_t)KQ * B + (size_t)B * V + (size_t)n * B + (size_t)n * V + n;
  if (ws.dscratch.size() < nt * per_thread) ws.dscratch.resize(nt * per_thread);
  if (ws.dstat.size() < (size_t)2 * H * n) ws.dstat.resize((size_t)2 * H * n);
  std::fill(ws.dstat.begin(), ws.dstat.begin() + (size_t)H * n, -INFINITY);  // running maxima
  std::fill(ws.dstat.begin() + (size_t)H * n, ws.dstat.begin() + (size_t)2 * H * n, 0.0f);  // running sums
  float* mo = ws.mo.data();
  std::fill(mo, mo + (size_t)n * H * V, 0.0f);
  const float scale = 1.0f / std::sqrt((float)KQ);
  const float* q = ws.q.data();
  const Isa isa = m.isa();
  pool.run([&](int th, int nthreads) {
    const int h0 = H * th / nthreads, h1 = H * (th + 1) / nthreads;
    if (h0 == h1) return;
    float* lat = &ws.dscratch[(size_t)th * per_thread];
    float *latT = lat + (size_t)B * W, *kT = latT + (size_t)B * W, *vb = kT + (size_t)KQ * B, *s = vb + (size_t)B * V;
    float *ob = s + (size_t)n * B, *al = ob + (size_t)n * V;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int p0 = (int)(kb * B), np = std::min(B, D - p0);
      const int t0 = std::max(0, p0 - n_past), nq = n - t0;  // tokens [t0, n) see the block
      for (int i = 0; i < np; ++i) kv_decode_row(type, latent_row(li, p0 + i), 1, W, &lat[(size_t)i * W]);
      for (int w = 0; w < W; ++w)
        for (int i = 0; i < np; ++i) latT[(size_t)w * np + i] = lat[(size_t)i * W + w];
      for (int h = h0; h < h1; ++h) {
        rows_times_matrix(&A.dk[(size_t)h * NOPE * L], NOPE, L, L, latT, np, kT, np, isa);
        std::memcpy(kT + (size_t)NOPE * np, latT + (size_t)L * np, sizeof(float) * R * np);
        rows_times_matrix(lat, np, W, L, &A.dv[(size_t)h * L * V], V, vb, V, isa);
        rows_times_matrix(&q[((size_t)t0 * H + h) * KQ], nq, (int64_t)H * KQ, KQ, kT, np, s, np, isa);
        float *mx = &ws.dstat[(size_t)h * n], *sum = &ws.dstat[(size_t)(H + h) * n];
        for (int r = 0; r < nq; ++r) {
          const int t = t0 + r, cnt = (int)std::clamp<int64_t>(ws.n_keys[t] - p0, 0, np);
          if (cnt == 0) {
            std::fill(s + (size_t)r * np, s + (size_t)(r + 1) * np, 0.0f);
            al[r] = -1.0f;  // the block is past this token's keys: its output stays
          } else {
            al[r] = online_softmax_block(s + (size_t)r * np, cnt, np, scale, &mx[t], &sum[t]);
          }
        }
        rows_times_matrix(s, nq, np, np, vb, V, ob, V, isa);
        for (int r = 0; r < nq; ++r) {
          if (al[r] < 0.0f) continue;
          float* o = &mo[((size_t)(t0 + r) * H + h) * V];
          for (int v = 0; v < V; ++v) o[v] = o[v] * al[r] + ob[(size_t)r * V + v];
        }
      }
    }
    for (int h = h0; h < h1; ++h)
      for (int t = 0; t < n; ++t) {
        const float inv = 1.0f / ws.dstat[(size_t)(H + h) * n + t];
        float* o = &mo[((size_t)t * H + h) * V];
        for (int v = 0; v < V; ++v) o[v] *= inv;
      }
  }, "mla_attention");
}

// Tokens [t0, T) in the absorbed form, into mo.
void Pass::mla_sampled(int l, int t0) {
  const MlaWeights& A = m.layers()[l].mla;
  const int H = c.n_head, L = c.kv_lora, R = c.rope, KQ = c.k_mla, NOPE = c.nope(), V = c.v_mla, W = L + R;
  const int li = c.mixer_index[l];
  const int n = T - t0, past = n_past + t0;
  const float* q = ws.q.data() + (size_t)t0 * H * KQ;
  float *gather = ws.gather.data(), *qk = ws.qk.data(), *ctx = ws.ctx.data();
  float* mo = ws.mo.data() + (size_t)t0 * H * V;
  // qk[t][h] = [W_kb^h q_nope[t][h], q_rope[t][h]]: the query against the cached rows.
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < n; ++t) {
      const float* qh = &q[((size_t)t * H + h) * KQ];
      std::memcpy(&gather[(size_t)t * NOPE], qh, sizeof(float) * NOPE);
      std::memcpy(&qk[((size_t)t * H + h) * W + L], qh + NOPE, sizeof(float) * R);
    }
    project("mla_absorb_k", l, gather, n, NOPE, A.k_b[h], qk + (size_t)h * W, (int64_t)H * W);
  }
  {
    const int64_t keys = (int64_t)n * past + (int64_t)n * (n + 1) / 2;
    trace::Span sp("mla_attention", "op", l, n, (double)kv_row_bytes(kv.spec().k[li], 1, W) * keys + 8.0 * n * H * W,
                   (double)H * keys * attend_one_flops(1, W));
    fault::at_op("mla_attention");
    const float scale = 1.0f / std::sqrt((float)KQ);
    const KvPages pages{b.blocks, kv.block_size(), kv.side(li, false, 0), kv.side(li, true, 0)};
    // Tokens past one chunk of keys attend chunked, one at a time (mla_one_chunked), so a sampled
    // token's bits are the same whether it is a decode step or recomputed in a batch; the first
    // n_short attend below. The chunked form needs rows of whole 8-float vectors (any file's
    // kv_lora and rope are accepted, so other widths keep the unchunked form at every depth).
    const bool chunkable = W % 8 == 0 && L % 8 == 0;
    const int n_short = chunkable ? std::clamp(kMlaDecodeChunk - past, 0, n) : n;
    for (int t = n_short; t < n; ++t)
      mla_one_chunked(past + t, qk + (size_t)t * H * W, scale, pages, ctx + (size_t)t * H * W);
    if (n_short > 0) {
    const int n = n_short;
    const int max_keys = past + n;
    // Work items: (tile of tt tokens, group of gs heads). All heads of a token in one group read
    // each cached row once; several tokens go in tiles that read each row once for the tile
    // (attend_paged_tokens); one token splits its heads into as many groups as keep every thread
    // busy. A head's bits depend on neither its group nor its tile.
    const int nt = pool.size();
    int ng = 1;
    while (ng < H && !((int64_t)n * ng >= 8 * nt || ((int64_t)n * ng) % nt == 0)) {
      ++ng;
      while (H % ng != 0) ++ng;
    }
    const int gs = H / ng;
    const int tt = ng == 1 ? std::clamp(n / (4 * nt), 1, kMlaTokenTile) : 1;
    const int units = token_tiles(past, n, tt);
    const size_t per_thread = (size_t)tt * gs * max_keys;
    if (ws.scores.size() < nt * per_thread) ws.scores.resize(nt * per_thread);
    pool.run([&](int th, int nthreads) {
      int64_t b, e;
      ThreadPool::split_weighted(ws.cum_keys.data(), units, ng, th, nthreads, &b, &e);
      float* scores = &ws.scores[(size_t)th * per_thread];
      // The value rows are the cached rows themselves: the first L values are the latent context.
      for (int64_t i = b; i < e; ++i) {
        const int t = (int)(i / ng) * tt, cnt = std::min(tt, n - t);
        const size_t h0 = (size_t)t * H + (size_t)(i % ng) * gs;
        attend_paged_tokens(&qk[h0 * W], cnt, gs, W, pages, &ws.n_keys[t], W, L, scale, scores, &ctx[h0 * W], W,
                            m.isa());
      }
    }, "mla_attention");
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < n; ++t) std::memcpy(&gather[(size_t)t * L], &ctx[((size_t)t * H + h) * W], sizeof(float) * L);
    project("mla_absorb_v", l, gather, n, L, A.v_b[h], mo + (size_t)h * V, (int64_t)H * V);
  }
}

// One sampled token at position past over its cached rows in chunks of kMlaDecodeChunk positions
// (its queries in qk, its latent contexts into ctx; the caller's span and fault hook). Work items:
// (chunk, group of heads), as few groups as leave 4 items a thread; each item's softmax is its own
// (attend_paged_tokens over the chunk, with its max and sum), then each head's chunks merge in
// position order. A head's bits depend on its depth only: not on its group, nor on the threads.
void Pass::mla_one_chunked(int past, const float* qk, float scale, const KvPages& pages, float* ctx) {
  const int H = c.n_head, L = c.kv_lora, W = L + c.rope, C = kMlaDecodeChunk;
  token_tiles(past, 1, 1);  // n_keys[0]: the token's keys (through the lab's truncating fault)
  const int64_t D = ws.n_keys[0];
  const int chunks = (int)((D + C - 1) / C), nt = pool.size();
  int ng = 1;
  while (ng < H && (int64_t)chunks * ng < 4 * nt) {
    ++ng;
    while (H % ng != 0) ++ng;
  }
  const int gs = H / ng;
  if (ws.chunk_cum.size() < (size_t)chunks + 1) ws.chunk_cum.resize(chunks + 1);
  ws.chunk_cum[0] = 0;
  for (int k = 0; k < chunks; ++k) ws.chunk_cum[k + 1] = std::min<int64_t>(D, (int64_t)(k + 1) * C);
  if (ws.parts.size() < (size_t)chunks * H * L) ws.parts.resize((size_t)chunks * H * L);
  if (ws.part_stats.size() < (size_t)chunks * H * 2) ws.part_stats.resize((size_t)chunks * H * 2);
  if (ws.scores.size() < (size_t)nt * gs * C) ws.scores.resize((size_t)nt * gs * C);
  float *parts = ws.parts.data(), *st = ws.part_stats.data();
  pool.run([&](int th, int nthreads) {
    int64_t b, e;
    ThreadPool::split_weighted(ws.chunk_cum.data(), chunks, ng, th, nthreads, &b, &e);
    float* scores = &ws.scores[(size_t)th * gs * C];
    for (int64_t i = b; i < e; ++i) {
      const int k = (int)(i / ng), h0 = (int)(i % ng) * gs;
      const int64_t end = ws.chunk_cum[k + 1];
      attend_paged_tokens(&qk[(size_t)h0 * W], 1, gs, W, pages, &end, W, L, scale, scores,
                          &parts[((size_t)k * H + h0) * L], L, m.isa(), ws.chunk_cum[k], &st[((size_t)k * H + h0) * 2]);
    }
  }, "mla_attention");
  parallel_ranges(pool, H, "mla_attention", [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      merge_attention_chunks(&parts[(size_t)h * L], (int64_t)H * L, &st[(size_t)h * 2], (int64_t)H * 2, chunks, L,
                             &ctx[(size_t)h * W]);
  });
}

void Pass::dense_ffn(int l) {
  const FfnWeights& F = m.layers()[l].ffn;
  const int ff = c.n_ff;
  float *g = ws.g.data(), *u = ws.u.data(), *h = ws.h.data();
  matmul("ffn_gate_up", l, {{&F.gate, g, ff}, {&F.up, u, ff}});
  {
    trace::Span sp("swiglu", "op", l, T, 12.0 * T * ff, 6.0 * T * ff);
    swiglu(g, u, h, (int64_t)T * ff);
  }
  project("ffn_down", l, h, T, ff, F.down, ws.tmp.data(), c.n_embd);
}

// Mixture of experts (kernels/moe.h): sigmoid router, top-k by score + selection bias, weights the
// chosen scores (renormalised, scaled); the tokens grouped by expert so each expert's matrices are
// read once per call; plus the shared expert over every token.
void Pass::moe(int l) {
  const FfnWeights& F = m.layers()[l].ffn;
  const int d = c.n_embd, E = c.n_expert, sh = c.n_ff_shared;
  float *router = ws.router.data(), *g = ws.g.data(), *u = ws.u.data(), *h = ws.h.data(), *tmp = ws.tmp.data();
  if (sh > 0) matmul("moe_router_shared", l, {{&F.router, router, E}, {&F.gate, g, sh}, {&F.up, u, sh}});
  else matmul("moe_router_shared", l, {{&F.router, router, E}});
  const MoeExperts me = F.experts(c);
  {
    trace::Span sp("moe_route", "op", l, T, 4.0 * T * E, 8.0 * T * E);
    fault::at_op("moe_route");
    moe_route(me, router, T, ws.moe);
  }
  if (sh > 0) {
    {
      trace::Span sp("swiglu", "op", l, T, 12.0 * T * sh, 6.0 * T * sh);
      swiglu(g, u, h, (int64_t)T * sh);
    }
    project("moe_shared_down", l, h, T, sh, F.down, tmp, d);
  } else {
    std::fill(tmp, tmp + (size_t)T * d, 0.0f);
  }
  {
    const OpCost cost = moe_experts_cost(me, ws.moe);
    trace::Span sp("moe_experts", "op", l, T, cost.bytes, cost.flops);
    fault::at_op("moe_experts");
    sp.precision(precision_of(F.e_gate[ws.moe.active[0]]));
    moe_experts(me, ws.xn.data(), ws.moe, pool, k);
  }
  moe_combine(me, T, ws.moe, tmp, pool);
}

void Pass::head(float* logits, bool all_logits) {
  const int d = c.n_embd, n_out = all_logits ? T : 1, first = all_logits ? 0 : T - 1;
  {
    trace::Span sp("output_norm", "op", -1, n_out, 8.0 * n_out * d, 6.0 * n_out * d);
    fault::at_op("output_norm");
    for (int r = 0; r < n_out; ++r) rmsnorm(&ws.x[(size_t)(first + r) * d], m.output_norm(), &ws.xn[(size_t)r * d], d, c.rms_eps);
  }
  quantize("lm_head", ws.xn.data(), n_out, d, m.output());
  matmul("lm_head", -1, {{&m.output(), logits, c.n_vocab}});
}

}  // namespace

Status KimiLinearModel::forward(const ModelMemory& mem, Workspace& ws_base, const SeqBatch* seqs, int n_seqs,
                                float* logits, ThreadPool& pool, const MatmulKernels& k) const {
  const KimiConfig& c = cfg_;
  KimiWorkspace& ws = static_cast<KimiWorkspace&>(ws_base);
  fault::at_start();
  int total = 0;
  for (int s = 0; s < n_seqs; ++s) total += std::max(0, seqs[s].n);
  if (total <= 0) return usage_error("no tokens to process");
  fault::at_batch(total, pool.size());
  const int d = c.n_embd;
  for (int s = 0; s < n_seqs; ++s) {
    const SeqBatch& b = seqs[s];
    const int T = b.n;
    if (T <= 0) continue;
    if (T > ws.max_tokens())
      return usage_error("batch of " + std::to_string(T) + " tokens exceeds the workspace of " +
                         std::to_string(ws.max_tokens()));
    float* state = reinterpret_cast<float*>(mem.state.slot(b.state_slot));
    Pass p{*this, c, mem.kv, state, b, ws, pool, k, T, b.n_past};
    {
      trace::Span sp("embed", "op", -1, T, 8.0 * T * d);
      fault::at_op("embed");
      for (int t = 0; t < T; ++t) embed(b.tokens[t], &ws.x[(size_t)t * d]);
    }
    for (int l = 0; l < c.n_layer; ++l) {
      if (fault::skip_layer(l, c.n_layer)) continue;  // the lab's skip-a-layer adversary
      const KimiLayer& L = layers_[l];
      if (!c.is_mla[l]) {
        p.norm("attn_norm", l, L.attn_norm, ws.x.data(), L.kda.wq);
        p.kda(l);
      } else {
        p.norm("attn_norm", l, L.attn_norm, ws.x.data(), L.mla.wq);
        p.mla(l);
      }
      p.add_residual("attn_residual", l);
      if (!c.is_moe(l)) {
        p.norm("ffn_norm", l, L.ffn_norm, ws.x.data(), L.ffn.gate);
        p.dense_ffn(l);
      } else {
        // Quantized for the shared expert's gate and up: a float router reads the float rows.
        p.norm("ffn_norm", l, L.ffn_norm, ws.x.data(), c.n_ff_shared > 0 ? L.ffn.gate : L.ffn.router);
        p.moe(l);
      }
      p.add_residual("ffn_residual", l);
      if (ws.layer_out) ws.layer_out->insert(ws.layer_out->end(), ws.x.begin(), ws.x.begin() + (size_t)T * d);
    }
    if (b.all_logits || b.want_logits) {
      p.head(logits, b.all_logits);
      logits += (size_t)(b.all_logits ? T : 1) * c.n_vocab;
    }
  }
  return Ok{};
}

KimiWorkspace::KimiWorkspace(const KimiConfig& c, int max_tokens_) : Workspace(max_tokens_) {
  const size_t B = max_tokens(), d = c.n_embd, I = c.d_inner(), W = c.latent();
  x.resize(B * d);
  xn.resize(B * d);
  tmp.resize(B * d);
  if (c.n_kda > 0) {
    for (int j = 0; j < 3; ++j) {
      proj[j].resize(B * I);
      conv[j].resize(B * I);
    }
    fa.resize(B * c.head_dim);
    ga.resize(B * c.head_dim);
    gate.resize(B * I);
    og.resize(B * I);
    beta.resize(B * c.n_head);
    o.resize(B * I);
  }
  if (c.n_mla > 0) {
    q.resize(B * c.n_head * c.k_mla);
    ckv.resize(B * W);
    gather.resize(B * std::max(c.nope(), c.kv_lora));
    qk.resize(B * c.n_head * W);
    ctx.resize(B * c.n_head * W);
    mo.resize(B * c.n_head * c.v_mla);
    cum_keys.resize(B + 1);
    n_keys.resize(B);
  }
  const size_t ff = std::max({c.n_ff, c.n_ff_exp, c.n_ff_shared});
  g.resize(B * ff);
  u.resize(B * ff);
  h.resize(B * ff);
  if (c.n_expert > 0) {
    router.resize(B * c.n_expert);
    moe.reserve(c.moe_shape(), (int)B);
  }
}

}  // namespace ouro
