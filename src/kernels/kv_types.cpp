#include "kernels/kv_types.h"

#include <cmath>
#include <cstring>

#include "core/fault.h"
#include "core/fp16.h"

namespace ouro {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kBF16: return "bf16";
    case KvType::kFP8: return "fp8";
    case KvType::kInt8: return "int8";
  }
  return "?";
}

bool parse_kv_type(const std::string& s, KvType* out) {
  if (s == "f32") *out = KvType::kF32;
  else if (s == "bf16") *out = KvType::kBF16;
  else if (s == "fp8" || s == "fp8_e4m3") *out = KvType::kFP8;
  else if (s == "int8" || s == "i8") *out = KvType::kInt8;
  else return false;
  return true;
}

uint8_t fp8_e4m3_encode(float x) {
  const uint32_t bits = fp32_to_bits(x);
  const uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;           // NaN stays NaN
  if (abs >= 0x43e00000u) return sign | 0x7e;          // >= 448 (and inf): saturate to 448
  if (abs < 0x3c800000u) {                              // below 2^-6: subnormal (or zero)
    // Multiples of 2^-9; nearbyint rounds half to even, and 8 * 2^-9 = 2^-6 is code 0x08.
    return sign | (uint8_t)__builtin_nearbyintf(fp32_from_bits(abs) * 512.0f);
  }
  // Normal: keep 3 mantissa bits, rounding to nearest even on the dropped 20 bits. A carry into
  // the exponent is the correct next binade; 448 < x < 464 rounds to 448, larger ones saturated above.
  const uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1);
  const uint32_t code = (r >> 20) - ((127u - 7u) << 3);
  return sign | (uint8_t)(code > 0x7e ? 0x7e : code);
}

float fp8_e4m3_decode(uint8_t c) {
  const int e = (c >> 3) & 0xf, m = c & 7;
  float v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp((float)m, -9);
  else v = std::ldexp(1.0f + m / 8.0f, e - 7);
  return (c & 0x80) ? -v : v;
}

uint16_t bf16_encode(float x) {
  const uint32_t b = fp32_to_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40);  // quiet NaN
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

namespace {

// amax over the finite values of one head (non-finite ones are encoded on their own: NaN stays
// NaN, infinities saturate).
float head_amax(const float* x, int n) {
  float a = 0;
  for (int i = 0; i < n; ++i)
    if (std::isfinite(x[i])) a = std::max(a, std::fabs(x[i]));
  return a;
}

}  // namespace

void kv_encode_row(KvType t, const float* x, int n_heads, int hd, uint8_t* dst) {
  const int n = n_heads * hd;
  switch (t) {
    case KvType::kF32: std::memcpy(dst, x, (size_t)n * 4); return;
    case KvType::kBF16:
      for (int i = 0; i < n; ++i) {
        const uint16_t h = bf16_encode(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvType::kFP8:
    case KvType::kInt8: {
      const bool fp8 = t == KvType::kFP8;
      const float qmax = fp8 ? kFp8E4M3Max : 127.0f;
      // The lab's broken-quantizer fault stores a wrong scale (tests must catch it).
      const float wrong = fault::kv_scale_factor();
      for (int h = 0; h < n_heads; ++h) {
        const float* xh = x + h * hd;
        const float amax = head_amax(xh, hd);
        const float scale = amax / qmax;
        const float inv = amax > 0 ? qmax / amax : 0.0f;
        uint8_t* q = dst + h * hd;
        for (int i = 0; i < hd; ++i) {
          const float v = xh[i] * inv;
          if (fp8) {
            // v is NaN for a NaN input, and for an infinity in a head without a finite non-zero
            // value (inf * 0): that one saturates like any other infinity.
            q[i] = fp8_e4m3_encode(std::isnan(xh[i]) ? NAN : std::isnan(v) ? std::copysign(kFp8E4M3Max, xh[i]) : v);
          } else {
            const float c = std::isnan(v) ? 0.0f : std::fmin(127.0f, std::fmax(-127.0f, v));
            q[i] = (uint8_t)(int8_t)__builtin_nearbyintf(c);
          }
        }
        const float stored = scale * wrong;
        std::memcpy(dst + (size_t)n + 4 * h, &stored, 4);
      }
      return;
    }
  }
}

void kv_decode_row(KvType t, const uint8_t* src, int n_heads, int hd, float* out) {
  const int n = n_heads * hd;
  switch (t) {
    case KvType::kF32: std::memcpy(out, src, (size_t)n * 4); return;
    case KvType::kBF16:
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
      }
      return;
    case KvType::kFP8:
    case KvType::kInt8:
      for (int h = 0; h < n_heads; ++h) {
        float scale;
        std::memcpy(&scale, src + (size_t)n + 4 * h, 4);
        for (int i = 0; i < hd; ++i) {
          const uint8_t c = src[h * hd + i];
          out[h * hd + i] = (t == KvType::kFP8 ? fp8_e4m3_decode(c) : (float)(int8_t)c) * scale;
        }
      }
      return;
  }
}

bool KvSpec::uniform() const {
  for (size_t l = 0; l < k.size(); ++l)
    if (k[l] != k[0] || v[l] != v[0]) return false;
  return true;
}

std::string KvSpec::describe() const {
  if (k.empty()) return "f32";
  if (uniform()) {
    if (k[0] == v[0]) return kv_type_name(k[0]);
    return std::string("k=") + kv_type_name(k[0]) + ",v=" + kv_type_name(v[0]);
  }
  // Runs of layers with the same (K, V) pair.
  std::string s;
  for (size_t l = 0; l < k.size();) {
    size_t e = l;
    while (e + 1 < k.size() && k[e + 1] == k[l] && v[e + 1] == v[l]) ++e;
    if (!s.empty()) s += ",";
    // Written as --kv-layers reads it: one range for both sides, or one entry per side.
    const std::string range = std::to_string(l) + "-" + std::to_string(e) + ":";
    s += k[l] == v[l] ? range + kv_type_name(k[l])
                      : range + "k=" + kv_type_name(k[l]) + "," + range + "v=" + kv_type_name(v[l]);
    l = e + 1;
  }
  return s;
}

size_t KvSpec::bytes_per_token(int n_heads, int hd) const {
  size_t n = 0;
  for (size_t l = 0; l < k.size(); ++l) n += kv_row_bytes(k[l], n_heads, hd) + kv_row_bytes(v[l], n_heads, hd);
  return n;
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t p = 0;
  while (true) {
    const size_t q = s.find(sep, p);
    out.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return out;
}

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 7) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

const char* kTypes = "f32, bf16, fp8, int8";

// "TYPE", "k=TYPE" or "v=TYPE": sets *k and/or *v.
Status parse_side_type(const std::string& item, const std::string& flag, bool* set_k, bool* set_v, KvType* t) {
  std::string name = item;
  *set_k = *set_v = true;
  if (item.rfind("k=", 0) == 0) { *set_v = false; name = item.substr(2); }
  else if (item.rfind("v=", 0) == 0) { *set_k = false; name = item.substr(2); }
  if (!parse_kv_type(name, t))
    return usage_error("flag " + flag + ": unknown KV type '" + name + "' (known: " + kTypes + ")");
  return Ok{};
}

}  // namespace

