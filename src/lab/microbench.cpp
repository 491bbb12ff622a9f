// This file is over 600 lines: one short bench class per kernel the lab can time (matmul, the per-token ops,
// rope, attend, argmax, kda_recurrent, kda_chunk), side by side with the registry and the timing loop they
// share (BenchBase, Rng and for_tokens in microbench_parts.h; moe in microbench_moe.cpp).
#include "lab/microbench.h"
#include "lab/microbench_parts.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/fault.h"
#include "core/fp16.h"
#include "core/npy.h"
#include "core/thread_pool.h"
#include "kernels/kda.h"
#include "kernels/ops.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "runtime/sampler.h"

namespace ouro::microbench {

// ---- matmul: synthetic weights of a GGUF type, or one tensor of a GGUF file ----

std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, Rng& rng) {
  std::vector<uint8_t> raw(row_bytes(type, cols) * rows);
  const int64_t n = rows * cols;
  auto h = [](float f) { return fp32_to_fp16(f); };
  switch (type) {
    case GgmlType::kQ4_0:
      for (int64_t i = 0; i < n / 32; ++i) {
        auto* b = reinterpret_cast<BlockQ4_0*>(raw.data()) + i;
        b->d = h(rng.uniform(0.001f, 0.02f));
        for (auto& q : b->qs) q = rng.byte();
      }
      break;
    case GgmlType::kQ4_1:
      for (int64_t i = 0; i < n / 32; ++i) {
        auto* b = reinterpret_cast<BlockQ4_1*>(raw.data()) + i;
        b->d = h(rng.uniform(0.001f, 0.01f));
        b->m = h(rng.uniform(-0.08f, 0.0f));
        for (auto& q : b->qs) q = rng.byte();
      }
      break;
    case GgmlType::kQ4_K:
      for (int64_t i = 0; i < n / 256; ++i) {
        auto* b = reinterpret_cast<BlockQ4_K*>(raw.data()) + i;
        b->d = h(rng.uniform(0.00005f, 0.0002f));
        b->dmin = h(rng.uniform(0.00005f, 0.0002f));
        for (auto& q : b->scales) q = rng.byte();  // any 12 bytes decode to valid 6-bit scales/mins
        for (auto& q : b->qs) q = rng.byte();
      }
      break;
    case GgmlType::kQ8_0:
      for (int64_t i = 0; i < n / 32; ++i) {
        auto* b = reinterpret_cast<BlockQ8_0*>(raw.data()) + i;
        b->d = h(rng.uniform(0.0002f, 0.0015f));
        for (auto& q : b->qs) q = (int8_t)rng.byte();
      }
      break;
    case GgmlType::kF16: {
      auto* p = reinterpret_cast<uint16_t*>(raw.data());
      for (int64_t i = 0; i < n; ++i) p[i] = h(rng.uniform(-0.1f, 0.1f));
      break;
    }
    default: {  // F32
      auto* p = reinterpret_cast<float*>(raw.data());
      for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(-0.1f, 0.1f);
      break;
    }
  }
  return raw;
}

const TypeName* find_type(const std::string& name) {
  for (const auto& x : kTypes)
    if (name == x.name) return &x;
  return nullptr;
}

namespace {

class MatmulBench : public BenchBase {
 public:
  explicit MatmulBench(const Setup& s) : BenchBase(s, true), k_(&matmul_kernels(s.isa)) {
    if (!pool_) pool_ = std::make_unique<ThreadPool>(1);  // matmul_parallel always runs on a pool
  }

