#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

#include "core/fault.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "trace/trace.h"

namespace ouro {

namespace {

// Fetches a tensor and checks its shape (ne order) and that its type is usable.
Expected<const GgufTensorInfo*> get_tensor(const GgufFile& f, const std::string& name, std::vector<int64_t> ne,
                                           bool must_be_f32 = false) {
  const GgufTensorInfo* t = f.tensor(name);
  if (!t) return runtime_error(f.path() + ": missing tensor '" + name + "'");
  if (t->ne != ne) {
    auto shape = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    return runtime_error(f.path() + ": tensor '" + name + "' has shape " + shape(t->ne) + ", expected " + shape(ne));
  }
  if (must_be_f32 && t->type != GgmlType::kF32)
    return runtime_error(f.path() + ": tensor '" + name + "' must be F32, is " + type_traits(t->type)->name);
  return t;
}

Expected<uint64_t> get_hparam(const GgufFile& f, const std::string& key, uint64_t lo, uint64_t hi) {
  auto v = f.get_uint(key);
  if (!v) return v.error();
  if (*v < lo || *v > hi)
    return runtime_error(f.path() + ": metadata '" + key + "' = " + std::to_string(*v) + " is out of range [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return *v;
}

}  // namespace

namespace {

enum W8Op { kOpQkv, kOpO, kOpGateUp, kOpDown, kOpHead, kNumW8Ops };
const char* const kW8OpNames[kNumW8Ops] = {"qkv", "o", "gate_up", "down", "head"};

struct W8Plan {
  bool on = false;
  bool ops[kNumW8Ops] = {};
  std::vector<bool> layers;
  std::string desc = "native";
};

Expected<W8Plan> plan_w8a8(const WeightRequest& wr, int n_layer) {
  W8Plan p;
  if (wr.mode != "native" && wr.mode != "w8a8")
    return usage_error("flag --weights: '" + wr.mode + "' is not one of native, w8a8");
  if (wr.mode == "native") {
    if (!wr.ops.empty() || !wr.layers.empty()) return usage_error("--w8a8-ops and --w8a8-layers need --weights w8a8");
    return p;
  }
  p.on = true;
  const std::string ops = wr.ops.empty() ? "qkv,o,gate_up,down" : wr.ops;
  size_t i = 0;
  while (i <= ops.size()) {
    size_t j = ops.find(',', i);
    if (j == std::string::npos) j = ops.size();
    const std::string name = ops.substr(i, j - i);
    int k = 0;
    while (k < kNumW8Ops && name != kW8OpNames[k]) ++k;
    if (k == kNumW8Ops) return usage_error("flag --w8a8-ops: unknown op '" + name + "' (known: qkv, o, gate_up, down, head)");
    if (p.ops[k]) return usage_error("flag --w8a8-ops: '" + name + "' is listed twice");
    p.ops[k] = true;
    i = j + 1;
  }
  p.layers.assign(n_layer, wr.layers.empty());
  if (!wr.layers.empty()) {
    i = 0;
    while (i <= wr.layers.size()) {
      size_t j = wr.layers.find(',', i);
      if (j == std::string::npos) j = wr.layers.size();
      int lo, hi;
      if (Status s = parse_layer_range(wr.layers.substr(i, j - i), n_layer, &lo, &hi); !s)
        return usage_error("flag --w8a8-layers: " + s.error().message);
      for (int l = lo; l <= hi; ++l) {
        if (p.layers[l]) return usage_error("flag --w8a8-layers: layer " + std::to_string(l) + " is listed twice");
        p.layers[l] = true;
      }
      i = j + 1;
    }
  }
  p.desc = "w8a8:" + ops + "@" + (wr.layers.empty() ? "all" : wr.layers);
  if (!wr.smooth_attn.empty()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "+smooth%.2g", wr.smooth_alpha);
    p.desc += buf;
  }
  return p;
}

}  // namespace

Expected<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& path, const WeightRequest& wr, Isa isa) {
  auto fr = GgufFile::open(path);
  if (!fr) return fr.error();
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->file_ = std::move(*fr);
  const GgufFile& f = *m->file_;
  auto arch = f.get_string("general.architecture");
  if (!arch) return arch.error();
  if (*arch != "llama")
    return runtime_error(path + ": unsupported architecture '" + *arch + "' (supported: llama)");

  LlamaConfig& c = m->cfg_;
  struct { const char* key; int* dst; uint64_t lo, hi; } hp[] = {
      {"llama.block_count", &c.n_layer, 1, 1024},
      {"llama.embedding_length", &c.n_embd, 1, 65536},
      {"llama.attention.head_count", &c.n_head, 1, 1024},
      {"llama.feed_forward_length", &c.n_ff, 1, 1 << 20},
      {"llama.context_length", &c.n_ctx_train, 1, 1 << 24},
  };
  for (auto& h : hp) {
    auto v = get_hparam(f, h.key, h.lo, h.hi);
    if (!v) return v.error();
    *h.dst = (int)*v;
  }
  c.n_head_kv = c.n_head;
  if (f.find("llama.attention.head_count_kv")) {
    auto v = get_hparam(f, "llama.attention.head_count_kv", 1, (uint64_t)c.n_head);
    if (!v) return v.error();
    c.n_head_kv = (int)*v;
  }
  if (c.n_head % c.n_head_kv != 0)
    return runtime_error(path + ": head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                         std::to_string(c.n_head_kv));
  if (c.n_embd % c.n_head != 0)
    return runtime_error(path + ": embedding_length is not a multiple of head_count");
  c.head_dim = c.n_embd / c.n_head;
  if (c.head_dim % 2 != 0 || c.head_dim > 256)
    return runtime_error(path + ": head dimension " + std::to_string(c.head_dim) + " is unsupported (even, <= 256)");
  c.rope_dim = c.head_dim;
  if (f.find("llama.rope.dimension_count")) {
    auto v = get_hparam(f, "llama.rope.dimension_count", 2, (uint64_t)c.head_dim);
    if (!v) return v.error();
    if ((int)*v != c.head_dim) return runtime_error(path + ": partial RoPE (rope.dimension_count != head dim) is unsupported");
    c.rope_dim = (int)*v;
  }
  if (f.find("llama.rope.freq_base")) {
    auto v = f.get_float("llama.rope.freq_base");
    if (!v) return v.error();
    if (!(*v > 1.0 && *v < 1e12)) return runtime_error(path + ": llama.rope.freq_base is out of range");
    c.rope_base = (float)*v;
  }
  if (f.find("llama.attention.layer_norm_rms_epsilon")) {
    auto v = f.get_float("llama.attention.layer_norm_rms_epsilon");
    if (!v) return v.error();
    if (!(*v > 0 && *v < 1)) return runtime_error(path + ": layer_norm_rms_epsilon is out of range");
    c.rms_eps = (float)*v;
  }
  if (f.find("llama.rope.scaling.type") || f.tensor("rope_freqs.weight"))
    return runtime_error(path + ": scaled RoPE is unsupported");

  const GgufTensorInfo* emb = f.tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2) return runtime_error(path + ": missing or malformed tensor 'token_embd.weight'");
  c.n_vocab = (int)emb->ne[1];
  if (emb->ne[0] != c.n_embd) return runtime_error(path + ": token_embd.weight width does not match embedding_length");

  const int64_t d = c.n_embd, hd = c.head_dim, q_dim = (int64_t)c.n_head * hd, kv_dim = (int64_t)c.n_head_kv * hd;
  auto plan = plan_w8a8(wr, c.n_layer);
  if (!plan) return plan.error();
  for (const auto* v : {&wr.smooth_attn, &wr.smooth_ffn})
    if (!v->empty() && v->size() != (size_t)c.n_layer * d) return usage_error("smoothing factors do not match the model");
  m->weights_desc_ = plan->desc;
  if (plan->on && isa != Isa::kAvx512) {
    static bool said = false;
    if (!said)
      std::fprintf(stderr, "ouro: W8A8 runs on the %s kernel (no AVX-512 VNNI in use: slower than on a VNNI CPU)\n",
                   isa_name(isa));
    said = true;
  }
  const float w8_fault = fault::w8a8_scale_factor();
  // w8: requantize to W8A8 (kW8) instead of keeping the GGUF's blocks.
  // smooth: SmoothQuant column factors for a W8A8 matrix (nullptr: none).
  auto pack = [&](const std::string& name, int64_t cols, int64_t rows, PackedMatrix* out, bool w8 = false,
                  const float* smooth = nullptr) -> Status {
    auto t = get_tensor(f, name, {cols, rows});
    if (!t) return t.error();
    if (w8) {
      if (!type_traits((*t)->type)) return runtime_error(path + ": tensor '" + name + "' has an unsupported type");
      *out = pack_matrix_w8a8((*t)->type, (*t)->data, cols, rows, w8_fault, smooth);
      return Ok{};
    }
    *out = pack_matrix((*t)->type, (*t)->data, cols, rows);
    if (out->kind != PackedKind::kRows) f.release_pages((*t)->data, (*t)->nbytes);
    return Ok{};
  };
  auto norm = [&](const std::string& name, const float** out) -> Status {
    auto t = get_tensor(f, name, {d}, true);
    if (!t) return t.error();
    if ((uintptr_t)(*t)->data % alignof(float) != 0) return runtime_error(path + ": tensor '" + name + "' is misaligned");
    *out = reinterpret_cast<const float*>((*t)->data);
    return Ok{};
  };
  LlamaWeights& w = m->w_;
  const bool head_w8 = plan->on && plan->ops[kOpHead];
  w.tied_output = f.tensor("output.weight") == nullptr;
  // A W8A8 head made from tied embeddings is its own matrix (the embedding lookup stays native).
  if (head_w8 && w.tied_output)
    if (Status s = pack("token_embd.weight", d, c.n_vocab, &w.output, true); !s) return s.error();
  if (Status s = pack("token_embd.weight", d, c.n_vocab, &w.token_embd); !s) return s.error();
  if (head_w8) w.tied_output = false;
  else if (!w.tied_output)
    if (Status s = pack("output.weight", d, c.n_vocab, &w.output); !s)
      return runtime_error(s.error().message + " (the vocabulary size " + std::to_string(c.n_vocab) +
                           " comes from token_embd.weight)");
  if (Status s = norm("output_norm.weight", &w.output_norm); !s) return s.error();
  w.layers.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    auto w8 = [&](W8Op op) { return plan->on && plan->ops[op] && plan->layers[l]; };
    // SmoothQuant factors of this layer's qkv / gate_up inputs, when smoothing a W8A8 op.
    const float* sa = w8(kOpQkv) && !wr.smooth_attn.empty() ? &wr.smooth_attn[(size_t)l * d] : nullptr;
    const float* sf = w8(kOpGateUp) && !wr.smooth_ffn.empty() ? &wr.smooth_ffn[(size_t)l * d] : nullptr;
    Status steps[] = {
        norm(p + "attn_norm.weight", &L.attn_norm),
        norm(p + "ffn_norm.weight", &L.ffn_norm),
        pack(p + "attn_q.weight", d, q_dim, &L.wq, w8(kOpQkv), sa),
        pack(p + "attn_k.weight", d, kv_dim, &L.wk, w8(kOpQkv), sa),
        pack(p + "attn_v.weight", d, kv_dim, &L.wv, w8(kOpQkv), sa),
        pack(p + "attn_output.weight", q_dim, d, &L.wo, w8(kOpO)),
        pack(p + "ffn_gate.weight", d, c.n_ff, &L.w_gate, w8(kOpGateUp), sf),
        pack(p + "ffn_up.weight", d, c.n_ff, &L.w_up, w8(kOpGateUp), sf),
        pack(p + "ffn_down.weight", c.n_ff, d, &L.w_down, w8(kOpDown)),
    };
    for (auto& s : steps)
      if (!s) return s.error();
    // The norm weights take 1/s, so norm(x) * s^-1 feeds W * s: the same product, flatter activations.
    auto divide = [&](const float* src, const float* sm, std::vector<float>& own) {
      own.assign(src, src + d);
      for (int64_t j = 0; j < d; ++j) own[j] /= sm[j];
      return own.data();
    };
    if (sa) L.attn_norm = divide(L.attn_norm, sa, L.smoothed_attn_norm);
    if (sf) L.ffn_norm = divide(L.ffn_norm, sf, L.smoothed_ffn_norm);
  }
  w.rope_inv_freq.resize(hd / 2);
  for (int i = 0; i < hd / 2; ++i) w.rope_inv_freq[i] = (float)std::pow((double)c.rope_base, -2.0 * i / (double)hd);
  return m;
}

