// Matrix multiplication Y[t, r] = sum_k W[r, k] * X[t, k] for the engine's weight formats.
//
// Weights are repacked once at load time into an integer layout that is an exact re-encoding of
// the GGUF blocks (no precision is lost), or kept as they are and dequantized row by row:
//   kQ4  (from Q4_0, Q4_1, Q4_K): value = d[b] * u + c[b], u in 0..15, per 32-element block b.
//   kQ8  (from Q8_0): value = d[b] * s, s int8, stored as u = s ^ 0x80 = s + 128 so that the
//        unsigned-by-signed VNNI dot applies; the AVX-512 kernel takes the offset out in int32
//        (each block's dot starts at -128 * sum(q)), the AVX2 and scalar ones compute signed.
//   kRows (F32, F16, BF16, Q6_K, ...): rows dequantized to float on the fly (slow, exact).
// Decode reads every weight once per token, so the layout is one linear stream: rows are grouped
// (zero-padded) and each group is a sequence of steps of 64 columns (two 32-element blocks):
//   kQ4 (groups of 16 rows) step: for block 2j then 2j+1, 4 vectors of 64 bytes, vector v's lane i
//             (bytes 4i..4i+3) holding row i's values 8v..8v+3 in the low nibbles and 8v+4..8v+7
//             in the high ones; then d[16], c[16] of block 2j and d[16], c[16] of block 2j+1.
//   kQ8 (groups of 16 rows) step: for block 2j then 2j+1, 8 vectors of 64 bytes, vector v's lane i
//             (bytes 4i..4i+3) holding row i's values 4v..4v+3 of the block; then d[16] of block
//             2j and d[16] of block 2j+1 (rows 0..15). A token's 4 activation bytes broadcast
//             against vector v give 16 rows' partial dots, so 8 vpdpbusd give 16 whole-block dots.
// Scales are fp16 when that is exact (Q4_0, Q4_1, Q8_0 store fp16) and f32 otherwise (Q4_K's
// d*scale products).
//   kW8  (W8A8, any GGUF type, docs/quantization.md): value = rscale[r] * s, s int8 in -127..127,
//        one scale per output row (symmetric, amax / 127), stored signed in groups of 4 rows,
//        each row's 64 values of a step contiguous (256 bytes a step), no per-block scales;
//        rsum[r] = sum of row r's s (the VNNI offset correction).
//        Its activations are quantized per token (one scale over the whole row), not per block.
// Activations are quantized per token in blocks of 32 to int8 (d = amax/127), with
// s[b] = d[b] * sum(q) kept for the c-term, as llama.cpp does for its Q8_1 activations, and the
// integer sum(q) for kQ8's offset correction.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cpu.h"
#include "kernels/types.h"

namespace ouro {

class ThreadPool;

// 64-byte aligned, zero-initialised buffer.
struct AlignedFree { void operator()(void* p) const; };
using AlignedPtr = std::unique_ptr<uint8_t[], AlignedFree>;
AlignedPtr aligned_alloc_zero(size_t bytes);

enum class PackedKind { kQ4, kQ8, kRows, kW8 };

struct PackedMatrix {
  PackedKind kind = PackedKind::kRows;
  bool f32_scales = false;
  int64_t rows = 0, cols = 0;
  int64_t cols_pad = 0;   // cols rounded up to 64
  int64_t nb = 0;         // blocks of 32 per row (of cols_pad)
  int64_t nsteps = 0;     // steps of 64 columns
  int64_t group_rows = 4; // rows per group: 16 for kQ4 and kQ8, 4 for kW8
  int64_t groups = 0;     // groups of group_rows rows
  size_t step_bytes = 0, group_bytes = 0;
  AlignedPtr q;
  std::vector<float> rscale;   // kW8: per row (groups * 4, padding rows 0)
  std::vector<int32_t> rsum;   // kW8: per row
  // kRows: the original data.
  GgmlType src_type = GgmlType::kF32;
  const uint8_t* src = nullptr;
  size_t src_row_bytes = 0;