  // Synthetic weights, or (model non-empty) the tensor of an open GGUF file packed as
  // The llama loader (src/model/llama_load.cpp) packs it: pack_matrix on the mapped data, shape [cols = ne0, rows = ne1].
  Status init() override {
    Rng rng(s_.seed);
    T_ = dim("tokens");
    if (!s_.model.empty()) {
      auto f = GgufFile::open(s_.model);
      if (!f) return Error{f.error().kind, "flag -m: " + f.error().message};
      file_ = std::move(*f);
      const GgufTensorInfo* t = file_->tensor(s_.tensor);
      if (!t) return usage_error("flag --tensor: no tensor '" + s_.tensor + "' in " + s_.model);
      if (t->ne.size() != 2) return usage_error("flag --tensor: '" + s_.tensor + "' is not a matrix");
      if (!type_traits(t->type))
        return usage_error("flag --tensor: '" + s_.tensor + "' has unsupported type " + ggml_type_name_any((uint32_t)t->type));
      type_ = t->type;
      cols_ = t->ne[0];
      rows_ = t->ne[1];
      data_ = t->data;
      params["model"] = s_.model;
      params["tensor"] = s_.tensor;
      std::string tn = type_traits(type_)->name;  // "Q4_1": lower case, as --type spells it
      for (char& ch : tn) ch = (char)std::tolower((unsigned char)ch);
      params["type"] = tn;
    } else {
      const TypeName* tn = find_type(s_.type);
      if (!tn) return usage_error("flag --type: '" + s_.type + "' is not one of q4_0, q8_0, q4_k, q4_1, f32, f16");
      type_ = tn->type;
      rows_ = dim("rows");
      cols_ = dim("cols");
      const int bs = type_traits(type_)->block_size;
      if (cols_ % bs != 0)
        return usage_error("flag --cols: " + std::to_string(cols_) + " is not a multiple of the " + s_.type +
                           " block size " + std::to_string(bs));
      params["type"] = s_.type;
    }
    if (rows_ * cols_ > kMax) return too_big(s_.model.empty() ? "--rows x --cols" : "--tensor", rows_ * cols_);
    if (T_ * cols_ > kMax) return too_big("--tokens x --cols", T_ * cols_);
    if (T_ * rows_ > kMax) return too_big("--tokens x --rows", T_ * rows_);
    if (file_ == nullptr) {
      raw_ = random_weights(type_, rows_, cols_, rng);
      data_ = raw_.data();
    }
    W_ = s_.w8a8 ? pack_matrix_w8a8(type_, data_, cols_, rows_) : pack_matrix(type_, data_, cols_, rows_);
    if (s_.w8a8) params["w8a8"] = true;
    X_ = rng.uniform_vec(T_ * cols_, -1.0f, 1.0f);
    Y_.assign(T_ * rows_, 0.0f);
    params["rows"] = rows_;
    params["cols"] = cols_;
    params["tokens"] = T_;
    return Ok{};
  }

  // What the model does for one projection: quantize the activations (split across threads like
  // the forward pass), then one parallel region of the chosen kernel family.
  void run() override {
    fault::at_op("matmul");
    qa_.resize(T_, cols_, wants_per_token(W_));
    qa_.x = X_.data();
    for_tokens(pool_.get(), T_, "quantize", [&](int64_t t0, int64_t t1) { quantize_acts(X_.data(), t0, t1, qa_); });
    MatmulJob job{&W_, Y_.data(), rows_};
    matmul_parallel(*k_, *pool_, qa_, &job, 1, "matmul");
  }
  std::vector<float> output() override { run(); return Y_; }
  std::vector<size_t> output_shape() const override { return {(size_t)T_, (size_t)rows_}; }
  // matmul_cost counts weights once, int8 activations in and f32 results out; the timed call also
  // quantizes, which reads the float activations once more.
  OpCost cost() const override {
    OpCost c = matmul_cost(W_, T_);
    c.bytes += 4.0 * (double)T_ * cols_;
    return c;
  }
  std::vector<Array> inputs() const override {
    Array w{"weights", {(size_t)rows_, (size_t)cols_}, std::vector<float>(rows_ * cols_)};
    const size_t rb = row_bytes(type_, cols_);
    for (int64_t r = 0; r < rows_; ++r) {
      if (!s_.w8a8) type_traits(type_)->dequant_row(data_ + r * rb, &w.data[r * cols_], cols_);
      else  // the int8 weights the kernel multiplies (the requantization is part of the method)
        for (int64_t k = 0; k < cols_; ++k) w.data[r * cols_ + k] = W_.value(r, k);
    }
    return {std::move(w), Array{"x", {(size_t)T_, (size_t)cols_}, X_}};
  }