Status parse_layer_range(const std::string& s, int n_layer, int* lo, int* hi) {
  const size_t dash = s.find('-');
  bool ok;
  if (dash == std::string::npos) {
    ok = parse_int(s, lo);
    *hi = *lo;
  } else {
    const std::string a = s.substr(0, dash), b = s.substr(dash + 1);
    ok = !(a.empty() && b.empty());
    if (ok && a.empty()) *lo = 0;
    else if (ok) ok = parse_int(a, lo);
    if (ok && b.empty()) *hi = n_layer - 1;
    else if (ok) ok = parse_int(b, hi);
  }
  if (!ok) return usage_error("'" + s + "' is not a layer range (N, N-M, N- or -M)");
  if (*lo > *hi) return usage_error("layer range '" + s + "' is empty (start after end)");
  if (*hi >= n_layer)
    return usage_error("layer range '" + s + "' exceeds the model's " + std::to_string(n_layer) + " layers (0-" +
                       std::to_string(n_layer - 1) + ")");
  return Ok{};
}

Expected<KvSpec> parse_kv_spec(const std::string& kv, const std::string& kv_layers, int n_layer) {
  KvSpec spec;
  KvType k = KvType::kF32, v = KvType::kF32;
  if (!kv.empty()) {
    const auto items = split(kv, ',');
    bool seen_k = false, seen_v = false;
    for (const auto& it : items) {
      bool sk, sv;
      KvType t;
      if (Status s = parse_side_type(it, "--kv", &sk, &sv, &t); !s) return s.error();
      if ((sk && seen_k) || (sv && seen_v))
        return usage_error("flag --kv: '" + kv + "' gives the type of " + (sk && seen_k ? "K" : "V") + " twice");
      if (sk) { k = t; seen_k = true; }
      if (sv) { v = t; seen_v = true; }
    }
  }
  spec.k.assign(n_layer, k);
  spec.v.assign(n_layer, v);
  if (kv_layers.empty()) return spec;
  std::vector<int> owner_k(n_layer, -1), owner_v(n_layer, -1);
  const auto items = split(kv_layers, ',');
  for (int i = 0; i < (int)items.size(); ++i) {
    const std::string& it = items[i];
    const size_t colon = it.find(':');
    if (colon == std::string::npos)
      return usage_error("flag --kv-layers: '" + it + "' is not RANGE:TYPE (e.g. 0-3:bf16,4-:fp8)");
    int lo, hi;
    if (Status s = parse_layer_range(it.substr(0, colon), n_layer, &lo, &hi); !s)
      return usage_error("flag --kv-layers: " + s.error().message);
    bool sk, sv;
    KvType t;
    if (Status s = parse_side_type(it.substr(colon + 1), "--kv-layers", &sk, &sv, &t); !s) return s.error();
    for (int l = lo; l <= hi; ++l) {
      for (int sv_side = 0; sv_side < 2; ++sv_side) {
        if (!(sv_side ? sv : sk)) continue;
        std::vector<int>& owner = sv_side ? owner_v : owner_k;
        if (owner[l] >= 0)
          return usage_error("flag --kv-layers: '" + it + "' overlaps '" + items[owner[l]] + "' at layer " +
                             std::to_string(l));
        owner[l] = i;
        (sv_side ? spec.v : spec.k)[l] = t;
      }
    }
  }
  return spec;
}

}  // namespace ouro
