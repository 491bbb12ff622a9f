// Element-wise and normalisation ops, RoPE and attention: plain functions over plain memory.
// The caller splits work across threads; nothing here allocates or spawns threads.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "kernels/kv_types.h"

namespace ouro {

// y = x * rsqrt(mean(x^2) + eps) * w, n elements.
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);

// Rotates adjacent pairs (2i, 2i+1) of each of n_heads heads of size head_dim by pos * inv_freq[i]
// (llama.cpp's "normal" RoPE, which GGUF llama files are converted for).
void rope_inplace(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq);
// rope_inplace in two steps, so a forward pass takes a position's angles once for all its layers
// and for q and k: cs[i], sn[i] (i < half) = cos, sin of pos * inv_freq[i], computed in double and
// rounded once; then the rotation by them. The two give rope_inplace's bits.
void rope_angles(int64_t pos, const float* inv_freq, int half, float* cs, float* sn);
void rope_rotate(float* x, int n_heads, int head_dim, const float* cs, const float* sn);

// y[i] = silu(g[i]) * u[i] = g[i] * sigmoid(g[i]) * u[i], 8 values at a time with the polynomial exp
// softmax uses (of -|g|, relative error ~2e-7); the last n % 8 go through the same 8-wide code, so
// a value's result does not depend on where it sits. Same bits on every ISA.
void swiglu(const float* g, const float* u, float* y, int64_t n);

// In-place numerically stable softmax over n values; m_out and l_out (when given) receive the
// largest value and the sum of exp(x - largest) it divided by.
void softmax_inplace(float* x, int64_t n, float* m_out = nullptr, float* l_out = nullptr);
// One block of keys of an online softmax, for one query's raw scores s[0, np) of which the first
// cnt (>= 1) are its keys and the rest masked: s becomes the weights exp(scale * s - m') (0 past
// cnt), with m' = max(*m, the block's largest scaled score); *m becomes m' and *l the running sum
// *l * a + sum of the weights, where a = exp(old *m - m') is returned: the factor the row's output so
// far is scaled by (0 for the first block, *m = -inf). Every weight is the same polynomial exp
// whatever cnt and np, so a key's weight has the same bits in a block of any width.
float online_softmax_block(float* s, int cnt, int np, float scale, float* m, float* l);

// Causal attention of one query head over keys/values at positions [0, n_keys):
//   out = softmax(q . k_p * scale) . v_p
// keys and values are rows of head_dim floats, `stride` floats apart. scores: n_keys floats of scratch.
void attend_one(const float* q, const float* k, const float* v, int64_t stride, int64_t n_keys, int head_dim,
                float scale, float* scores, float* out);

// The same through a block table (paged KV cache) over rows of any KV type (kernels/kv_types.h):
// position p's key is row p % block_size of block blocks[p / block_size]. A side (K or V) names
// its layer's storage: row r of block b starts at base + b * block_bytes + r * row_bytes; the head
// read starts data_off bytes into the row and, for scaled types, its f32 scale scale_off bytes in.
// Rows are dequantized in registers (no copy). With f32 rows in one block the arithmetic, and so
// the result, is exactly attend_one's.
struct KvSide {
  const uint8_t* base;
  KvType type;
  int64_t row_bytes, block_bytes, data_off, scale_off;
};
struct KvPages {
  const int* blocks;
  int64_t block_size;
  KvSide k, v;
};
void attend_paged(const float* q, const KvPages& pages, int64_t n_keys, int head_dim, float scale, float* scores,
                  float* out);

// Attention of the g_heads query heads of each of n_tok tokens that share one key/value head
// (grouped-query attention; MLA's heads over the latent rows), token t over its first n_keys[t]
// positions (a prompt's tokens under the causal mask): each cached row is read once for all heads
// and tokens, which then find it in L1/L2, instead of once per head and token. Head g of token t
// has its query at q + (t * g_heads + g) * q_stride and its output, the first hd_v values of the
// weighted value rows (hd_v <= hd), at out + (t * g_heads + g) * out_stride; scores: n_tok *
// g_heads * max(n_keys) floats of scratch. Per (token, head) the arithmetic, and so every bit of the
// output, is attend_paged's (hd_v a multiple of 8 whenever hd is), whichever isa: kAvx512 (on a host
// that has it) runs both passes in 512-bit registers, four heads at a time (attend_avx512.h); any
// other isa in 256-bit ones, one or two heads at a time.
// p_begin > 0: every token attends over positions [p_begin, n_keys[t]) only (one chunk of a longer
// attention; scores then hold max(n_keys) - p_begin per query), and the arithmetic is the p_begin = 0
// arithmetic of those rows as if they were the whole cache. stats (2 floats per query, or null):
// the softmax's largest scaled score m and its sum l, so chunks merge exactly as one softmax would
// (merge_attention_chunks); a query with no keys in the range gets m = -inf, l = 0 and a zero output.
// The ranged form needs hd and hd_v multiples of 8.
void attend_paged_tokens(const float* q, int n_tok, int g_heads, int64_t q_stride, const KvPages& pages,
                         const int64_t* n_keys, int hd, int hd_v, float scale, float* scores, float* out,
                         int64_t out_stride, Isa isa, int64_t p_begin = 0, float* stats = nullptr);

// Merges n_chunks partial attentions of one query head over consecutive key ranges (each normalized
// by its own softmax, with its stats {m, l} from attend_paged_tokens) into the attention over all
// of them: out = sum_c l_c e^(m_c - M) o_c / sum_c l_c e^(m_c - M), M = max_c m_c, summed in chunk
// order. parts[c * part_stride + v] is chunk c's output, stats[c * stats_stride + {0, 1}] its m, l.
void merge_attention_chunks(const float* parts, int64_t part_stride, const float* stats, int64_t stats_stride,
                            int n_chunks, int n, float* out);

float dot_f32(const float* a, const float* b, int64_t n);

// Bytes and FLOPs of attend_one over n_keys keys (scores, softmax, weighted sum).
// y[j * ldy + c] = sum over l < k of x[j * ldx + l] * w[l * m + c], for rows j < n and columns
// c < m (w row-major [k][m]). Each sum is one chain of fused multiply-adds in l's order from zero,
// so every bit is the same on every isa and however the rows are grouped or split: MLA's
// decompressing form multiplies every cached key by it once per prompt chunk, and a key's values
// must not depend on which chunk decompressed it (kernels/rows_matrix.cpp).
void rows_times_matrix(const float* x, int64_t n, int64_t ldx, int k, const float* w, int64_t m, float* y,
                       int64_t ldy, Isa isa);

inline double attend_one_flops(int64_t n_keys, int head_dim) { return 4.0 * n_keys * head_dim + 5.0 * n_keys; }
inline double attend_one_bytes(int64_t n_keys, int head_dim) { return 8.0 * n_keys * head_dim; }

}  // namespace ouro