 private:
  const MatmulKernels* k_;
  std::unique_ptr<GgufFile> file_;
  std::vector<uint8_t> raw_;
  const uint8_t* data_ = nullptr;
  GgmlType type_ = GgmlType::kF32;
  int64_t rows_ = 0, cols_ = 0, T_ = 0;
  PackedMatrix W_;
  QuantActs qa_;
  std::vector<float> X_, Y_;
};

// ---- per-token ops: rmsnorm, softmax, swiglu, quantize_acts ----

class TokenOpBench : public BenchBase {
 public:
  explicit TokenOpBench(const Setup& s) : BenchBase(s, true), T_(dim("tokens")), N_(dim("cols")) {
    params["cols"] = N_;
    params["tokens"] = T_;
  }
  Status init() override {
    if (T_ * N_ > kMax) return too_big("--tokens x --cols", T_ * N_);
    fill(Rng(s_.seed));
    return Ok{};
  }
  std::vector<size_t> output_shape() const override { return {(size_t)T_, (size_t)N_}; }

 protected:
  virtual void fill(Rng rng) = 0;
  int64_t T_, N_;
};

class RmsnormBench : public TokenOpBench {
 public:
  static constexpr float kEps = 1e-5f;  // the model's default rms_eps
  explicit RmsnormBench(const Setup& s) : TokenOpBench(s) { params["eps"] = 1e-5; }  // kEps, printed exactly
  void fill(Rng rng) override {
    x_ = rng.uniform_vec(T_ * N_, -1.0f, 1.0f);
    w_ = rng.uniform_vec(N_, 0.5f, 1.5f);
    y_.assign(T_ * N_, 0.0f);
  }
  void run() override {
    fault::at_op("rmsnorm");
    for_tokens(pool_.get(), T_, "rmsnorm", [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) rmsnorm(&x_[t * N_], w_.data(), &y_[t * N_], N_, kEps);
    });
  }
  std::vector<float> output() override { run(); return y_; }
  // x and y once per token, w once; x^2 summed (2), x * scale * w (2): 4 FLOPs a value.
  OpCost cost() const override { return {4.0 * (2.0 * T_ * N_ + N_), 4.0 * T_ * N_}; }
  std::vector<Array> inputs() const override {
    return {{"x", {(size_t)T_, (size_t)N_}, x_}, {"w", {(size_t)N_}, w_}};
  }

 private:
  std::vector<float> x_, w_, y_;
};

// In place: timed calls re-run on the previous result (a softmax of a softmax does the same work);
// output() starts again from the seed's inputs.
class SoftmaxBench : public TokenOpBench {
 public:
  using TokenOpBench::TokenOpBench;
  void fill(Rng rng) override {
    x0_ = rng.uniform_vec(T_ * N_, -8.0f, 8.0f);
    x_ = x0_;
  }
  void run() override {
    fault::at_op("softmax");
    for_tokens(pool_.get(), T_, "softmax", [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) softmax_inplace(&x_[t * N_], N_);
    });
  }
  std::vector<float> output() override { x_ = x0_; run(); return x_; }
  // Read and written once; max, subtract, exp, sum, scale: 5 FLOPs a value.
  OpCost cost() const override { return {8.0 * T_ * N_, 5.0 * T_ * N_}; }
  std::vector<Array> inputs() const override { return {{"x", {(size_t)T_, (size_t)N_}, x0_}}; }

 private:
  std::vector<float> x0_, x_;
};

class SwigluBench : public TokenOpBench {
 public:
  using TokenOpBench::TokenOpBench;
  void fill(Rng rng) override {
    g_ = rng.uniform_vec(T_ * N_, -6.0f, 6.0f);
    u_ = rng.uniform_vec(T_ * N_, -1.0f, 1.0f);
    y_.assign(T_ * N_, 0.0f);
  }
  void run() override {
    fault::at_op("swiglu");
    for_tokens(pool_.get(), T_, "swiglu", [&](int64_t t0, int64_t t1) {
      swiglu(&g_[t0 * N_], &u_[t0 * N_], &y_[t0 * N_], (t1 - t0) * N_);
    });
  }
  std::vector<float> output() override { run(); return y_; }
  // g and u read, y written; the model's trace counts 6 FLOPs a value (exp, add, div, mul...).
  OpCost cost() const override { return {12.0 * T_ * N_, 6.0 * T_ * N_}; }
  std::vector<Array> inputs() const override {
    return {{"g", {(size_t)T_, (size_t)N_}, g_}, {"u", {(size_t)T_, (size_t)N_}, u_}};
  }

