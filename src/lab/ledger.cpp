// The ledger file: appending under a lock, reading, verifying the hash chain and the committed
// prefix, looking records up, and printing them. Chain rule and tolerance rules: ledger.h.
#include "lab/ledger.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/sha256.h"

extern char** environ;

namespace ouro::lab {

using nlohmann::json;
namespace fs = std::filesystem;

// ---- tolerant access --------------------------------------------------------------------------

const json* jobj(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

const json* jarr(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? &*it : nullptr;
}

std::optional<double> jnum(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string safe_dump(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string jstr(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number() || it->is_boolean()) return safe_dump(*it);
  return "";
}

std::vector<double> jnums(const json& j, const char* key) {
  std::vector<double> v;
  if (const json* a = jarr(j, key))
    for (const json& x : *a)
      if (x.is_number()) v.push_back(x.get<double>());
  return v;
}

std::string headline_metric(const json& rec) {
  const json* stats = jobj(rec, "stats");
  if (!stats || stats->empty()) return "";
  const std::string h = jstr(rec, "headline");
  if (!h.empty() && jobj(*stats, h.c_str())) return h;
  for (const char* m : {"decode_tok_s", "prefill_tok_s", "ns_per_op"})
    if (jobj(*stats, m)) return m;
  for (auto it = stats->begin(); it != stats->end(); ++it)
    if (it->is_object()) return it.key();
  return "";
}

std::string interval_name(const json& st, bool long_form) {
  if (auto level = jnum(st, "ci_level"); level && *level > 0 && *level < 1) {
    char b[32];
    std::snprintf(b, sizeof b, "%g%%", 100 * *level);
    return std::string(b) + " trimmed-mean t" + (long_form ? " interval of the paired ratio (the verdict's box)" : "");
  }
  return std::string("95% bootstrap") + (long_form ? " interval of the ratio of medians (the lab's rule before 2026-12-04)" : "");
}

// ---- hashing and the chain --------------------------------------------------------------------

std::string record_hash(const json& rec) {
  if (!rec.is_object()) return sha256_hex(safe_dump(rec));
  json copy = rec;
  copy.erase("hash");
  return sha256_hex(safe_dump(copy));
}

namespace {

std::string id_for(long long seq) {
  char b[32];
  std::snprintf(b, sizeof b, "E%04lld", seq);
  return b;
}

// The whole file; a missing file reads as empty. Returns an error text, or "" on success.
std::string read_file(const std::string& path, std::string* out) {
  std::error_code ec;
  out->clear();
  const auto st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return "";
  if (ec) return ec.message();
  if (st.type() == fs::file_type::directory) return "is a directory, not a ledger file";
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::strerror(errno);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return "read error";
  *out = ss.str();
  return "";
}

std::vector<std::string> split_lines(const std::string& content) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < content.size()) {
    size_t nl = content.find('\n', start);
    if (nl == std::string::npos) nl = content.size();
    lines.push_back(content.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string where(size_t line, const json& rec) {
  std::string s = "line " + std::to_string(line);
  const std::string id = jstr(rec, "id");
  if (!id.empty()) s += " (" + id.substr(0, 24) + ")";
  return s;
}

// The chain checks over the file's bytes. `last_hash`/`last_seq` receive the final record's stored
// hash and seq (what the next append chains to).
VerifyResult verify_content(const std::string& content, std::string* last_hash = nullptr,
                            long long* last_seq = nullptr) {
  VerifyResult r;
  const std::vector<std::string> lines = split_lines(content);
  std::optional<std::string> prev_hash = kGenesisPrev;  // nullopt: previous line unreadable
  long long prev_seq = 0;  // plain value + flag: GCC warns falsely on optional<long long> here
  bool prev_seq_known = true;
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t ln = i + 1;
    json rec = json::parse(lines[i], nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) {
      r.problems.push_back("line " + std::to_string(ln) + ": not a JSON object (garbage or a truncated write)");
      prev_hash.reset();
      prev_seq_known = false;
      continue;
    }
    ++r.records;
    const std::string at = where(ln, rec);
    const auto hit = rec.find("hash");
    const bool has_hash = hit != rec.end() && hit->is_string();
    if (!has_hash)
      r.problems.push_back(at + ": no hash field");
    else if (hit->get<std::string>() != record_hash(rec))
      r.problems.push_back(at + ": content edited: hash mismatch");
    const auto sit = rec.find("seq");
    const bool has_seq = sit != rec.end() && sit->is_number_integer();
    if (!has_seq) {
      r.problems.push_back(at + ": no integer seq field");
    } else {
      const long long seq = sit->get<long long>();
      if (prev_seq_known && seq != prev_seq + 1)
        r.problems.push_back(at + ": seq " + std::to_string(seq) + " does not follow seq " + std::to_string(prev_seq) +
                             (seq > prev_seq + 1 ? ": a record is missing" : ": records were reordered or duplicated"));
      if (jstr(rec, "id") != id_for(seq)) r.problems.push_back(at + ": id does not match seq " + std::to_string(seq));
    }
    const std::string prev = jstr(rec, "prev");
    if (prev_hash && prev != *prev_hash)
      r.problems.push_back(at + (i == 0 ? ": prev is not the genesis value (64 zeros): records before it were removed"
                                        : ": prev does not match line " + std::to_string(i) +
                                              "'s hash: a record was deleted or reordered"));
    prev_hash = has_hash ? std::optional<std::string>(hit->get<std::string>()) : std::nullopt;
    prev_seq_known = has_seq;
    prev_seq = has_seq ? sit->get<long long>() : 0;
  }
  if (!content.empty() && content.back() != '\n')
    r.problems.push_back("line " + std::to_string(lines.size()) + ": no newline at the end (an interrupted write?)");
  if (last_hash) *last_hash = prev_hash.value_or("");
  if (last_seq) *last_seq = prev_seq_known ? prev_seq : -1;
  return r;
}

struct Captured {
  int status = -1;
  std::string out;
};

// Runs argv[0] from PATH with no shell (arguments pass verbatim, so no quoting is needed); stdin
// and stderr go to /dev/null. nullopt when the program cannot be started (git not installed).
std::optional<Captured> run_capture(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return std::nullopt;
  }
  Captured c;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) c.out.append(buf, (size_t)n);
    else if (n == 0 || errno != EINTR) break;
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  c.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (c.status == 127) return std::nullopt;  // the exec itself failed in the child
  return c;
}

// Committed records must survive: HEAD's version of the ledger must be a prefix of `content`.
void check_committed_prefix(const std::string& path, const std::string& repo_root, const std::string& content,
                            VerifyResult* r) {
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(repo_root, ec);
  if (ec) return;
  const fs::path file = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return;
  const fs::path rel = file.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") return;  // the ledger is not inside this repository
  // "HEAD:./rel" is resolved against -C's directory, so repo_root need not be the top level.
  auto c = run_capture({"git", "-C", root.string(), "show", "HEAD:./" + rel.generic_string()});
  if (!c || c->status != 0) return;  // no git, not a repository, or the ledger was never committed
  const std::string& committed = c->out;
  if (content.compare(0, committed.size(), committed) == 0) return;
  const auto old_lines = split_lines(committed), cur_lines = split_lines(content);
  for (size_t i = 0; i < old_lines.size(); ++i) {
    if (i < cur_lines.size() && cur_lines[i] == old_lines[i]) continue;
    json old = json::parse(old_lines[i], nullptr, false);
    const std::string at = where(i + 1, old.is_discarded() ? json() : old);
    r->problems.push_back(at + (i < cur_lines.size()
                                    ? ": differs from the committed ledger (HEAD): a committed record was edited"
                                    : ": committed in HEAD but missing from the file: committed records were deleted "
                                      "or truncated"));
    return;  // the first difference says enough; later lines shift after it
  }
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

VerifyResult verify_ledger(const std::string& path, const std::string& repo_root) {
  std::string content;
  if (std::string err = read_file(path, &content); !err.empty()) return {0, {"cannot read the file: " + err}};
  VerifyResult r = verify_content(content);
  if (!repo_root.empty()) check_committed_prefix(path, repo_root, content, &r);
  return r;
}

Expected<std::vector<json>> read_ledger(const std::string& path) {
  std::string content;
  if (std::string err = read_file(path, &content); !err.empty()) return runtime_error(path + ": cannot read: " + err);
  std::vector<json> out;
  const auto lines = split_lines(content);
  for (size_t i = 0; i < lines.size(); ++i) {
    json rec = json::parse(lines[i], nullptr, false);
    if (rec.is_discarded() || !rec.is_object())
      return runtime_error(path + ": line " + std::to_string(i + 1) + " is not a JSON object (run 'ouro lab verify')");
    out.push_back(std::move(rec));
  }
  return out;
}

Expected<json> append_record(const std::string& path, json rec, const std::string& repo_root) {
  if (!rec.is_object()) return runtime_error("ledger record must be a JSON object");
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return runtime_error(parent.string() + ": cannot create directory: " + ec.message());
  }
  const bool existed = fs::exists(path, ec);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return runtime_error(path + ": cannot open for appending: " + errno_text());
  struct Closer {
    int fd;
    ~Closer() { close(fd); }  // also releases the lock
  } closer{fd};
  // Two runs appending at once would otherwise both take the same seq.
  if (flock(fd, LOCK_EX) != 0) return runtime_error(path + ": cannot lock: " + errno_text());
  std::string content;
  char buf[65536];
  for (off_t off = 0;;) {
    const ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return runtime_error(path + ": cannot read: " + errno_text());
    if (n == 0) break;
    content.append(buf, (size_t)n);
    off += n;
  }
  std::string last_hash;
  long long last_seq = 0;
  VerifyResult v = verify_content(content, &last_hash, &last_seq);
  if (!repo_root.empty()) check_committed_prefix(path, repo_root, content, &v);
  if (!v.ok())
    return runtime_error(path + ": refusing to append to a ledger that fails verification: " + v.problems[0] +
                         (v.problems.size() > 1 ? " (and " + std::to_string(v.problems.size() - 1) + " more)" : ""));
  if (content.empty()) {
    last_hash = kGenesisPrev;
    last_seq = 0;
  }
  rec.erase("hash");
  rec["seq"] = last_seq + 1;
  rec["id"] = id_for(last_seq + 1);
  rec["prev"] = last_hash;
  if (!rec.contains("time") || !rec["time"].is_string()) rec["time"] = utc_now();
  // Round-trip through text so the hash covers exactly what a reader will parse back (invalid
  // UTF-8 replaced, NaN written as null, integers and floats in their final form).
  rec = json::parse(safe_dump(rec));
  rec["hash"] = record_hash(rec);
  const std::string line = safe_dump(rec) + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return runtime_error(path + ": cannot append: " + errno_text());
    done += (size_t)n;
  }
  if (fsync(fd) != 0) return runtime_error(path + ": fsync failed: " + errno_text());
  if (!existed) {  // make the new directory entry durable too
    const int dfd = open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }
  return rec;
}

std::optional<std::string> git_toplevel(const std::string& dir) {
  auto c = run_capture({"git", "-C", dir, "rev-parse", "--show-toplevel"});
  if (!c || c->status != 0) return std::nullopt;
  std::string s = c->out;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.empty()) return std::nullopt;
  return s;
}