  const uint8_t* step(int64_t group, int64_t j) const { return q.get() + group * group_bytes + j * step_bytes; }
  size_t value_bytes() const { return kind == PackedKind::kQ4 ? 512 : kind == PackedKind::kQ8 ? 1024 : 256; }  // per step
  // Accessors (slow; for references, tests and the embedding lookup).
  int raw(int64_t r, int64_t k) const;   // u in 0..15 (kQ4) or s in -128..127 (kQ8, kW8)
  float d(int64_t r, int64_t b) const;   // kW8: the row's scale
  float c(int64_t r, int64_t b) const;   // kQ4's c-term; 0 for the other kinds
  float value(int64_t r, int64_t k) const;
  size_t bytes() const;  // bytes read by one full pass over the matrix
};

// Repacks a GGUF tensor of shape [cols, rows] (ne order). Types Q4_0, Q4_1, Q4_K, Q8_0 become
// kQ4/kQ8; others become kRows pointing at `data` (which must then outlive the matrix).
// Kernels compute whole groups; a row range [r0, r1) may start or end inside a group.
PackedMatrix pack_matrix(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows);
// W8A8: dequantizes each row of any supported type and requantizes it to int8 per row (kW8).
// `scale_factor` multiplies the stored scales (1; the lab's badscale fault breaks it on purpose).
// col_scale (cols values, or nullptr) multiplies column k before quantizing (SmoothQuant).
PackedMatrix pack_matrix_w8a8(GgmlType type, const uint8_t* data, int64_t cols, int64_t rows, float scale_factor = 1.0f,
                              const float* col_scale = nullptr);

// Quantized activations for T tokens of `cols` elements.
// Per block (kQ4, kQ8): d and s per 32-block. Per token (kW8): td[t] = amax / 127 of the whole row.
struct QuantActs {
  int64_t T = 0, cols = 0, cols_pad = 0, nb = 0;
  bool per_token = false;
  std::vector<int8_t> qs;     // T * cols_pad
  std::vector<float> d, s;    // T * nb
  std::vector<int32_t> qsum;  // T * nb: sum(q) of each block
  std::vector<float> td;      // T (per_token)
  const float* x = nullptr;   // the float activations (for kRows), row stride = cols
  void resize(int64_t T, int64_t cols, bool per_token = false);
};

// Quantizes tokens [t0, t1) of X (row stride cols) into qa (qa.resize done by the caller).
void quantize_acts(const float* X, int64_t t0, int64_t t1, QuantActs& qa);

// A kernel family: computes rows [r0, r1) of Y (row stride ldy) for all tokens of qa.
struct MatmulKernels {
  void (*gemm_q4)(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy);
  void (*gemm_q8)(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy);
  void (*gemm_w8)(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy);
};
const MatmulKernels& matmul_kernels(Isa isa);
const MatmulKernels& matmul_kernels_scalar();
const MatmulKernels& matmul_kernels_avx2();
const MatmulKernels& matmul_kernels_avx512();

// Rows [r0, r1) of Y for any packed kind, on the calling thread.
void gemm_rows(const MatmulKernels& k, const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1,
               float* Y, int64_t ldy);

struct MatmulJob {
  const PackedMatrix* W;
  float* Y;
  int64_t ldy;
};
// Whether products with W need per-token activations (kW8) rather than per-block ones.
inline bool wants_per_token(const PackedMatrix& W) { return W.kind == PackedKind::kW8; }

// Runs every job (all with W->cols == qa.cols, all of one activation kind) in one parallel region, rows split across threads.
// `region` names the region in traces (a string literal).
void matmul_parallel(const MatmulKernels& k, ThreadPool& pool, const QuantActs& qa, const MatmulJob* jobs, int n_jobs,
                     const char* region = "matmul");

// What one product of W with T tokens costs: bytes read and written (weights once, activations
// in, results out) and FLOPs (2 per multiply-add). Used by traces and the roofline.
struct OpCost {
  double bytes = 0, flops = 0;
  OpCost& operator+=(const OpCost& o) { bytes += o.bytes; flops += o.flops; return *this; }
};
OpCost matmul_cost(const PackedMatrix& W, int64_t T);

}  // namespace ouro
