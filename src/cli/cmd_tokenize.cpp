// ouro tokenize / ouro detokenize
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "model/gguf.h"
#include "tokenizer/unicode.h"

namespace ouro {

namespace {

const char* kTokenizeUsage =
    "usage: ouro tokenize TEXT [--json] [--no-special]\n"
    "       ouro tokenize --batch FILE [--no-special]\n"
    "  --json          print {\"ids\": [...], \"pieces\": [...]}\n"
    "  --no-special    treat special-token text as plain text\n"
    "  --batch FILE    one hex-encoded input per line; prints one JSON array of ids per line\n"
    "  -m, --model PATH\n";

const char* kDetokenizeUsage = "usage: ouro detokenize ID [ID...]   (ids may also be comma-separated)\n  -m, --model PATH\n";

// Loads only what tokenizing needs (no weights are packed).
Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const Args& a, std::unique_ptr<GgufFile>* file) {
  auto cfg = launch_config_from(a);
  if (!cfg) return cfg.error();
  auto f = GgufFile::open(cfg->model_path);
  if (!f) return f.error();
  *file = std::move(*f);
  return Tokenizer::from_gguf(**file);
}

Expected<std::string> unhex(const std::string& line, size_t lineno) {
  if (line.size() % 2) return usage_error("--batch line " + std::to_string(lineno) + ": odd number of hex digits");
  std::string out;
  for (size_t i = 0; i < line.size(); i += 2) {
    auto nib = [](char c) { return std::isxdigit((unsigned char)c) ? (std::isdigit((unsigned char)c) ? c - '0' : (std::tolower(c) - 'a' + 10)) : -1; };
    const int h = nib(line[i]), l = nib(line[i + 1]);
    if (h < 0 || l < 0) return usage_error("--batch line " + std::to_string(lineno) + ": not hex");
    out += (char)(h * 16 + l);
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kTokenizeUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, concat(kCommonValueFlags, {"--batch"}), {"--json", "--no-special"}); !s) return report(s.error());
  const bool special = !a.has("--no-special");
  if (a.has("--batch") == !a.positional().empty() || a.positional().size() > 1)
    return report(usage_error("tokenize takes exactly one TEXT argument or --batch FILE"));
  std::ifstream in;
  if (a.has("--batch")) {
    in.open(a.str("--batch"));
    if (!in) return report(runtime_error(a.str("--batch") + ": cannot open"));
  }
  std::unique_ptr<GgufFile> file;
  auto tok = load_tokenizer(a, &file);
  if (!tok) return report(tok.error());
  const Tokenizer& t = **tok;
  if (a.has("--batch")) {
    std::string line, out;
    size_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      auto text = unhex(line, lineno);
      if (!text) return report(text.error());
      out += nlohmann::json(t.encode(*text, special)).dump() + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const std::vector<int> ids = t.encode(a.positional()[0], special);
  if (a.has("--json")) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int id : ids) pieces.push_back(utf8_sanitize(t.token_bytes(id)));
    std::puts(nlohmann::json{{"ids", ids}, {"pieces", pieces}}.dump().c_str());
  } else {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
    std::puts(s.c_str());
  }
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  if (wants_help(argc, argv)) { std::fputs(kDetokenizeUsage, stdout); return 0; }
  Args a;
  if (Status s = a.parse(argc, argv, kCommonValueFlags, {}); !s) return report(s.error());
  std::vector<int> ids;
  for (const auto& p : a.positional()) {
    auto v = parse_id_list(p);
    if (!v) return report(v.error());
    ids.insert(ids.end(), v->begin(), v->end());
  }
  std::unique_ptr<GgufFile> file;
  auto tok = load_tokenizer(a, &file);
  if (!tok) return report(tok.error());
  for (int id : ids)
    if (id >= (*tok)->n_vocab()) return report(usage_error("token id " + std::to_string(id) + " is out of range"));
  const std::string s = (*tok)->decode(ids);
  std::fwrite(s.data(), 1, s.size(), stdout);
  return 0;
}

}  // namespace ouro