size_t LlamaModel::weight_bytes_per_token() const {
  size_t n = output_matrix().bytes();
  for (const auto& L : w_.layers)
    n += L.wq.bytes() + L.wk.bytes() + L.wv.bytes() + L.wo.bytes() + L.w_gate.bytes() + L.w_up.bytes() + L.w_down.bytes();
  return n;
}

void LlamaModel::embed(int token, float* out) const {
  const PackedMatrix& e = w_.token_embd;
  const int64_t n = cfg_.n_embd;
  if (e.kind == PackedKind::kRows) {
    type_traits(e.src_type)->dequant_row(e.src + token * e.src_row_bytes, out, n);
    return;
  }
  for (int64_t k = 0; k < n; ++k) out[k] = e.value(token, k);
}

KvSpec KvStore::full_spec(const LlamaConfig& c, const KvSpec& spec) {
  if (!spec.k.empty()) return spec;
  KvSpec f;
  f.k.assign(c.n_layer, KvType::kF32);
  f.v.assign(c.n_layer, KvType::kF32);
  return f;
}

KvStore::KvStore(const LlamaConfig& c, const KvSpec& spec, int n_blocks, int block_size)
    : n_head_kv_(c.n_head_kv), head_dim_(c.head_dim), n_blocks_(n_blocks), block_size_(block_size),
      spec_(full_spec(c, spec)) {
  if ((int)spec_.k.size() != c.n_layer || (int)spec_.v.size() != c.n_layer) throw std::invalid_argument("KV spec layers");
  size_t off = 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (KvType t : {spec_.k[l], spec_.v[l]}) {
      Region g;
      g.type = t;
      g.row_bytes = kv_row_bytes(t, n_head_kv_, head_dim_);
      g.block_bytes = g.row_bytes * block_size_;
      g.offset = off;
      off += (g.block_bytes * n_blocks_ + 63) / 64 * 64;
      reg_.push_back(g);
    }
  buf_ = LazyBuffer(off);
  if (!buf_.ok()) throw std::bad_alloc();
}