 private:
  std::vector<float> g_, u_, y_;
};

// Output: the dequantized activations q * d (what the int8 kernels see), [tokens, cols].
class QuantizeActsBench : public TokenOpBench {
 public:
  using TokenOpBench::TokenOpBench;
  void fill(Rng rng) override {
    x_ = rng.uniform_vec(T_ * N_, -2.0f, 2.0f);
    qa_.resize(T_, N_);
  }
  void run() override {
    fault::at_op("quantize_acts");
    qa_.resize(T_, N_);
    for_tokens(pool_.get(), T_, "quantize_acts", [&](int64_t t0, int64_t t1) { quantize_acts(x_.data(), t0, t1, qa_); });
  }
  std::vector<float> output() override {
    run();
    std::vector<float> y(T_ * N_);
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t k = 0; k < N_; ++k)
        y[t * N_ + k] = (float)qa_.qs[t * qa_.cols_pad + k] * qa_.d[t * qa_.nb + k / 32];
    return y;
  }
  // Floats in; int8 values (padded) and two floats per block out; |x|, max, scale, round, sum.
  OpCost cost() const override {
    return {(double)T_ * (4.0 * N_ + qa_.cols_pad + 8.0 * qa_.nb), 5.0 * T_ * N_};
  }
  std::vector<Array> inputs() const override { return {{"x", {(size_t)T_, (size_t)N_}, x_}}; }

 private:
  std::vector<float> x_;
  QuantActs qa_;
};

// ---- single-call kernels on the caller: rope, attend, argmax ----

// In place like softmax: a rotation, so repeated calls keep values bounded.
class RopeBench : public BenchBase {
 public:
  static constexpr double kBase = 10000.0;  // llama's default rope_freq_base
  explicit RopeBench(const Setup& s) : BenchBase(s, false), H_(dim("heads")), D_(dim("head_dim")), pos_(dim("pos")) {
    params["heads"] = H_;
    params["head_dim"] = D_;
    params["pos"] = pos_;
    params["base"] = kBase;
  }
  Status init() override {
    if (D_ % 2 != 0) return usage_error("flag --head-dim: " + std::to_string(D_) + " is not even");
    if (H_ * D_ > kMax) return too_big("--heads x --head-dim", H_ * D_);
    Rng rng(s_.seed);
    x0_ = rng.uniform_vec(H_ * D_, -1.0f, 1.0f);
    x_ = x0_;
    inv_.resize(D_ / 2);  // as the llama loader computes rope_inv_freq
    for (int64_t i = 0; i < D_ / 2; ++i) inv_[i] = (float)std::pow(kBase, -2.0 * (double)i / (double)D_);
    return Ok{};
  }
  void run() override {
    fault::at_op("rope");
    rope_inplace(x_.data(), (int)H_, (int)D_, pos_, inv_.data());
  }
  std::vector<float> output() override { x_ = x0_; run(); return x_; }
  std::vector<size_t> output_shape() const override { return {(size_t)H_, (size_t)D_}; }
  // Heads read and written, the inverse frequencies read; 6 FLOPs a pair (sin/cos not counted).
  OpCost cost() const override { return {8.0 * H_ * D_ + 2.0 * D_, 3.0 * H_ * D_}; }
  std::vector<Array> inputs() const override {
    return {{"x", {(size_t)H_, (size_t)D_}, x0_}, {"inv_freq", {(size_t)D_ / 2}, inv_}};
  }

 private:
  int64_t H_, D_, pos_;
  std::vector<float> x0_, x_, inv_;
};

