#include "lab/process.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <linux/landlock.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

// Landlock ABI 3 (Linux 6.2); Debian 12's headers predate it.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

namespace ouro::lab {

namespace {

int ll_abi() {
#ifdef SYS_landlock_create_ruleset
  const long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : (int)v;
#else
  return 0;
#endif
}

// In the child, before exec: confine every write-like access to `dirs` (and /dev/null). Returns
// false when Landlock is unavailable or refused (the child then runs unconfined; the record says so).
bool confine_writes(const std::vector<std::string>& dirs) {
#ifdef SYS_landlock_create_ruleset
  const int abi = ll_abi();
  if (abi < 1) return false;
  uint64_t dir_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                        LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                        LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
                        LANDLOCK_ACCESS_FS_MAKE_SYM;
  uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE;
  if (abi >= 2) dir_rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) { dir_rights |= LANDLOCK_ACCESS_FS_TRUNCATE; file_rights |= LANDLOCK_ACCESS_FS_TRUNCATE; }
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = dir_rights;
  const int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (rs < 0) return false;
  auto allow = [&](const std::string& path, uint64_t rights) {
    const int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) return;
    landlock_path_beneath_attr pb{};
    pb.allowed_access = rights;
    pb.parent_fd = fd;
    syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    close(fd);
  };
  for (const auto& d : dirs) allow(d, dir_rights & ~(uint64_t)LANDLOCK_ACCESS_FS_REFER);
  allow("/dev/null", file_rights);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) { close(rs); return false; }
  const bool ok = syscall(SYS_landlock_restrict_self, rs, 0) == 0;
  close(rs);
  return ok;
#else
  (void)dirs;
  return false;
#endif
}

std::string read_file(const std::string& path, size_t max_tail) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (max_tail && s.size() > max_tail) s = s.substr(s.size() - max_tail);
  return s;
}

}  // namespace

// In a forked child: its own process group, stdin/stdout/stderr from the given descriptors, no core
// dumps, the address-space limit, the directory, write confinement, then exec. Reports on
// `status_fd`: -1 confined, -2 not confined, a positive errno when chdir or exec failed.
[[noreturn]] void exec_child(const std::vector<char*>& argv, const std::vector<char*>& envp, const std::string& cwd,
                             const ProcLimits& limits, int in_fd, int out_fd, int err_fd, int status_fd) {
  setpgid(0, 0);
  if (in_fd >= 0) dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  if (limits.memory_mib > 0) {
    rlimit as;
    as.rlim_cur = as.rlim_max = (rlim_t)(limits.memory_mib * 1048576.0);
    setrlimit(RLIMIT_AS, &as);
  }
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
    const int e = errno;
    (void)!write(status_fd, &e, sizeof e);
    _exit(127);
  }
  if (!limits.write_dirs.empty()) {
    const int ok = confine_writes(limits.write_dirs) ? -1 : -2;  // negative: not an errno
    (void)!write(status_fd, &ok, sizeof ok);
  }
  execve(argv[0], argv.data(), envp.data());
  const int e = errno;
  (void)!write(status_fd, &e, sizeof e);
  _exit(127);
}

bool landlock_available() { return ll_abi() >= 1; }

std::string ProcResult::failure() const {
  if (!started) return "could not start: " + err;
  if (timed_out) {
    std::ostringstream o;
    o << "timed out after " << wall_s << " s";
    return o.str();
  }
  if (signal) return std::string("killed by SIG") + (sigabbrev_np(signal) ? sigabbrev_np(signal) : std::to_string(signal).c_str());
  if (exit_code != 0) return "exit code " + std::to_string(exit_code);
  return "ok";
}

std::map<std::string, std::string> current_env() {
  std::map<std::string, std::string> m;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) m[std::string(*e, (size_t)(eq - *e))] = eq + 1;
  }
  return m;
}

ProcResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       const std::string& cwd, const ProcLimits& limits) {
  ProcResult r;
  char tmpl_out[] = "/tmp/ouro-lab-out-XXXXXX";
  char tmpl_err[] = "/tmp/ouro-lab-err-XXXXXX";
  const int fo = mkstemp(tmpl_out), fe = mkstemp(tmpl_err);
  if (fo < 0 || fe < 0) {
    r.err = std::string("cannot create a temporary file: ") + std::strerror(errno);
    if (fo >= 0) { close(fo); unlink(tmpl_out); }
    if (fe >= 0) { close(fe); unlink(tmpl_err); }
    return r;
  }
  // A pipe tells the parent whether exec succeeded (closed on exec; an errno arrives otherwise).
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    r.err = "pipe failed";
    return r;
  }
  std::vector<std::string> envs;
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    exec_child(cargv, cenv, cwd, limits, devnull, fo, fe, status_pipe[1]);
  }
  close(status_pipe[1]);
  close(fo);
  close(fe);
  if (pid < 0) {
    close(status_pipe[0]);
    r.err = std::string("fork failed: ") + std::strerror(errno);
    unlink(tmpl_out);
    unlink(tmpl_err);
    return r;
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  int code = 0, exec_errno = 0;
  r.started = true;
  while (read(status_pipe[0], &code, sizeof code) == (ssize_t)sizeof code) {
    if (code == -1) r.confined = true;
    else if (code >= 0) exec_errno = code;
  }
  close(status_pipe[0]);
  if (exec_errno) {
    r.started = false;
    r.err = argv[0] + ": " + std::strerror(exec_errno);
  }
  int status = 0;
  rusage ru{};
  for (;;) {
    const pid_t w = wait4(pid, &status, WNOHANG, &ru);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el > limits.timeout_s) {
      kill(-pid, SIGKILL);
      wait4(pid, &status, 0, &ru);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(el < 1 ? 1 : 5));
  }
  kill(-pid, SIGKILL);  // anything it left behind in its group
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_mib = ru.ru_maxrss / 1024.0;
  r.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  if (!r.timed_out) {
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  }
  r.out = read_file(tmpl_out, 0);
  if (r.started) r.err = read_file(tmpl_err, 4096);
  unlink(tmpl_out);
  unlink(tmpl_err);
  return r;
}

Expected<std::string> capture(const std::vector<std::string>& argv, const std::string& cwd, double timeout_s) {
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::vector<std::string> full = argv;
  if (!full.empty() && full[0].find('/') == std::string::npos) {
    // Resolve on PATH (execve does not search).
    const char* path = std::getenv("PATH");
    std::stringstream ps(path ? path : "/usr/bin:/bin");
    std::string dir;
    bool found = false;
    while (std::getline(ps, dir, ':')) {
      const std::string p = (dir.empty() ? "." : dir) + "/" + full[0];
      if (access(p.c_str(), X_OK) == 0) { full[0] = p; found = true; break; }
    }
    if (!found) return runtime_error("'" + argv[0] + "' not found on PATH (needed for: " + cmd + ")");
  }
  ProcLimits lim;
  lim.timeout_s = timeout_s;
  ProcResult r = run_process(full, current_env(), cwd, lim);
  if (!r.ok()) {
    std::string tail = r.err;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    return runtime_error("'" + cmd + "' failed (" + r.failure() + ")" + (tail.empty() ? "" : ": " + tail));
  }
  return r.out;
}

}  // namespace ouro::lab