KvSide KvStore::side(int layer, bool v, int head) const {
  const Region& g = reg_[2 * layer + v];
  const int64_t data = (int64_t)n_head_kv_ * head_dim_ * kv_elem_bytes(g.type);
  return KvSide{buf_.bytes() + g.offset, g.type, (int64_t)g.row_bytes, (int64_t)g.block_bytes,
                (int64_t)head * head_dim_ * (int64_t)kv_elem_bytes(g.type), data + 4 * head};
}

Workspace::Workspace(const LlamaConfig& c, int max_tokens) : max_tokens_(std::max(1, max_tokens)) {
  const size_t B = max_tokens_;
  x_.resize(B * c.n_embd);
  xn_.resize(B * c.n_embd);
  q_.resize(B * c.n_head * c.head_dim);
  k_.resize(B * c.n_head_kv * c.head_dim);
  v_.resize(B * c.n_head_kv * c.head_dim);
  att_.resize(B * c.n_head * c.head_dim);
  tmp_.resize(B * c.n_embd);
  g_.resize(B * c.n_ff);
  u_.resize(B * c.n_ff);
  h_.resize(B * c.n_ff);
  tok_.resize(B);
  pos_.resize(B);
  seq_.resize(B);
  out_rows_.resize(B);
  cum_keys_.resize(B + 1);
}