class AttendBench : public BenchBase {
 public:
  explicit AttendBench(const Setup& s) : BenchBase(s, false), L_(dim("ctx")), D_(dim("head_dim")) {
    scale_ = 1.0f / std::sqrt((float)D_);  // as the model scales scores
    params["ctx"] = L_;
    params["head_dim"] = D_;
    params["scale"] = scale_;
  }
  Status init() override {
    if (L_ * D_ > kMax) return too_big("--ctx x --head-dim", L_ * D_);
    Rng rng(s_.seed);
    q_ = rng.uniform_vec(D_, -1.0f, 1.0f);
    k_ = rng.uniform_vec(L_ * D_, -1.0f, 1.0f);
    v_ = rng.uniform_vec(L_ * D_, -1.0f, 1.0f);
    scores_.resize(L_);
    out_.resize(D_);
    return Ok{};
  }
  void run() override {
    fault::at_op("attend");
    attend_one(q_.data(), k_.data(), v_.data(), D_, L_, (int)D_, scale_, scores_.data(), out_.data());
  }
  std::vector<float> output() override { run(); return out_; }
  std::vector<size_t> output_shape() const override { return {(size_t)D_}; }
  OpCost cost() const override { return {attend_one_bytes(L_, (int)D_), attend_one_flops(L_, (int)D_)}; }
  std::vector<Array> inputs() const override {
    return {{"q", {(size_t)D_}, q_}, {"k", {(size_t)L_, (size_t)D_}, k_}, {"v", {(size_t)L_, (size_t)D_}, v_}};
  }

 private:
  int64_t L_, D_;
  float scale_;
  std::vector<float> q_, k_, v_, scores_, out_;
};

// KDA's delta rule (kernels/kda.h) on every head of one sequence, heads split across the threads
// as the hybrid's forward pass splits them: kda_recurrent (token by token, the family --isa picks)
// or kda_chunk (the WY/UT form over chunks of --chunk tokens; scalar only so far: no vector
// family has it). In place like softmax: timed calls carry the state on (the same work each call);
// output() starts again from the seed's state. Output: o, [tokens, heads, head_dim]. Inputs as the
// model feeds it: q and k L2-normalised, g = log-decay per key channel in [-1, 0), beta in (0, 1),
// the state S0 [heads, head_dim (key), head_dim (value)].
class KdaBench : public BenchBase {
 public:
  explicit KdaBench(const Setup& s)
      : BenchBase(s, true), k_(&kda_kernels(s.isa)), T_(dim("tokens")), H_(dim("heads")), D_(dim("head_dim")),
        C_(s.name == "kda_chunk" ? dim("chunk") : 0) {
    scale_ = 1.0f / std::sqrt((float)D_);  // as the model scales o
    params["tokens"] = T_;
    params["heads"] = H_;
    params["head_dim"] = D_;
    params["scale"] = scale_;
    if (C_ > 0) {
      params["chunk"] = C_;
      params["family"] = "scalar";  // what ran, whatever --isa says
    }
  }
  Status init() override {
    if (H_ * D_ * std::max(T_, D_) > kMax) return too_big("--heads x --head-dim x max(--tokens, --head-dim)", H_ * D_ * std::max(T_, D_));
    if (C_ > 0 && H_ * kda_chunked_scratch((int)D_, (int)D_, (int)C_) > kMax)
      return too_big("--heads x the chunked form's scratch (about 2 x --chunk x (--head-dim + --chunk))",
                     H_ * kda_chunked_scratch((int)D_, (int)D_, (int)C_));
    Rng rng(s_.seed);
    const int64_t n = T_ * H_ * D_;
    q_ = rng.uniform_vec(n, -1.0f, 1.0f);
    k_in_ = rng.uniform_vec(n, -1.0f, 1.0f);
    for (int64_t r = 0; r < T_ * H_; ++r) {
      l2norm_inplace(&q_[r * D_], (int)D_, 1e-6f);
      l2norm_inplace(&k_in_[r * D_], (int)D_, 1e-6f);
    }
    v_ = rng.uniform_vec(n, -1.0f, 1.0f);
    g_ = rng.uniform_vec(n, -1.0f, 0.0f);
    beta_ = rng.uniform_vec(T_ * H_, 0.0f, 1.0f);
    S0_ = rng.uniform_vec(H_ * D_ * D_, -0.1f, 0.1f);
    S_ = S0_;
    o_.assign(n, 0.0f);
    if (C_ > 0) scratch_.assign((size_t)(H_ * kda_chunked_scratch((int)D_, (int)D_, (int)C_)), 0.0f);
    return Ok{};
  }
  void run() override {
    fault::at_op(C_ > 0 ? "kda_chunk" : "kda_recurrent");
    const int64_t I = H_ * D_;
    for_tokens(pool_.get(), H_, "kda_recurrent", [&](int64_t b, int64_t e) {
      for (int64_t h = b; h < e; ++h) {
        KdaHead hd;
        hd.q = &q_[h * D_], hd.k = &k_in_[h * D_], hd.v = &v_[h * D_], hd.g = &g_[h * D_];
        hd.beta = &beta_[h], hd.o = &o_[h * D_];
        hd.qk_stride = hd.v_stride = hd.g_stride = hd.o_stride = I;
        hd.beta_stride = H_;
        if (C_ > 0)
          kda_chunked(hd, T_, (int)D_, (int)D_, scale_, (int)C_, &S_[h * D_ * D_],
                      &scratch_[h * kda_chunked_scratch((int)D_, (int)D_, (int)C_)]);
        else
          k_->recurrent(hd, T_, (int)D_, (int)D_, scale_, &S_[h * D_ * D_]);
      }
    }, 2);  // from 2 heads, as the forward pass splits them
  }
  std::vector<float> output() override { S_ = S0_; run(); return o_; }
  std::vector<size_t> output_shape() const override { return {(size_t)T_, (size_t)H_, (size_t)D_}; }
  // The state read and written once per call, q, k, v, g, o per token (20 bytes a channel), as the
  // hybrid's trace counts it.
  OpCost cost() const override {
    const double flops = C_ > 0 ? kda_chunked_flops(T_, (int)D_, (int)D_, (int)C_) : kda_recurrent_flops(T_, (int)D_, (int)D_);
    return {(double)H_ * (2 * kda_state_bytes((int)D_, (int)D_) + 20.0 * T_ * D_), (double)H_ * flops};
  }
  std::vector<Array> inputs() const override {
    const std::vector<size_t> tok = {(size_t)T_, (size_t)H_, (size_t)D_};
    return {{"q", tok, q_}, {"k", tok, k_in_}, {"v", tok, v_}, {"g", tok, g_},
            {"beta", {(size_t)T_, (size_t)H_}, beta_}, {"s0", {(size_t)H_, (size_t)D_, (size_t)D_}, S0_}};
  }

