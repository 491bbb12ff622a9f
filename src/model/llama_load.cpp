#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <fstream>
#include <sstream>

#include "core/fault.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "tokenizer/bpe.h"

namespace ouro {

namespace {

enum W8Op { kOpQkv, kOpO, kOpGateUp, kOpDown, kOpHead, kNumW8Ops };
const char* const kW8OpNames[kNumW8Ops] = {"qkv", "o", "gate_up", "down", "head"};

struct W8Plan {
  bool on = false;
  bool ops[kNumW8Ops] = {};
  std::vector<bool> layers;
  std::string desc = "native";
};

Expected<W8Plan> plan_w8a8(const WeightRequest& wr, const SmoothFactors& smooth, int n_layer) {
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
  if (!smooth.attn.empty()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "+smooth%.2g", smooth.alpha);
    p.desc += buf;
  }
  return p;
}

}  // namespace

Expected<std::unique_ptr<LlamaModel>> LlamaModel::load_with(std::unique_ptr<GgufFile> file, const WeightRequest& wr,
                                                            const SmoothFactors& smooth, Isa isa) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->file_ = std::move(file);
  const GgufFile& f = *m->file_;
  const std::string& path = f.path();

  LlamaConfig& c = m->cfg_;
  struct { const char* key; int* dst; uint64_t lo, hi; } hp[] = {
      {"llama.block_count", &c.n_layer, 1, 1024},
      {"llama.embedding_length", &c.n_embd, 1, 65536},
      {"llama.attention.head_count", &c.n_head, 1, 1024},
      {"llama.feed_forward_length", &c.n_ff, 1, 1 << 20},
      {"llama.context_length", &c.n_ctx_train, 1, 1 << 24},
  };
  for (auto& h : hp) {
    auto v = gguf_uint_in(f, h.key, h.lo, h.hi);
    if (!v) return v.error();
    *h.dst = (int)*v;
  }
  c.n_head_kv = c.n_head;
  if (f.find("llama.attention.head_count_kv")) {
    auto v = gguf_uint_in(f, "llama.attention.head_count_kv", 1, (uint64_t)c.n_head);
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
    auto v = gguf_uint_in(f, "llama.rope.dimension_count", 2, (uint64_t)c.head_dim);
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
  auto plan = plan_w8a8(wr, smooth, c.n_layer);
  if (!plan) return plan.error();
  for (const auto* v : {&smooth.attn, &smooth.ffn})
    if (!v->empty() && v->size() != (size_t)c.n_layer * d) return usage_error("smoothing factors do not match the model");
  m->weights_desc_ = plan->desc;
  if (plan->on) note_w8a8_kernel(isa);
  const float w8_fault = fault::w8a8_scale_factor();
  // w8: requantize to W8A8 (kW8) instead of keeping the GGUF's blocks.
  // smooth: SmoothQuant column factors for a W8A8 matrix (nullptr: none).
  auto pack = [&](const std::string& name, int64_t cols, int64_t rows, PackedMatrix* out, bool w8 = false,
                  const float* smooth = nullptr) -> Status {
    auto t = gguf_tensor(f, name, {cols, rows});
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
    auto t = gguf_tensor(f, name, {d}, true);
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
    const float* sa = w8(kOpQkv) && !smooth.attn.empty() ? &smooth.attn[(size_t)l * d] : nullptr;
    const float* sf = w8(kOpGateUp) && !smooth.ffn.empty() ? &smooth.ffn[(size_t)l * d] : nullptr;
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
  m->info_ = ModelInfo{"llama", c.n_layer, c.n_embd, c.n_vocab, c.n_ctx_train};
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


LlamaWorkspace::LlamaWorkspace(const LlamaConfig& c, int max_tokens) : Workspace(max_tokens) {
  const size_t B = this->max_tokens();
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
  rope_.resize(B * c.head_dim);
  tok_.resize(B);
  pos_.resize(B);
  seq_.resize(B);
  out_rows_.resize(B);
  cum_keys_.resize(B + 1);
}


namespace {

// SmoothQuant calibration (docs/quantization.md): runs the native model over up to 2048 tokens of
// the calibration text, records each qkv / gate_up input channel's max |x| (a_j), takes each
// channel's max |W| over the op's matrices (w_j), and returns s_j = a_j^alpha / w_j^(1 - alpha).
Expected<SmoothFactors> calibrate_smoothing(const std::string& path, const WeightRequest& wr, Isa isa,
                                            ThreadPool& pool) {
  auto fr = GgufFile::open(path);
  if (!fr) return fr.error();
  auto m = LlamaModel::load_with(std::move(*fr), WeightRequest{}, SmoothFactors{}, isa);
  if (!m) return m.error();
  auto tok = Tokenizer::from_gguf((*m)->gguf());
  if (!tok) return tok.error();
  std::ifstream in(wr.smooth_calib, std::ios::binary);
  if (!in) return usage_error("flag --w8a8-calib: cannot read '" + wr.smooth_calib + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int> ids = (*tok)->encode(ss.str(), false, false);
  if (ids.size() < 16) return usage_error("flag --w8a8-calib: '" + wr.smooth_calib + "' holds fewer than 16 tokens");
  if (ids.size() > 2048) ids.resize(2048);
  const LlamaConfig& c = (*m)->config();
  const int chunk = 512, d = c.n_embd;
  PagedKvCache kv((*m)->kv_layout(), KvSpec{}, 1, chunk);
  RecurrentStateStore state(0, 1);
  LlamaWorkspace ws(c, chunk);
  ActStats st;
  st.attn.assign((size_t)c.n_layer * d, 0.0f);
  st.ffn.assign((size_t)c.n_layer * d, 0.0f);
  ws.set_act_stats(&st);
  const int block0 = 0;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    SeqBatch b;
    b.tokens = ids.data() + i;
    b.n = (int)std::min<size_t>(chunk, ids.size() - i);
    b.blocks = &block0;
    if (Status s = (*m)->forward({kv, state}, ws, &b, 1, nullptr, pool, matmul_kernels(isa)); !s) return s.error();
  }
  const float alpha = wr.smooth_alpha;
  auto factors = [&](const std::vector<float>& act, int l, std::initializer_list<const PackedMatrix*> ws_) {
    std::vector<float> wmax(d, 0.0f);
    for (const PackedMatrix* W : ws_)
      for (int64_t r = 0; r < W->rows; ++r)
        for (int j = 0; j < d; ++j) wmax[j] = std::max(wmax[j], std::fabs(W->value(r, j)));
    std::vector<float> s(d);
    for (int j = 0; j < d; ++j) {
      const float a = act[(size_t)l * d + j], w = wmax[j];
      s[j] = a > 0 && w > 0 ? std::clamp(std::pow(a, alpha) / std::pow(w, 1.0f - alpha), 1e-3f, 1e3f) : 1.0f;
    }
    return s;
  };
  SmoothFactors out;
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = (*m)->weights().layers[l];
    auto a = factors(st.attn, l, {&L.wq, &L.wk, &L.wv});
    auto f = factors(st.ffn, l, {&L.w_gate, &L.w_up});
    out.attn.insert(out.attn.end(), a.begin(), a.end());
    out.ffn.insert(out.ffn.end(), f.begin(), f.end());
  }
  out.alpha = alpha;
  return out;
}

}  // namespace

Expected<std::unique_ptr<Model>> LlamaModel::load(std::unique_ptr<GgufFile> file, const WeightRequest& wr, Isa isa,
                                                  ThreadPool& pool) {
  SmoothFactors smooth;
  if (wr.smooth_alpha > 0) {
    auto s = calibrate_smoothing(file->path(), wr, isa, pool);
    if (!s) return s.error();
    smooth = std::move(*s);
  }
  auto m = load_with(std::move(file), wr, smooth, isa);
  if (!m) return m.error();
  return std::unique_ptr<Model>(std::move(*m));
}

}  // namespace ouro
