// `ouro microbench`: one kernel or model op, timed, plus its output on seeded inputs, so the lab can
// compare a baseline build with a candidate build both for speed and for correctness.
//
// A registry maps each kernel name to the shape flags it takes and a factory. A Bench owns its
// inputs (drawn from std::mt19937_64(seed) with our own float conversion, so a seed gives the same
// inputs in every build and with every standard library), its working buffers and, for matmul, a
// thread pool and the chosen kernel family. Costs come from the kernels' own cost functions
// (matmul_cost, attend_one_bytes/flops) so traces, benches and the lab agree on bytes and FLOPs.
#pragma once
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/status.h"
#include "kernels/matmul.h"

namespace ouro::microbench {

// Largest number of elements any one input or output array may have (weights included).
constexpr int64_t kMaxElements = int64_t(1) << 28;

struct ShapeFlag {
  const char* flag;   // "--head-dim"
  const char* key;    // "head_dim": the key in Setup::shape and in the JSON params
  long long def;      // default when not given; kRequired: the flag must be given
  long long lo, hi;   // accepted range (checked by the CLI; products are checked by the factory)
};
constexpr long long kRequired = -1;

struct Setup {
  std::string name;
  std::map<std::string, int64_t> shape;  // every shape key of the kernel
  std::string type;                      // matmul: weight type (q4_0 q8_0 q4_k q4_1 f32 f16)
  std::string model, tensor;             // matmul on a GGUF tensor instead of synthetic weights
  bool w8a8 = false;                     // matmul: weights requantized to int8 per row (kW8), per-token activations
  uint64_t seed = 0;
  int threads = 1;
  Isa isa = Isa::kScalar;                // resolved (never "auto")
};

struct Array {
  std::string name;
  std::vector<size_t> shape;
  std::vector<float> data;
};

class Bench {
 public:
  virtual ~Bench() = default;
  // One op on the working buffers: what is timed. Calls fault::at_op(name) first.
  virtual void run() = 0;
  // The op's output on the seed's inputs (working buffers reset first where the op is in place).
  virtual std::vector<float> output() = 0;
  virtual std::vector<size_t> output_shape() const = 0;
  virtual OpCost cost() const = 0;
  // The inputs as float32 arrays (quantized weights dequantized by the reference dequantizer), for
  // an independent recomputation of the output.
  virtual std::vector<Array> inputs() const = 0;
  // Shape, type and the kernel's fixed constants (eps, scale, rope base) for the JSON record.
  nlohmann::json params;
};

struct KernelSpec {
  const char* name;
  std::vector<ShapeFlag> flags;  // the shape flags it takes (others are usage errors)
};
const std::vector<KernelSpec>& kernels();
const KernelSpec* find_kernel(const std::string& name);
// The union of every kernel's shape flags (for the flag parser and --help).
std::vector<std::string> all_shape_flags();

// Builds the inputs and buffers. Errors are usage errors naming the flag (bad type, --cols not a
// multiple of the block size, too many elements, unknown tensor) or the file's open error.
Expected<std::unique_ptr<Bench>> make_bench(const Setup& s);

struct TimingOptions {
  long long warmup = -1;     // calls before timing; -1: as many as fit in 20 ms (at least one)
  long long iters = 0;       // calls timed in all; 0: until min_time_ms has passed
  double min_time_ms = 200;  // and at least kMinSamples samples
  // Called right before the first timed call and right after the last (the lab's markers).
  std::function<void()> on_start, on_end;
};
constexpr int kMinSamples = 5;

struct Timing {
  std::vector<double> samples_ns;  // ns per op of each sample (a batch of calls)
  long long iters = 0;             // calls timed in all
  long long batch = 1;             // calls per sample (the last sample may hold more)
  double median_ns = 0;
  double total_ns = 0;             // all timed calls together
};
Timing measure(Bench& b, const TimingOptions& o);

// Writes the output of `b` to `path` as float32 .npy. Under OURO_FAULT=memo:DIR (a simulated
// cheating candidate) DIR/<name>-<seed>.npy is copied instead when it exists, and any other seed
// gets zeros of the right shape.
Status write_output(Bench& b, const Setup& s, const std::string& path);
// Writes each input as DIR/<input>.npy (creating DIR).
Status dump_inputs(const Bench& b, const std::string& dir);

}  // namespace ouro::microbench