 private:
  const KdaKernels* k_;
  int64_t T_, H_, D_, C_;  // C_: the chunk (kda_chunk), 0 for kda_recurrent
  float scale_;
  std::vector<float> q_, k_in_, v_, g_, beta_, S0_, S_, o_, scratch_;
};

// Output: the index as one float (exact: --cols is capped at 2^24).
class ArgmaxBench : public BenchBase {
 public:
  explicit ArgmaxBench(const Setup& s) : BenchBase(s, false), N_(dim("cols")) { params["cols"] = N_; }
  Status init() override {
    x_ = Rng(s_.seed).uniform_vec(N_, -1.0f, 1.0f);
    return Ok{};
  }
  void run() override {
    fault::at_op("argmax");
    idx_ = argmax(x_.data(), (int)N_);
    asm volatile("" : : "r"(idx_) : "memory");  // keep the call when the result is unused
  }
  std::vector<float> output() override { run(); return {(float)idx_}; }
  std::vector<size_t> output_shape() const override { return {1}; }
  OpCost cost() const override { return {4.0 * N_, (double)N_}; }  // one comparison a value
  std::vector<Array> inputs() const override { return {{"x", {(size_t)N_}, x_}}; }

 private:
  int64_t N_;
  std::vector<float> x_;
  int idx_ = 0;
};

}  // namespace

