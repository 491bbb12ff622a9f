#include "cli/common.h"

#include "core/fault.h"
#include "core/sha256.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ouro_version.h"
#include "trace/trace.h"

namespace ouro {

const std::vector<std::string> kCommonValueFlags = {"--model", "-m",      "--threads",   "-t",         "--ctx",
                                                   "--isa",   "--kv",    "--kv-layers", "--weights",  "--w8a8-ops",
                                                   "--w8a8-layers", "--w8a8-smooth", "--w8a8-calib"};
const std::vector<std::string> kTraceFlags = {"--trace", "--trace-buffer"};

Status start_trace(const Args& a) {
  auto cap = a.integer("--trace-buffer", 1000000, 16, 100000000);
  if (!cap) return cap.error();
  if (a.has("--trace-buffer") && !a.has("--trace")) return usage_error("--trace-buffer needs --trace FILE");
  if (!a.has("--trace")) return Ok{};
  if (a.str("--trace").empty()) return usage_error("flag --trace needs a file name");
  trace::set_thread_name("main");
  trace::enable((size_t)*cap);
  return Ok{};
}

Status finish_trace(const Args& a, const Engine& e) {
  if (!a.has("--trace")) return Ok{};
  trace::disable();
  const LaunchConfig& c = e.config();
  nlohmann::json other = {{"commit", OURO_COMMIT},
                          {"model", c.model_path},
                          {"threads", c.threads},
                          {"ctx", c.n_ctx},
                          {"isa", isa_name(c.isa)},
                          {"max_batch", c.max_batch},
                          {"weights", e.model().weights_desc()},
                          {"kv", e.kv_spec().describe()},
                          {"cpu", cpu_features().model_name},
                          {"cpu_features", cpu_features().flags_string()}};
  return trace::write_chrome_json(a.str("--trace"), other.dump());
}

const std::vector<std::string> kSamplingFlags = {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                                 "--repeat-last-n", "--seed"};

std::string find_repo_file(const std::string& rel) {
  if (std::filesystem::exists(rel)) return rel;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto p = exe.parent_path().parent_path() / rel;
    if (std::filesystem::exists(p)) return p.string();
  }
  return rel;
}

static std::string default_model_path() {
  const char* env = std::getenv("OURO_MODEL");
  if (env && *env) return env;
  return find_repo_file("models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

Expected<LaunchConfig> launch_config_from(const Args& a) {
  LaunchConfig c;
  c.model_path = a.has("--model") ? a.str("--model") : (a.has("-m") ? a.str("-m") : default_model_path());
  auto th = a.integer(a.has("-t") ? "-t" : "--threads", 0, 1, 1024);
  if (!th) return th.error();
  c.threads = (int)*th;
  auto ctx = a.integer("--ctx", 0, 16, 1 << 20);
  if (!ctx) return ctx.error();
  c.n_ctx = (int)*ctx;
  if (const std::string bad = isa_env_problem(); !bad.empty()) return usage_error(bad);
  if (!parse_isa(a.str("--isa", "auto"), &c.isa)) return usage_error("flag --isa: '" + a.str("--isa") + "' is not one of auto, avx512, avx2, scalar");
  for (const char* f : {"--kv", "--kv-layers", "--weights", "--w8a8-ops", "--w8a8-layers"})
    if (a.has(f) && a.str(f).empty()) return usage_error(std::string("flag ") + f + " needs a value");
  c.kv = a.str("--kv", "");
  c.kv_layers = a.str("--kv-layers", "");
  c.weights.mode = a.str("--weights", "native");
  c.weights.ops = a.str("--w8a8-ops", "");
  c.weights.layers = a.str("--w8a8-layers", "");
  auto alpha = a.number("--w8a8-smooth", 0, 0, 1);
  if (!alpha) return alpha.error();
  c.weights.smooth_alpha = (float)*alpha;
  if (a.has("--w8a8-calib") && c.weights.smooth_alpha == 0) return usage_error("flag --w8a8-calib needs --w8a8-smooth ALPHA");
  c.weights.smooth_calib = a.has("--w8a8-calib") ? a.str("--w8a8-calib") : find_repo_file("data/eval/calib.txt");
  return c;
}

Expected<std::unique_ptr<Engine>> load_engine(const Args& a) {
  auto c = launch_config_from(a);
  if (!c) return c.error();
  return Engine::load(*c);
}

int report(const Error& e) {
  std::fprintf(stderr, "ouro: %s\n", e.message.c_str());
  return e.kind == ErrorKind::kUsage ? 2 : 1;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Expected<std::vector<int>> parse_id_list(const std::string& s) {
  std::vector<int> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string part = s.substr(i, j - i);
    char* end = nullptr;
    long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v > (1L << 30)) return usage_error("'" + part + "' is not a token id");
    ids.push_back((int)v);
    i = j + 1;
  }
  return ids;
}

Expected<SamplingParams> sampling_from(const Args& a) {
  SamplingParams p;
  auto temp = a.number("--temp", 0.8, 0, 100);
  auto top_k = a.integer("--top-k", 40, 0, 1 << 30);
  auto top_p = a.number("--top-p", 0.95, 0, 1);
  auto min_p = a.number("--min-p", 0.05, 0, 1);
  auto rp = a.number("--repeat-penalty", 1.0, 0, 10);
  auto rn = a.integer("--repeat-last-n", 64, 0, 1 << 20);
  auto seed = a.integer("--seed", 0, 0, (1LL << 62));
  for (const Error* e : {temp ? nullptr : &temp.error(), top_k ? nullptr : &top_k.error(), top_p ? nullptr : &top_p.error(),
                         min_p ? nullptr : &min_p.error(), rp ? nullptr : &rp.error(), rn ? nullptr : &rn.error(),
                         seed ? nullptr : &seed.error()})
    if (e) return *e;
  p.temperature = (float)*temp;
  p.top_k = (int)*top_k;
  p.top_p = (float)*top_p;
  p.min_p = (float)*min_p;
  p.repeat_penalty = (float)*rp;
  p.repeat_last_n = (int)*rn;
  p.seed = (uint64_t)*seed;
  if (Status s = p.validate(); !s) return s.error();
  return p;
}

}  // namespace ouro

namespace ouro {
bool wants_help(int argc, char** argv) {
  for (int i = 0; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  return false;
}
std::string memo_stem(const std::vector<int>& ids) {
  if (fault::config().memo_dir.empty()) return "";
  std::string key;
  for (int id : ids) key += std::to_string(id) + ",";
  return fault::config().memo_dir + "/" + sha256_hex(key).substr(0, 16);
}

}  // namespace ouro