LlamaState::LlamaState(const LlamaModel& m, int n_ctx, int max_batch, const KvSpec& kv)
    : m_(m), n_ctx_(n_ctx), max_batch_(std::max(1, max_batch)), kv_(m.config(), kv, 1, n_ctx),
      ws_(m.config(), max_batch_) {}

size_t LlamaState::kv_bytes_per_token() const {
  return kv_.spec().bytes_per_token(m_.config().n_head_kv, m_.config().head_dim);
}

Status LlamaState::forward(const int* tokens, int n, float* logits, bool all_logits, ThreadPool& pool,
                           const MatmulKernels& k) {
  if (n <= 0) return usage_error("no tokens to process");
  if (n_past_ + n > n_ctx_)
    return runtime_error("context overflow: " + std::to_string(n_past_) + " cached + " + std::to_string(n) +
                         " new tokens exceed the context of " + std::to_string(n_ctx_));
  const int nv = m_.config().n_vocab;
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= nv)
      return usage_error("token id " + std::to_string(tokens[i]) + " is out of range [0, " + std::to_string(nv) + ")");
  const int block0 = 0;
  for (int done = 0; done < n; done += max_batch_) {
    const int T = std::min(max_batch_, n - done);
    const bool last = done + T == n;
    SeqBatch b;
    b.tokens = tokens + done;
    b.n = T;
    b.n_past = n_past_;
    b.blocks = &block0;
    b.all_logits = all_logits;
    b.want_logits = all_logits || (last && logits);
    if (Status s = llama_forward(m_, kv_, ws_, &b, 1, all_logits ? logits + (size_t)done * nv : logits, pool, k); !s)
      return s;
    n_past_ += T;
  }
  return Ok{};
}