// ---- lookup -----------------------------------------------------------------------------------

Expected<json> find_record(const std::vector<json>& records, const std::string& ref) {
  auto all = [](const std::string& s, auto pred) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred((unsigned char)c); });
  };
  std::string upper = ref;
  for (char& c : upper) c = (char)std::toupper((unsigned char)c);
  for (const json& r : records)
    if (!upper.empty() && jstr(r, "id") == upper) return r;
  // "7" or "E7": by seq.
  const std::string digits = upper.size() > 1 && upper[0] == 'E' ? upper.substr(1) : upper;
  if (all(digits, ::isdigit) && digits.size() <= 12) {
    const long long seq = std::stoll(digits);
    for (const json& r : records) {
      auto it = r.find("seq");
      if (it != r.end() && it->is_number_integer() && it->get<long long>() == seq) return r;
    }
  }
  std::string lower = ref;
  for (char& c : lower) c = (char)std::tolower((unsigned char)c);
  if (all(lower, ::isxdigit) && lower.size() >= 6) {
    std::vector<const json*> hits;
    for (const json& r : records)
      if (jstr(r, "hash").rfind(lower, 0) == 0) hits.push_back(&r);
    if (hits.size() == 1) return *hits[0];
    if (hits.size() > 1) {
      std::string ids;
      for (const json* h : hits) ids += (ids.empty() ? "" : ", ") + jstr(*h, "id");
      return usage_error("'" + ref + "' is ambiguous: hash prefix of " + ids + " (give more digits)");
    }
    return runtime_error("no record with id, seq or hash prefix '" + ref + "'");
  }
  if (all(digits, ::isdigit)) return runtime_error("no record " + ref + " in the ledger");
  return usage_error("'" + ref.substr(0, 80) +
                     "' is not a record reference (an id like E0007, a number, or at least 6 hex digits of a hash)");
}

