// lab_submit's jobs: `ouro lab run` started detached from the MCP server (clients time out calls
// longer than about a minute), in its own folder under $XDG_CACHE_HOME/ouro/mcp/jobs/<id>/:
//   spec.toml   the spec as submitted        stdout   the record (`lab run --json`)
//   argv.json   the command and start time   stderr   the lab's progress lines
//   pid         the supervisor's pid         exit     {"exit_code", "signal", "ended"} when done
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/mcp.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ouro::lab {

namespace {

std::string job_dir(const McpConfig& cfg, const std::string& id) { return cfg.state_dir + "/jobs/" + id; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return (bool)out;
}

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Written by the supervisor after fork: no allocation, only system calls.
void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, s, n);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) { s += w; n -= (size_t)w; }
  }
}

}  // namespace

bool valid_job_id(const std::string& id) {
  if (id.size() != 22 || id[0] != 'J' || id[15] != '-') return false;
  for (size_t i = 1; i < id.size(); ++i)
    if (i != 15 && !(std::isdigit((unsigned char)id[i]) || (i > 15 && id[i] >= 'a' && id[i] <= 'f'))) return false;
  return true;
}

std::optional<JobStart> start_job(const McpConfig& cfg, const std::string& spec_toml, const std::string& note, bool force,
                                  std::string& error) {
  // J<UTC yyyymmddHHMMSS>-<6 hex>
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", std::gmtime(&t));
  std::random_device rd;
  char id_buf[40];
  std::snprintf(id_buf, sizeof id_buf, "J%s-%06x", stamp, rd() & 0xffffffu);
  JobStart job{id_buf, job_dir(cfg, id_buf)};
  std::error_code ec;
  fs::create_directories(job.dir, ec);
  if (ec) {
    error = "cannot create " + job.dir + ": " + ec.message();
    return std::nullopt;
  }
  const std::string spec = job.dir + "/spec.toml";
  std::vector<std::string> argv = {cfg.self_bin, "lab", "run", spec, "--json", "--note", note};
  // The repository's own ledger is named by default, so the lab also checks its committed prefix.
  if (cfg.ledger != cfg.repo_root + "/experiments/ledger.jsonl") argv.insert(argv.end(), {"--ledger", cfg.ledger});
  if (!cfg.worktree_bin.empty()) argv.insert(argv.end(), {"--bin", cfg.worktree_bin});
  if (cfg.quiet_wait_s >= 0) argv.insert(argv.end(), {"--quiet-wait", std::to_string(cfg.quiet_wait_s)});
  if (force) argv.push_back("--force");
  if (!write_text(spec, spec_toml) || !write_text(job.dir + "/argv.json", json{{"argv", argv}, {"started", now_s()}}.dump())) {
    error = "cannot write the job files in " + job.dir;
    return std::nullopt;
  }
  // Everything the children need, prepared before fork.
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string out_path = job.dir + "/stdout", err_path = job.dir + "/stderr", pid_path = job.dir + "/pid";
  const std::string exit_tmp = job.dir + "/exit.tmp", exit_path = job.dir + "/exit";
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || err < 0 || devnull < 0) {
    error = "cannot open the job's output files in " + job.dir;
    for (int fd : {out, err, devnull})
      if (fd >= 0) close(fd);
    return std::nullopt;
  }
  const pid_t first = fork();
  if (first < 0) {
    error = std::string("fork failed: ") + std::strerror(errno);
    close(out), close(err), close(devnull);
    return std::nullopt;
  }
  if (first == 0) {
    // Detach: a new session, then a second fork so the supervisor is nobody's child but init's.
    setsid();
    if (fork() != 0) _exit(0);
    dup2(devnull, 0);
    dup2(out, 1);
    dup2(err, 2);  // dup2 clears close-on-exec on 0..2; every other descriptor closes at exec
    for (int fd = 3; fd < 1024; ++fd) close(fd);  // the client's pipes must not stay open in the job
    signal(SIGPIPE, SIG_DFL);
    char num[32];
    int n = std::snprintf(num, sizeof num, "%d\n", (int)getpid());
    int pf = open(pid_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (pf >= 0) { write_all(pf, num, (size_t)n); close(pf); }
    const pid_t child = fork();
    if (child == 0) {
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    int status = 0;
    while (child > 0 && waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    char line[160];
    const int code = child < 0 ? 127 : WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const int sig = child > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    n = std::snprintf(line, sizeof line, "{\"exit_code\":%d,\"signal\":%d,\"ended\":%lld}\n", code, sig, (long long)std::time(nullptr));
    int ef = open(exit_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (ef >= 0) {
      write_all(ef, line, (size_t)n);
      close(ef);
      rename(exit_tmp.c_str(), exit_path.c_str());
    }
    _exit(0);
  }
  close(out), close(err), close(devnull);
  int st = 0;
  while (waitpid(first, &st, 0) < 0 && errno == EINTR) {
  }
  return job;
}

std::optional<json> job_status(const McpConfig& cfg, const std::string& id) {
  if (!valid_job_id(id)) return std::nullopt;
  const std::string dir = job_dir(cfg, id);
  const json meta = json::parse(read_text(dir + "/argv.json"), nullptr, false);
  if (!meta.is_object()) return std::nullopt;
  const double started = meta.value("started", now_s());
  json st = {{"job_id", id}};
  // Progress: the last lines the lab printed on stderr.
  std::vector<std::string> lines;
  {
    std::istringstream in(read_text(dir + "/stderr"));
    std::string l;
    while (std::getline(in, l))
      if (!l.empty()) lines.push_back(l.size() > 400 ? l.substr(0, 400) + "..." : l);
  }
  const size_t from = lines.size() > 8 ? lines.size() - 8 : 0;
  st["progress"] = std::vector<std::string>(lines.begin() + (long)from, lines.end());
  const json ex = json::parse(read_text(dir + "/exit"), nullptr, false);
  if (ex.is_object()) {
    const int code = ex.value("exit_code", -1);
    st["exit_code"] = code;
    st["elapsed_s"] = std::max(0.0, ex.value("ended", started) - started);
    if (code == 0 || code == 3 || code == 4) {
      st["state"] = "done";
    } else {
      st["state"] = "failed";
      const int sig = ex.value("signal", 0);
      st["reason"] = (sig ? "lab run was killed by signal " + std::to_string(sig) : "lab run exited with code " + std::to_string(code)) +
                     (lines.empty() ? std::string() : ": " + lines.back());
    }
    return st;
  }
  st["elapsed_s"] = std::max(0.0, now_s() - started);
  const std::string pid_text = read_text(dir + "/pid");
  const int pid = std::atoi(pid_text.c_str());
  const bool alive = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
  if (alive || (pid_text.empty() && st["elapsed_s"].get<double>() < 10)) {
    st["state"] = "running";
  } else {
    st["state"] = "failed";
    st["reason"] = "the job's supervisor is gone without an exit status (was the machine restarted?)";
  }
  return st;
}

std::string job_output(const McpConfig& cfg, const std::string& id) {
  return valid_job_id(id) ? read_text(job_dir(cfg, id) + "/stdout") : std::string();
}

}  // namespace ouro::lab
