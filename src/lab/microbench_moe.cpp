// `ouro microbench moe`: the routed part of one mixture-of-experts layer (kernels/moe.h) as the
// hybrid's forward pass runs it: the router's scores in, sigmoid + top-k with the selection bias,
// the chosen experts over their tokens (gate/up, SwiGLU, down; whole experts per thread or one after
// another, by the same rule), and each token's weighted sum in expert order. Weights are random
// blocks of --type; the router's logits are an input (the router's product is a plain matmul).
#include <algorithm>
#include <cstring>

#include "core/fault.h"
#include "kernels/moe.h"
#include "lab/microbench_parts.h"

namespace ouro::microbench {

namespace {

class MoeBench : public BenchBase {
 public:
  explicit MoeBench(const Setup& s)
      : BenchBase(s, true), k_(&matmul_kernels(s.isa)), T_(dim("tokens")) {
    if (!pool_) pool_ = std::make_unique<ThreadPool>(1);  // the expert products run on a pool
    m_.d = (int)dim("hidden"), m_.ff = (int)dim("ff"), m_.n_expert = (int)dim("experts"), m_.n_used = (int)dim("used");
    m_.weights_norm = true;
    m_.weights_scale = 2.5f;  // the hybrid files' routed scaling factor (docs/hybrid.md)
    params["tokens"] = T_;
    params["hidden"] = m_.d;
    params["ff"] = m_.ff;
    params["experts"] = m_.n_expert;
    params["used"] = m_.n_used;
    params["weights_norm"] = m_.weights_norm;
    params["weights_scale"] = m_.weights_scale;
  }

  Status init() override {
    const TypeName* tn = find_type(s_.type);
    if (!tn) return usage_error("flag --type: '" + s_.type + "' is not one of q4_0, q8_0, q4_k, q4_1, f32, f16");
    type_ = tn->type;
    params["type"] = s_.type;
    const int64_t d = m_.d, ff = m_.ff, E = m_.n_expert;
    if (m_.n_used > E)
      return usage_error("flag --used: " + std::to_string(m_.n_used) + " is more than --experts " + std::to_string(E));
    const int bs = type_traits(type_)->block_size;
    if (d % bs != 0 || ff % bs != 0)
      return usage_error("flags --hidden/--ff: " + std::to_string(d) + " and " + std::to_string(ff) +
                         " must be multiples of the " + s_.type + " block size " + std::to_string(bs));
    if (3 * E * ff * d > kMax) return too_big("3 x --experts x --ff x --hidden", 3 * E * ff * d);
    if (T_ * m_.n_used * std::max(d, ff) > kMax) return too_big("--tokens x --used x max(--hidden, --ff)", T_ * m_.n_used * std::max(d, ff));
    if (T_ * E > kMax) return too_big("--tokens x --experts", T_ * E);
    Rng rng(s_.seed);
    x_ = rng.uniform_vec(T_ * d, -1.0f, 1.0f);
    logits_ = rng.uniform_vec(T_ * E, -3.0f, 3.0f);
    bias_ = rng.uniform_vec(E, -0.002f, 0.002f);  // small: balanced routing, as a trained router's bias makes it
    m_.bias = bias_.data();
    raw_.resize(3 * E);
    gate_.resize(E), up_.resize(E), down_.resize(E);
    for (int64_t e = 0; e < E; ++e) {
      raw_[3 * e] = random_weights(type_, ff, d, rng);
      raw_[3 * e + 1] = random_weights(type_, ff, d, rng);
      raw_[3 * e + 2] = random_weights(type_, d, ff, rng);
      gate_[e] = pack_matrix(type_, raw_[3 * e].data(), d, ff);
      up_[e] = pack_matrix(type_, raw_[3 * e + 1].data(), d, ff);
      down_[e] = pack_matrix(type_, raw_[3 * e + 2].data(), ff, d);
    }
    m_.gate = gate_.data(), m_.up = up_.data(), m_.down = down_.data();
    scratch_.reserve(m_, (int)T_);
    y_.assign(T_ * d, 0.0f);
    // The routing is the seed's: route once for the cost (every call routes the same way).
    router_ = logits_;
    moe_route(m_, router_.data(), (int)T_, scratch_);
    cost_ = moe_experts_cost(m_, scratch_);
    cost_.bytes += 8.0 * T_ * E + 4.0 * T_ * d * (2.0 * m_.n_used + 2.0);  // router in, slots out and back, y
    cost_.flops += 8.0 * T_ * E + 2.0 * T_ * m_.n_used * d;
    params["active_experts"] = (int64_t)scratch_.active.size();
    return Ok{};
  }

  void run() override {
    fault::at_op("moe");
    std::memcpy(router_.data(), logits_.data(), sizeof(float) * logits_.size());
    moe_route(m_, router_.data(), (int)T_, scratch_);
    moe_experts(m_, x_.data(), scratch_, *pool_, *k_);
    std::fill(y_.begin(), y_.end(), 0.0f);
    moe_combine(m_, (int)T_, scratch_, y_.data(), *pool_);
  }
  std::vector<float> output() override { run(); return y_; }
  std::vector<size_t> output_shape() const override { return {(size_t)T_, (size_t)m_.d}; }
  OpCost cost() const override { return cost_; }
  std::vector<Array> inputs() const override {
    const size_t d = m_.d, ff = m_.ff, E = m_.n_expert;
    Array gate{"gate", {E, ff, d}, std::vector<float>(E * ff * d)}, up{"up", {E, ff, d}, std::vector<float>(E * ff * d)},
        down{"down", {E, d, ff}, std::vector<float>(E * d * ff)};
    const auto* tt = type_traits(type_);
    const size_t rb_d = row_bytes(type_, d), rb_ff = row_bytes(type_, ff);
    for (size_t e = 0; e < E; ++e) {
      for (size_t r = 0; r < ff; ++r) {
        tt->dequant_row(raw_[3 * e].data() + r * rb_d, &gate.data[(e * ff + r) * d], d);
        tt->dequant_row(raw_[3 * e + 1].data() + r * rb_d, &up.data[(e * ff + r) * d], d);
      }
      for (size_t r = 0; r < d; ++r) tt->dequant_row(raw_[3 * e + 2].data() + r * rb_ff, &down.data[(e * d + r) * ff], ff);
    }
    return {Array{"x", {(size_t)T_, d}, x_}, Array{"router_logits", {(size_t)T_, E}, logits_}, Array{"bias", {E}, bias_},
            std::move(gate), std::move(up), std::move(down)};
  }

 private:
  const MatmulKernels* k_;
  int64_t T_;
  GgmlType type_ = GgmlType::kF32;
  MoeExperts m_;
  std::vector<std::vector<uint8_t>> raw_;
  std::vector<PackedMatrix> gate_, up_, down_;
  std::vector<float> x_, logits_, bias_, router_, y_;
  MoeScratch scratch_;
  OpCost cost_;
};

}  // namespace

std::unique_ptr<BenchBase> make_moe_bench(const Setup& s) { return std::make_unique<MoeBench>(s); }

}  // namespace ouro::microbench
