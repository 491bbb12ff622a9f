// Loading a `kimi-linear` file (kimi_linear.h): every hyperparameter and tensor checked (shape in
// ne order, type), every error naming the file and the key or tensor. Matrices are packed as the
// Llama's are; a 3-D expert or per-head tensor becomes one matrix per slice.
#include "model/kimi_linear.h"

#include <algorithm>
#include <cstring>

#include "core/fault.h"

namespace ouro {

namespace {

const char* kPrefix = "kimi-linear.";

struct Loader {
  const GgufFile& f;
  bool w8 = false;          // --weights w8a8: matrices requantized to int8 per output row (kW8)
  float w8_fault = 1.0f;    // the lab's badscale fault (1: none)
  PackedMatrix pack_slice(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows) const {
    return w8 ? pack_matrix_w8a8(type, data, cols, rows, w8_fault) : pack_matrix(type, data, cols, rows);
  }
  std::string key(const char* k) const { return std::string(kPrefix) + k; }
  Expected<int> uint_in(const char* k, uint64_t lo, uint64_t hi) const {
    auto v = gguf_uint_in(f, key(k), lo, hi);
    if (!v) return v.error();
    return (int)*v;
  }
  Expected<int> uint_or(const char* k, int dflt, uint64_t lo, uint64_t hi) const {
    if (!f.find(key(k))) return dflt;
    return uint_in(k, lo, hi);
  }
  Status pack(const std::string& name, int64_t cols, int64_t rows, PackedMatrix* out) const {
    auto t = gguf_tensor(f, name, {cols, rows});
    if (!t) return t.error();
    if (!type_traits((*t)->type)) return unsupported(**t);
    *out = pack_slice((*t)->type, (*t)->data, cols, rows);
    if (out->kind != PackedKind::kRows) f.release_pages((*t)->data, (*t)->nbytes);  // the packed copy is what runs
    return Ok{};
  }
  // The router keeps the file's type when that is a float one (llama.cpp's files keep it F32: it
  // picks the experts), read with the float activations; a quantized router joins W8A8, since it
  // shares its quantized input with the shared expert's gate and up.
  Status pack_router(const std::string& name, int64_t cols, int64_t rows, PackedMatrix* out) const {
    auto t = gguf_tensor(f, name, {cols, rows});
    if (!t) return t.error();
    if (!type_traits((*t)->type)) return unsupported(**t);
    *out = pack_matrix((*t)->type, (*t)->data, cols, rows);
    if (w8 && out->kind != PackedKind::kRows) *out = pack_slice((*t)->type, (*t)->data, cols, rows);
    return Ok{};
  }
  // A 3-D tensor of ne [cols, rows, n]: one matrix per slice.
  Status pack3(const std::string& name, int64_t cols, int64_t rows, int64_t n, std::vector<PackedMatrix>* out) const {
    auto t = gguf_tensor(f, name, {cols, rows, n});
    if (!t) return t.error();
    const TypeTraits* tt = type_traits((*t)->type);
    if (!tt) return unsupported(**t);
    const size_t slice = row_bytes((*t)->type, cols) * rows;
    out->clear();
    for (int64_t i = 0; i < n; ++i) out->push_back(pack_slice((*t)->type, (*t)->data + i * slice, cols, rows));
    if (n > 0 && (*out)[0].kind != PackedKind::kRows) f.release_pages((*t)->data, (*t)->nbytes);
    return Ok{};
  }
  // An F32 vector (or a [n, 1] / [1, n] one where llama.cpp's converter writes that shape).
  Status vec(const std::string& name, std::vector<int64_t> ne, const float** out) const {
    auto t = gguf_tensor(f, name, ne, true);
    if (!t && ne.size() == 1) {  // llama.cpp's converter may write a vector as [n, 1]
      if (const GgufTensorInfo* alt = f.tensor(name); alt && alt->ne == std::vector<int64_t>{ne[0], 1})
        t = gguf_tensor(f, name, alt->ne, true);
    }
    if (!t) return t.error();
    if ((uintptr_t)(*t)->data % alignof(float) != 0) return runtime_error(f.path() + ": tensor '" + name + "' is misaligned");
    *out = reinterpret_cast<const float*>((*t)->data);
    return Ok{};
  }
  Status unsupported(const GgufTensorInfo& t) const {
    return runtime_error(f.path() + ": tensor '" + t.name + "' has type " + ggml_type_name_any((uint32_t)t.type) +
                         ", which Ouro cannot compute");
  }
};

// The decompressing form's matrices (kimi_linear.cpp, Pass::mla_given), f32 from the packed heads:
// dk[h] = W_kb^h as [nope][kv_lora] (stored as nope -> kv_lora, so transposed), which times a block
// of latent columns gives the head's keys as columns; dv[h] = W_vb^h transposed to [kv_lora][v_mla],
// which a block of latent rows times gives the head's values as rows.
void decompression_matrices(const KimiConfig& c, MlaWeights& A) {
  const int L = c.kv_lora, N = c.nope(), V = c.v_mla;
  A.dk.assign((size_t)c.n_head * L * N, 0.0f);
  A.dv.assign((size_t)c.n_head * L * V, 0.0f);
  std::vector<float> row(std::max(N, L));
  // Row r of W as floats: the packed values, or the file's row for a kind kept as it is (kRows).
  auto unpack = [&](const PackedMatrix& W, int64_t r) {
    if (W.kind == PackedKind::kRows)
      type_traits(W.src_type)->dequant_row(W.src + r * W.src_row_bytes, row.data(), W.cols);
    else
      for (int64_t k = 0; k < W.cols; ++k) row[k] = W.value(r, k);
  };
  for (int h = 0; h < c.n_head; ++h) {
    float* dk = &A.dk[(size_t)h * L * N];
    float* dv = &A.dv[(size_t)h * L * V];
    for (int l = 0; l < L; ++l) {
      unpack(A.k_b[h], l);
      for (int n = 0; n < N; ++n) dk[(size_t)n * L + l] = row[n];
    }
    for (int v = 0; v < V; ++v) {
      unpack(A.v_b[h], v);
      for (int l = 0; l < L; ++l) dv[(size_t)l * V + v] = row[l];
    }
  }
}

Status read_config(const Loader& ld, KimiConfig& c) {
  const GgufFile& f = ld.f;
  const std::string& path = f.path();
  struct { const char* key; int* dst; uint64_t lo, hi; } req[] = {
      {"block_count", &c.n_layer, 1, 4096},
      {"embedding_length", &c.n_embd, 1, 1 << 16},
      {"attention.head_count", &c.n_head, 1, 1024},
      {"context_length", &c.n_ctx_train, 1, 1 << 24},
  };
  for (auto& h : req) {
    auto v = ld.uint_in(h.key, h.lo, h.hi);
    if (!v) return v.error();
    *h.dst = *v;
  }
  auto eps = f.get_float(ld.key("attention.layer_norm_rms_epsilon"));
  if (!eps) return eps.error();
  if (!(*eps > 0 && *eps < 1)) return runtime_error(path + ": metadata '" + ld.key("attention.layer_norm_rms_epsilon") + "' must be in (0, 1)");
  c.rms_eps = (float)*eps;

  // Which layers are MLA: head_count_kv, one integer per layer (0: KDA).
  const std::string hkv = ld.key("attention.head_count_kv");
  const GgufValue* v = f.find(hkv);
  if (!v) return runtime_error(path + ": missing metadata key '" + hkv + "'");
  if (v->type != GgufType::kArray || !(v->arr.empty() || v->arr[0].is_integer()))
    return runtime_error(path + ": metadata '" + hkv + "' must be an array of integers, one per layer (0 for a KDA layer)");
  if ((int)v->arr.size() != c.n_layer)
    return runtime_error(path + ": metadata '" + hkv + "' has " + std::to_string(v->arr.size()) + " entries but " +
                         ld.key("block_count") + " is " + std::to_string(c.n_layer));
  for (const GgufValue& e : v->arr) {
    c.mixer_index.push_back(e.u != 0 ? c.n_mla : c.n_kda);
    c.is_mla.push_back(e.u != 0);
    (e.u != 0 ? c.n_mla : c.n_kda)++;
  }
  if (c.n_kda > 0) {
    auto hd = ld.uint_in("kda.head_dim", 1, 1024);
    auto dc = ld.uint_in("ssm.conv_kernel", 1, 64);
    for (auto* x : {&hd, &dc})
      if (!*x) return x->error();
    c.head_dim = *hd;
    c.d_conv = *dc;
  }
  if (c.n_mla > 0) {
    auto lora = ld.uint_in("attention.kv_lora_rank", 1, 1 << 14);
    auto rope = ld.uint_or("rope.dimension_count", 0, 0, 1024);
    auto kl = ld.uint_in("attention.key_length_mla", 1, 4096);
    auto vl = ld.uint_in("attention.value_length_mla", 1, 4096);
    for (auto* x : {&lora, &rope, &kl, &vl})
      if (!*x) return x->error();
    c.kv_lora = *lora, c.rope = *rope, c.k_mla = *kl, c.v_mla = *vl;
    if (c.rope >= c.k_mla)
      return runtime_error(path + ": metadata '" + ld.key("rope.dimension_count") + "' (" + std::to_string(c.rope) +
                           ") must be below '" + ld.key("attention.key_length_mla") + "' (" + std::to_string(c.k_mla) + ")");
  }
  auto lead = ld.uint_or("leading_dense_block_count", 0, 0, (uint64_t)c.n_layer);
  if (!lead) return lead.error();
  c.n_dense_lead = *lead;
  if (c.n_dense_lead > 0) {
    auto ff = ld.uint_in("feed_forward_length", 1, 1 << 20);
    if (!ff) return ff.error();
    c.n_ff = *ff;
  }
  if (c.n_dense_lead < c.n_layer) {
    const std::string ec = ld.key("expert_count");
    auto ne = ld.uint_or("expert_count", 0, 0, 4096);
    if (!ne) return ne.error();
    if (*ne == 0)
      return runtime_error(path + ": metadata '" + ec + "' is " + (f.find(ec) ? "0" : "missing") + " but layers " +
                           std::to_string(c.n_dense_lead) + ".." + std::to_string(c.n_layer - 1) +
                           " are mixture-of-experts layers ('" + ld.key("leading_dense_block_count") + "' = " +
                           std::to_string(c.n_dense_lead) + ")");
    c.n_expert = *ne;
    auto used = ld.uint_in("expert_used_count", 1, (uint64_t)c.n_expert);
    auto ffe = ld.uint_in("expert_feed_forward_length", 1, 1 << 20);
    auto sh = ld.uint_or("expert_shared_count", 0, 0, 64);
    for (auto* x : {&used, &ffe, &sh})
      if (!*x) return x->error();
    c.n_used = *used, c.n_ff_exp = *ffe, c.n_ff_shared = *sh * *ffe;
    if (f.find(ld.key("expert_weights_scale"))) {
      auto s = f.get_float(ld.key("expert_weights_scale"));
      if (!s) return s.error();
      if (!(*s > 0 && *s < 1e6)) return runtime_error(path + ": metadata '" + ld.key("expert_weights_scale") + "' must be positive");
      c.weights_scale = (float)*s;
    }
    if (f.find(ld.key("expert_weights_norm"))) {
      auto b = f.get_bool(ld.key("expert_weights_norm"));
      if (!b) return b.error();
      c.weights_norm = *b;
    }
    // llama.cpp's gating function ids: 1 softmax, 2 sigmoid. kimi-linear's router is a sigmoid.
    auto gf = ld.uint_or("expert_gating_func", 2, 0, 1 << 16);
    if (!gf) return gf.error();
    if (*gf != 2)
      return runtime_error(path + ": metadata '" + ld.key("expert_gating_func") + "' = " + std::to_string(*gf) +
                           " is unsupported (kimi-linear's router is a sigmoid, 2)");
  }
  return Ok{};
}

}  // namespace

Expected<std::unique_ptr<Model>> KimiLinearModel::load(std::unique_ptr<GgufFile> file, const WeightRequest& wr,
                                                       Isa isa, ThreadPool& /*pool*/) {
  std::unique_ptr<KimiLinearModel> m(new KimiLinearModel());
  m->kda_ = &ouro::kda_kernels(isa);
  m->isa_ = isa;
  m->file_ = std::move(file);
  const GgufFile& f = *m->file_;
  const std::string& path = f.path();
  if (wr.mode != "native" && wr.mode != "w8a8") return usage_error("flag --weights: '" + wr.mode + "' is not one of native, w8a8");
  if (!wr.ops.empty() || !wr.layers.empty() || wr.smooth_alpha > 0)
    return usage_error("--w8a8-ops, --w8a8-layers and --w8a8-smooth choose among llama's ops; on kimi-linear, --weights w8a8 "
                       "requantizes every matrix but the router (docs/quantization.md)");
  Loader ld{f};
  if (wr.mode == "w8a8") {
    ld.w8 = true;
    ld.w8_fault = fault::w8a8_scale_factor();
    m->weights_desc_ = "w8a8:all-but-router@all";
    note_w8a8_kernel(isa);
  }
  KimiConfig& c = m->cfg_;
  if (Status s = read_config(ld, c); !s) return s.error();
  const int64_t d = c.n_embd, inner = c.d_inner(), hd = c.head_dim;

  const GgufTensorInfo* emb = f.tensor("token_embd.weight");
  if (!emb) return runtime_error(path + ": missing tensor 'token_embd.weight'");
  if (emb->ne.size() != 2 || emb->ne[0] != d || emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
    return runtime_error(path + ": tensor 'token_embd.weight' must have shape [" + std::to_string(d) + ", n_vocab]");
  if (!type_traits(emb->type)) return ld.unsupported(*emb).error();
  c.n_vocab = (int)emb->ne[1];
  m->embd_info_ = emb;
  m->tied_ = f.tensor("output.weight") == nullptr;
  if (m->tied_) {
    if (Status s = ld.pack("token_embd.weight", d, c.n_vocab, &m->embd_); !s) return s.error();
  } else if (Status s = ld.pack("output.weight", d, c.n_vocab, &m->output_); !s) {
    return runtime_error(s.error().message + " (the vocabulary size " + std::to_string(c.n_vocab) +
                         " comes from token_embd.weight)");
  }
  if (Status s = ld.vec("output_norm.weight", {d}, &m->output_norm_); !s) return s.error();

  m->layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    KimiLayer& L = m->layers_[l];
    std::vector<Status> steps;
    steps.push_back(ld.vec(p + "attn_norm.weight", {d}, &L.attn_norm));
    steps.push_back(ld.vec(p + "ffn_norm.weight", {d}, &L.ffn_norm));
    if (!c.is_mla[l]) {
      KdaWeights& K = L.kda;
      steps.push_back(ld.pack(p + "attn_q.weight", d, inner, &K.wq));
      steps.push_back(ld.pack(p + "attn_k.weight", d, inner, &K.wk));
      steps.push_back(ld.pack(p + "attn_v.weight", d, inner, &K.wv));
      const char* conv_names[3] = {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"};
      for (int j = 0; j < 3; ++j) steps.push_back(ld.vec(p + conv_names[j], {c.d_conv, 1, inner}, &K.conv[j]));
      steps.push_back(ld.pack(p + "ssm_f_a.weight", d, hd, &K.f_a));
      steps.push_back(ld.pack(p + "ssm_f_b.weight", hd, inner, &K.f_b));
      steps.push_back(ld.vec(p + "ssm_dt.bias", {inner}, &K.dt_bias));
      steps.push_back(ld.vec(p + "ssm_a", {1, c.n_head}, &K.a));
      steps.push_back(ld.pack(p + "ssm_beta.weight", d, c.n_head, &K.beta));
      steps.push_back(ld.pack(p + "ssm_g_a.weight", d, hd, &K.g_a));
      steps.push_back(ld.pack(p + "ssm_g_b.weight", hd, inner, &K.g_b));
      steps.push_back(ld.vec(p + "ssm_norm.weight", {hd}, &K.out_norm));
      steps.push_back(ld.pack(p + "attn_output.weight", inner, d, &K.wo));
    } else {
      MlaWeights& A = L.mla;
      steps.push_back(ld.pack(p + "attn_q.weight", d, (int64_t)c.n_head * c.k_mla, &A.wq));
      steps.push_back(ld.pack(p + "attn_kv_a_mqa.weight", d, c.kv_lora + c.rope, &A.wkv_a));
      steps.push_back(ld.vec(p + "attn_kv_a_norm.weight", {c.kv_lora}, &A.kv_norm));
      steps.push_back(ld.pack3(p + "attn_k_b.weight", c.nope(), c.kv_lora, c.n_head, &A.k_b));
      steps.push_back(ld.pack3(p + "attn_v_b.weight", c.kv_lora, c.v_mla, c.n_head, &A.v_b));
      steps.push_back(ld.pack(p + "attn_output.weight", (int64_t)c.n_head * c.v_mla, d, &A.wo));
    }
    FfnWeights& F = L.ffn;
    if (!c.is_moe(l)) {
      steps.push_back(ld.pack(p + "ffn_gate.weight", d, c.n_ff, &F.gate));
      steps.push_back(ld.pack(p + "ffn_up.weight", d, c.n_ff, &F.up));
      steps.push_back(ld.pack(p + "ffn_down.weight", c.n_ff, d, &F.down));
    } else {
      steps.push_back(ld.pack_router(p + "ffn_gate_inp.weight", d, c.n_expert, &F.router));
      steps.push_back(ld.vec(p + "exp_probs_b.bias", {c.n_expert}, &F.bias));
      steps.push_back(ld.pack3(p + "ffn_gate_exps.weight", d, c.n_ff_exp, c.n_expert, &F.e_gate));
      steps.push_back(ld.pack3(p + "ffn_up_exps.weight", d, c.n_ff_exp, c.n_expert, &F.e_up));
      steps.push_back(ld.pack3(p + "ffn_down_exps.weight", c.n_ff_exp, d, c.n_expert, &F.e_down));
      if (c.n_ff_shared > 0) {
        steps.push_back(ld.pack(p + "ffn_gate_shexp.weight", d, c.n_ff_shared, &F.gate));
        steps.push_back(ld.pack(p + "ffn_up_shexp.weight", d, c.n_ff_shared, &F.up));
        steps.push_back(ld.pack(p + "ffn_down_shexp.weight", c.n_ff_shared, d, &F.down));
      }
    }
    for (auto& s : steps)
      if (!s) return s.error();
    if (c.is_mla[l]) decompression_matrices(c, L.mla);
  }
  m->info_ = ModelInfo{"kimi-linear", c.n_layer, c.n_embd, c.n_vocab, c.n_ctx_train};
  return std::unique_ptr<Model>(std::move(m));
}

size_t KimiLinearModel::weight_bytes_per_token() const {
  const KimiConfig& c = cfg_;
  size_t n = output().bytes();
  for (int l = 0; l < c.n_layer; ++l) {
    const KimiLayer& L = layers_[l];
    if (!c.is_mla[l]) {
      const KdaWeights& K = L.kda;
      for (const PackedMatrix* w : {&K.wq, &K.wk, &K.wv, &K.f_a, &K.f_b, &K.g_a, &K.g_b, &K.beta, &K.wo}) n += w->bytes();
    } else {
      const MlaWeights& A = L.mla;
      n += A.wq.bytes() + A.wkv_a.bytes() + A.wo.bytes();
      for (int h = 0; h < c.n_head; ++h) n += A.k_b[h].bytes() + A.v_b[h].bytes();
    }
    const FfnWeights& F = L.ffn;
    n += F.gate.bytes() + F.up.bytes() + F.down.bytes();
    if (c.is_moe(l) && c.n_expert > 0)  // a token reads n_used of the experts (all are the same size)
      n += F.router.bytes() + (size_t)c.n_used * (F.e_gate[0].bytes() + F.e_up[0].bytes() + F.e_down[0].bytes());
  }
  return n;
}

void KimiLinearModel::embed(int token, float* out) const {
  const TypeTraits* tt = type_traits(embd_info_->type);
  tt->dequant_row(embd_info_->data + (size_t)token * row_bytes(embd_info_->type, cfg_.n_embd), out, cfg_.n_embd);
}

}  // namespace ouro