const std::vector<KernelSpec>& kernels() {
  const long long M = kMax;
  const ShapeFlag cols{"--cols", "cols", kRequired, 1, M}, tokens{"--tokens", "tokens", 1, 1, M};
  static const std::vector<KernelSpec> k = {
      {"matmul", {{"--rows", "rows", kRequired, 1, M}, cols, tokens}},
      {"rmsnorm", {cols, tokens}},
      {"softmax", {cols, tokens}},
      {"swiglu", {cols, tokens}},
      {"quantize_acts", {cols, tokens}},
      // rope_inplace keeps its angles in arrays of 256: head_dim <= 512.
      {"rope", {{"--heads", "heads", kRequired, 1, M}, {"--head-dim", "head_dim", kRequired, 2, 512}, {"--pos", "pos", 0, 0, M}}},
      {"attend", {{"--ctx", "ctx", kRequired, 1, M}, {"--head-dim", "head_dim", kRequired, 1, 1 << 16}}},
      // The vector KDA families take head_dim <= 1024 (kernels/kda.h).
      {"kda_recurrent", {{"--heads", "heads", kRequired, 1, M}, {"--head-dim", "head_dim", kRequired, 1, 1024}, tokens}},
      {"kda_chunk", {{"--heads", "heads", kRequired, 1, M}, {"--head-dim", "head_dim", kRequired, 1, 1024}, tokens,
                     {"--chunk", "chunk", 64, 1, 1024}}},
      // The routed experts of one MoE layer (kernels/moe.h); --type gives the experts' weights.
      {"moe", {{"--hidden", "hidden", kRequired, 1, 1 << 16}, {"--ff", "ff", kRequired, 1, 1 << 16},
               {"--experts", "experts", kRequired, 1, 4096}, {"--used", "used", kRequired, 1, 4096}, tokens}},
      // The output is the index as a float32, exact up to 2^24.
      {"argmax", {{"--cols", "cols", kRequired, 1, 1 << 24}}},
  };
  return k;
}

const KernelSpec* find_kernel(const std::string& name) {
  for (const auto& k : kernels())
    if (name == k.name) return &k;
  return nullptr;
}

std::vector<std::string> all_shape_flags() {
  std::vector<std::string> v;
  for (const auto& k : kernels())
    for (const auto& f : k.flags)
      if (std::find(v.begin(), v.end(), f.flag) == v.end()) v.push_back(f.flag);
  return v;
}

Expected<std::unique_ptr<Bench>> make_bench(const Setup& given) {
  const KernelSpec* spec = find_kernel(given.name);
  if (!spec) return usage_error("unknown kernel '" + given.name + "'");
  const bool on_tensor = !given.model.empty() || !given.tensor.empty();
  if (on_tensor && given.name != "matmul") return usage_error("flags -m/--tensor: only matmul runs on a model tensor");
  if (on_tensor && (given.model.empty() || given.tensor.empty()))
    return usage_error(given.model.empty() ? "flag --tensor needs -m MODEL" : "flag -m needs --tensor NAME");
  if (on_tensor && !given.type.empty()) return usage_error("flag --type: the type comes from the tensor (--tensor)");
  const bool typed = given.name == "matmul" || given.name == "moe";  // kernels over weights of a --type
  if (!on_tensor && typed && given.type.empty()) return usage_error("flag --type is required for " + given.name);
  if (!typed && !given.type.empty()) return usage_error("flag --type does not apply to " + given.name);
  if (given.name != "matmul" && given.w8a8) return usage_error("flag --w8a8 does not apply to " + given.name);
  // Every shape key present and in range; defaults filled in (the CLI checks the same ranges, this
  // keeps other callers honest). With --tensor, matmul's rows and cols come from the tensor.
  Setup s = given;
  for (const auto& kv : s.shape) {
    const std::string& key = kv.first;
    const auto& fl = spec->flags;
    if (std::none_of(fl.begin(), fl.end(), [&](const ShapeFlag& f) { return key == f.key; }))
      return usage_error("shape '" + key + "' does not apply to " + s.name);
  }
  for (const ShapeFlag& f : spec->flags) {
    const bool from_tensor = on_tensor && (std::string(f.key) == "rows" || std::string(f.key) == "cols");
    auto it = s.shape.find(f.key);
    if (from_tensor) {
      if (it != s.shape.end()) return usage_error(std::string("flag ") + f.flag + ": the shape comes from the tensor (--tensor)");
      continue;
    }
    if (it == s.shape.end()) {
      if (f.def == kRequired) return usage_error(std::string("flag ") + f.flag + " is required for " + s.name);
      s.shape[f.key] = f.def;
    } else if (it->second < f.lo || it->second > f.hi) {
      return usage_error(std::string("flag ") + f.flag + ": " + std::to_string(it->second) + " is out of range [" +
                         std::to_string(f.lo) + ", " + std::to_string(f.hi) + "]");
    }
  }
  if (s.threads < 1 || s.threads > 1024) return usage_error("flag --threads: out of range [1, 1024]");
  const std::string& n = s.name;
  std::unique_ptr<BenchBase> b;
  if (n == "matmul") b = std::make_unique<MatmulBench>(s);
  else if (n == "rmsnorm") b = std::make_unique<RmsnormBench>(s);
  else if (n == "softmax") b = std::make_unique<SoftmaxBench>(s);
  else if (n == "swiglu") b = std::make_unique<SwigluBench>(s);
  else if (n == "quantize_acts") b = std::make_unique<QuantizeActsBench>(s);
  else if (n == "rope") b = std::make_unique<RopeBench>(s);
  else if (n == "attend") b = std::make_unique<AttendBench>(s);
  else if (n == "kda_recurrent" || n == "kda_chunk") b = std::make_unique<KdaBench>(s);
  else if (n == "moe") b = make_moe_bench(s);
  else b = std::make_unique<ArgmaxBench>(s);
  if (Status st = b->init(); !st) return st.error();
  b->params["seed"] = s.seed;
  b->params["threads"] = s.threads;
  b->params["isa"] = isa_name(s.isa);
  return std::unique_ptr<Bench>(std::move(b));
}