// ---- printing ---------------------------------------------------------------------------------

namespace {

// Records are untrusted text: control characters (terminal escapes) become '?', and long text is
// cut on a UTF-8 character boundary. keep_newlines keeps '\n' and indents the following line.
std::string clean(const std::string& s, size_t max = 0, bool keep_newlines = false, const char* indent = "") {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n' && keep_newlines) o += std::string("\n") + indent;
    else o += c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  if (max && o.size() > max) {
    size_t cut = max - 3;
    while (cut > 0 && ((unsigned char)o[cut] & 0xC0) == 0x80) --cut;
    o = o.substr(0, cut) + "...";
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Two values that sit side by side (baseline, candidate) get the same number of decimals.
std::pair<std::string, std::string> num_pair(std::optional<double> a, std::optional<double> b) {
  const double m = std::max(a && std::isfinite(*a) ? std::fabs(*a) : 0.0, b && std::isfinite(*b) ? std::fabs(*b) : 0.0);
  const char* f = m >= 1e4 ? "%.0f" : m >= 100 ? "%.1f" : m >= 1 ? "%.3f" : "%.4g";
  return {a ? fmt(f, *a) : "-", b ? fmt(f, *b) : "-"};
}

std::string ci_text(const json& st) {
  const json* ci = jarr(st, "ci");
  if (!ci || ci->size() != 2 || !(*ci)[0].is_number() || !(*ci)[1].is_number()) return "";
  return "[" + fmt("%.3f", (*ci)[0].get<double>()) + ", " + fmt("%.3f", (*ci)[1].get<double>()) + "]";
}

std::string ratio_text(const json& rec, const std::string& metric) {
  const json* stats = jobj(rec, "stats");
  const json* st = stats ? jobj(*stats, metric.c_str()) : nullptr;
  if (!st) return "-";
  auto r = jnum(*st, "ratio");
  std::string s = clean(metric, 24) + " " + (r ? fmt("x%.3f", *r) : std::string("x?"));
  const std::string ci = ci_text(*st);
  if (!ci.empty()) s += " " + ci;
  return s;
}

std::string join_strings(const json* arr, const char* sep) {
  std::string s;
  if (!arr) return s;
  for (const json& x : *arr) s += (s.empty() ? "" : sep) + (x.is_string() ? x.get<std::string>() : safe_dump(x));
  return s;
}

}  // namespace

std::string log_line(const json& rec, const std::string& metric) {
  const std::string m = !metric.empty() && jobj(rec, "stats") && jobj(*jobj(rec, "stats"), metric.c_str())
                            ? metric
                            : headline_metric(rec);
  const json* spec = jobj(rec, "spec");
  std::string id = clean(jstr(rec, "id"), 10), date = clean(jstr(rec, "time").substr(0, 10), 10);
  std::string verdict = clean(jstr(rec, "verdict"), 12), level = spec ? clean(jstr(*spec, "level"), 8) : "";
  std::string kind = jstr(rec, "kind");
  std::string q = spec ? jstr(*spec, "question") : "";
  if (kind == "rerun" || kind == "bisect") q = "[" + kind + (kind == "rerun" ? " of " + jstr(rec, "rerun_of") : "") + "] " + q;
  if (kind.rfind("agent-", 0) == 0) q = "[" + kind + "] " + jstr(rec, "summary");  // ouro agent's own records (no spec)
  char b[512];
  std::snprintf(b, sizeof b, "%-6s %-10s %-12s %-6s %-40s %s", id.empty() ? "-" : id.c_str(),
                date.empty() ? "-" : date.c_str(), verdict.empty() ? "-" : verdict.c_str(),
                level.empty() ? "-" : level.c_str(), m.empty() ? "-" : ratio_text(rec, m).c_str(),
                clean(q, 70).c_str());
  return b;
}

std::string show_record(const json& rec) {
  std::ostringstream o;
  try {
    auto field = [&](const char* label, const std::string& v) {
      if (!v.empty()) o << label << clean(v, 0, true, "            ") << "\n";
    };
    const json* spec = jobj(rec, "spec");
    const json empty = json::object();
    const json& sp = spec ? *spec : empty;
    o << clean(jstr(rec, "id"), 16) << "  " << clean(jstr(rec, "verdict"), 16) << "  (" << clean(jstr(rec, "kind"), 16)
      << ", " << clean(jstr(rec, "time"), 32) << ")\n";
    field("hash:       ", jstr(rec, "hash"));
    field("prev:       ", jstr(rec, "prev"));
    field("rerun of:   ", jstr(rec, "rerun_of"));
    field("summary:    ", jstr(rec, "summary"));
    field("goal:       ", jstr(rec, "goal"));
    field("question:   ", jstr(sp, "question"));
    field("hypothesis: ", jstr(sp, "hypothesis"));
    std::string lv = jstr(sp, "level");
    if (!jstr(sp, "repeats").empty()) lv += (lv.empty() ? "" : ", ") + std::string("repeats ") + jstr(sp, "repeats");
    field("level:      ", lv);
    field("spec:       ", jstr(rec, "spec_path"));
    field("criteria:   ", jstr(rec, "criteria_sha256").empty() ? "" : "sha256 " + jstr(rec, "criteria_sha256"));
    field("command:    ", jstr(rec, "command"));
    if (const json* revs = jobj(rec, "revisions")) {
      o << "revisions:\n";
      for (auto it = revs->begin(); it != revs->end(); ++it) {
        const json& r = *it;
        std::string line = "  " + clean(it.key(), 12) + ": " + clean(jstr(r, "revision"), 60);
        const std::string commit = jstr(r, "commit");
        if (!commit.empty()) line += " @ " + clean(commit.substr(0, 12));
        if (r.is_object() && r.contains("dirty") && r["dirty"] == true) line += " (dirty)";
        if (const json* b = jarr(r, "build"); b && !b->empty()) line += "  build: " + clean(join_strings(b, " "), 120);
        if (const json* a = jarr(r, "args"); a && !a->empty()) line += "  args: " + clean(join_strings(a, " "), 120);
        if (const json* e = jobj(r, "env"); e && !e->empty()) {
          std::string env;
          for (auto ei = e->begin(); ei != e->end(); ++ei)
            env += (env.empty() ? "" : " ") + ei.key() + "=" + (ei->is_string() ? ei->get<std::string>() : safe_dump(*ei));
          line += "  env: " + clean(env, 120);
        }
        o << line << "\n";
      }
    }
    if (const json* m = jobj(rec, "machine")) {
      std::string s = clean(jstr(*m, "cpu"), 60);
      if (auto l = jnum(*m, "load1")) s += ", load1 " + fmt("%.2f", *l);
      if (auto b = jnum(*m, "busy_cores")) s += ", busy cores " + fmt("%.2f", *b);
      if (m->contains("quiet") && (*m)["quiet"].is_boolean()) s += (*m)["quiet"].get<bool>() ? ", quiet" : ", NOT quiet";
      field("machine:    ", s);
    }
    if (const json* stats = jobj(rec, "stats"); stats && !stats->empty()) {
      const std::string head = headline_metric(rec);
      const json* samples = jobj(rec, "samples");
      char b[512];
      const json* first = stats->begin()->is_object() ? &*stats->begin() : nullptr;
      const std::string ci_head = first ? interval_name(*first) : "interval";
      std::snprintf(b, sizeof b, "metrics:\n  %-22s %5s %12s %12s %9s %20s %9s  %s\n", "metric", "n", "baseline",
                    "candidate", "ratio", ci_head.c_str(), "p", "change");
      o << b;
      for (auto it = stats->begin(); it != stats->end(); ++it) {
        const json& st = *it;
        size_t n = 0;
        if (samples)
          if (const json* base = jobj(*samples, "baseline")) n = jnums(*base, it.key().c_str()).size();
        const std::string name = clean(it.key(), 20) + (it.key() == head ? " *" : "");
        auto r = jnum(st, "ratio"), p = jnum(st, "p_value");
        std::string change = clean(jstr(st, "change"), 8);
        if (st.is_object() && st.contains("higher_is_better") && st["higher_is_better"].is_boolean())
          change += st["higher_is_better"].get<bool>() ? " (higher is better)" : " (lower is better)";
        const auto meds = num_pair(jnum(st, "baseline_median"), jnum(st, "candidate_median"));
        std::snprintf(b, sizeof b, "  %-22s %5s %12s %12s %9s %20s %9s  %s\n", name.c_str(),
                      n ? std::to_string(n).c_str() : "-", meds.first.c_str(), meds.second.c_str(), r ? fmt("%.4f", *r).c_str() : "-",
                      ci_text(st).c_str(), p ? fmt("%.3g", *p).c_str() : "-", change.c_str());
        o << b;
      }
      o << "  (medians; * headline)\n";
    }
    if (const json* c = jobj(rec, "correctness")) {
      auto line = [&](const char* label, const json& cj) {
        std::string s;
        for (const char* k : {"top1_agreement", "greedy_match", "max_abs_logit_diff"})
          if (auto v = jnum(cj, k)) s += (s.empty() ? "" : ", ") + std::string(k) + " " + fmt("%.4g", *v);
        if (!s.empty()) o << label << s << "\n";
      };
      line("correctness: ", *c);
      if (const json* h = jobj(*c, "heldout")) line("  held-out:  ", *h);
    }
    if (const json* cr = jarr(rec, "criteria"); cr && !cr->empty()) {
      o << "criteria verdicts:\n";
      for (const json& x : *cr) {
        std::string s = "  " + clean(jstr(x, "verdict"), 12);
        s.resize(std::max<size_t>(s.size(), 15), ' ');
        s += clean(jstr(x, "expr"), 200);
        const std::string src = jstr(x, "source"), det = jstr(x, "detail");
        if (!src.empty()) s += "  [" + clean(src, 40) + "]";
        if (!det.empty()) s += "\n                 " + clean(det, 300);
        o << s << "\n";
      }
    }
    if (const json* rs = jarr(rec, "reasons"); rs && !rs->empty()) {
      o << "reasons:\n";
      for (const json& x : *rs) o << "  - " << clean(x.is_string() ? x.get<std::string>() : safe_dump(x), 400) << "\n";
    }
    if (const json* ln = jarr(rec, "learned"); ln && !ln->empty()) {  // ouro agent's account
      o << "learned:\n";
      for (const json& x : *ln) o << "  - " << clean(x.is_string() ? x.get<std::string>() : safe_dump(x), 400) << "\n";
    }
    if (const json* off = jarr(rec, "offered_for_merge"))
      for (const json& x : *off)
        o << "offered for merge: " << clean(jstr(x, "branch"), 120) << " (" << clean(jstr(x, "merge"), 140) << ")\n";
    if (const json* at = jarr(rec, "attribution"); at && !at->empty()) {
      o << "attribution (per op, candidate vs baseline):\n";
      for (const json& x : *at) {
        char b[256];
        auto d = jnum(x, "delta_ms"), pct = jnum(x, "delta_pct");
        const auto ms = num_pair(jnum(x, "baseline_ms"), jnum(x, "candidate_ms"));
        std::snprintf(b, sizeof b, "  %-20s %10s ms -> %10s ms  %s ms %s\n", clean(jstr(x, "name"), 20).c_str(),
                      ms.first.c_str(), ms.second.c_str(),
                      d ? fmt("%+.3f", *d).c_str() : "-", pct ? fmt("(%+.1f%%)", *pct).c_str() : "");
        o << b;
      }
    }
    field("note:       ", jstr(rec, "note"));
  } catch (const std::exception& e) {  // readers must never take the CLI down over one odd record
    o << "(record could not be fully displayed: " << clean(e.what(), 200) << ")\n";
  }
  return o.str();
}

}  // namespace ouro::lab