// The arithmetic a matmul's FLOPs run in (traces compare them with that peak).
static const char* precision_of(const PackedMatrix& W) { return W.kind == PackedKind::kRows ? nullptr : "int8"; }

// Runs fn(t0, t1) over token ranges: inline for a few tokens (decode), else across the pool.
template <typename Fn>
static void for_tokens(ThreadPool& pool, int T, const char* region, Fn&& fn) {
  if (T < 4 || pool.size() == 1) { fn(0, T); return; }
  pool.run([&](int t, int nt) {
    int64_t b, e;
    ThreadPool::split(T, t, nt, 1, &b, &e);
    if (b < e) fn((int)b, (int)e);
  }, region);
}

Status llama_forward(const LlamaModel& m, KvStore& kv, Workspace& ws, const SeqBatch* seqs, int n_seqs, float* logits,
                     ThreadPool& pool, const MatmulKernels& k) {
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
  if (T > ws.max_tokens_)
    return usage_error("batch of " + std::to_string(T) + " tokens exceeds the workspace of " +
                       std::to_string(ws.max_tokens_));
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

  // x: [T, d] residual stream
  {
    trace::Span sp("embed", "op", -1, T, 8.0 * T * d);
    fault::at_op("embed");
    for (int t = 0; t < T; ++t) m.embed(ws.tok_[t], &x_[(size_t)t * d]);
  }
  const double act_bytes = 4.0 * T * d;  // one [T, d] float activation

  // Norm then int8 quantization of [T, cols] activations, as one traced op.
  auto norm_and_quantize = [&](const char* name, int layer, const float* weight, const float* src, int cols,
                               const PackedMatrix& consumer) {
    trace::Span sp(name, "op", layer, T, 2 * act_bytes + 4.0 * cols, 6.0 * T * cols);
    fault::at_op(name);
    qa_.resize(T, cols, wants_per_token(consumer));
    qa_.x = xn_.data();
    for_tokens(pool, T, name, [&](int t0, int t1) {
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
    for_tokens(pool, T, region, [&](int t0, int t1) { quantize_acts(src, t0, t1, qa_); });
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
    for_tokens(pool, T, "rope_kv", [&](int t0, int t1) {
      for (int t = t0; t < t1; ++t) {
        rope_inplace(&q_[(size_t)t * q_dim], nh, hd, pos[t], w.rope_inv_freq.data());
        rope_inplace(&k_[(size_t)t * kv_dim], nkv, hd, pos[t], w.rope_inv_freq.data());
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
      for_tokens(pool, T, "swiglu", [&](int t0, int t1) {
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