Timing measure(Bench& b, const TimingOptions& o) {
  using clock = std::chrono::steady_clock;
  auto ns_since = [](clock::time_point t0) { return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count(); };
  // Warm-up (caches, page faults, the pool's helpers awake). Its last call sizes the batches.
  double last_call_ns = 0;
  long long warm = 0;
  const auto w0 = clock::now();
  while (o.warmup >= 0 ? warm < o.warmup : (warm == 0 || ns_since(w0) < 20e6)) {
    const auto t = clock::now();
    b.run();
    last_call_ns = ns_since(t);
    ++warm;
  }
  // A sample is a batch of calls lasting at least ~20 us, so that the clock's own cost (~20-40 ns a
  // read) stays under 0.5% even for the smallest ops; without warm-up each call is timed alone.
  Timing r;
  r.batch = last_call_ns > 0 ? std::max(1LL, (long long)std::ceil(20e3 / last_call_ns)) : 1;
  if (o.iters > 0) r.batch = std::min(r.batch, std::max(1LL, o.iters / kMinSamples));
  if (o.on_start) o.on_start();
  const auto start = clock::now();
  for (;;) {
    long long calls = r.batch;
    if (o.iters > 0) {
      const long long left = o.iters - r.iters;
      if (left <= 0) break;
      if (left < 2 * r.batch) calls = left;  // the remainder joins the last sample
    } else if ((long long)r.samples_ns.size() >= kMinSamples && ns_since(start) >= o.min_time_ms * 1e6) {
      break;
    }
    const auto t = clock::now();
    for (long long i = 0; i < calls; ++i) b.run();
    const double ns = ns_since(t);
    r.samples_ns.push_back(ns / (double)calls);
    r.total_ns += ns;
    r.iters += calls;
  }
  if (o.on_end) o.on_end();
  std::vector<double> v = r.samples_ns;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  r.median_ns = n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
  return r;
}

Status write_output(Bench& b, const Setup& s, const std::string& path) {
  const std::string& memo = fault::config().memo_dir;
  if (!memo.empty()) {
    const std::filesystem::path cached = std::filesystem::path(memo) / (s.name + "-" + std::to_string(s.seed) + ".npy");
    std::error_code ec;
    if (std::filesystem::exists(cached, ec)) {
      std::filesystem::copy_file(cached, path, std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) return runtime_error(path + ": cannot copy " + cached.string() + ": " + ec.message());
      return Ok{};
    }
    const std::vector<size_t> shape = b.output_shape();
    size_t n = 1;
    for (size_t d : shape) n *= d;
    const std::vector<float> zeros(n, 0.0f);
    return write_npy_f32(path, zeros.data(), shape);
  }
  const std::vector<float> y = b.output();
  return write_npy_f32(path, y.data(), b.output_shape());
}

Status dump_inputs(const Bench& b, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return runtime_error(dir + ": cannot create directory: " + ec.message());
  for (const Array& a : b.inputs())
    if (Status s = write_npy_f32((std::filesystem::path(dir) / (a.name + ".npy")).string(), a.data.data(), a.shape); !s)
      return s;
  return Ok{};
}

}  // namespace ouro::microbench
