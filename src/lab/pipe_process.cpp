#include "lab/pipe_process.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace ouro::lab {

PipeProcess::~PipeProcess() {
  if (pid_ > 0 && !finished_) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
  if (!err_path_.empty()) unlink(err_path_.c_str());
}

Status PipeProcess::start(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
                          const ProcLimits& limits) {
  char tmpl_err[] = "/tmp/ouro-lab-err-XXXXXX";
  const int fe = mkstemp(tmpl_err);
  if (fe < 0) return runtime_error(std::string("cannot create a temporary file: ") + std::strerror(errno));
  err_path_ = tmpl_err;
  int in_pipe[2], out_pipe[2], status_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return runtime_error("pipe failed");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return runtime_error("pipe failed");
  }
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) close(fd);
    return runtime_error("pipe failed");
  }
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  t0_ = LabClock::now();
  const pid_t pid = fork();
  if (pid == 0) exec_child(cargv, cenv, cwd, limits, in_pipe[0], out_pipe[1], fe, status_pipe[1]);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(status_pipe[1]);
  close(fe);
  if (pid < 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    close(status_pipe[0]);
    return runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  setpgid(pid, pid);
  pid_ = pid;
  in_ = in_pipe[1];
  out_ = out_pipe[0];
  signal(SIGPIPE, SIG_IGN);  // a worker that exits early must not take the lab with it
  int code = 0, exec_errno = 0;
  while (read(status_pipe[0], &code, sizeof code) == (ssize_t)sizeof code) {
    if (code == -1) confined_ = true;
    else if (code >= 0) exec_errno = code;
  }
  close(status_pipe[0]);
  if (exec_errno) return runtime_error("could not start " + argv[0] + ": " + std::strerror(exec_errno));
  return Ok{};
}

bool PipeProcess::send(const std::string& s) {
  if (in_ < 0) return false;
  std::string line = s + "\n";
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = write(in_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += (size_t)n;
  }
  return true;
}

std::optional<Line> PipeProcess::read_line(LabClock::time_point deadline) {
  for (;;) {
    const size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      Line l{buf_.substr(0, nl), LabClock::now()};
      buf_.erase(0, nl + 1);
      return l;
    }
    if (eof_ || out_ < 0) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - LabClock::now()).count();
    if (left <= 0) {
      timed_out_ = true;
      return std::nullopt;
    }
    pollfd p{out_, POLLIN, 0};
    const int r = poll(&p, 1, (int)std::min<long long>(left, 1000));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char chunk[65536];
    const ssize_t n = read(out_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      continue;
    }
    // The arrival stamp is taken when the line is handed out, right after this read returned.
    buf_.append(chunk, (size_t)n);
    if (buf_.size() > (64u << 20)) {  // a flood without newlines: stop reading
      eof_ = true;
      buf_.clear();
    }
  }
}

double PipeProcess::cpu_seconds() const {
  if (pid_ <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t rp = s.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream f(s.substr(rp + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && f >> field; ++i) {  // fields 14 and 15 (1-based) are utime, stime
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  static const double hz = (double)sysconf(_SC_CLK_TCK);
  return (utime + stime) / hz;
}

ProcResult PipeProcess::finish(double grace_s) {
  ProcResult r;
  r.started = pid_ > 0;
  r.confined = confined_;
  if (in_ >= 0) {
    close(in_);
    in_ = -1;
  }
  if (pid_ <= 0) return r;
  int status = 0;
  rusage ru{};
  const auto until = LabClock::now() + std::chrono::duration_cast<LabClock::duration>(std::chrono::duration<double>(grace_s));
  bool reaped = false;
  if (timed_out_) kill(-pid_, SIGKILL);
  for (;;) {
    const pid_t w = wait4(pid_, &status, WNOHANG, &ru);
    if (w == pid_) { reaped = true; break; }
    if (w < 0 && errno != EINTR) break;
    if (LabClock::now() > until) {
      kill(-pid_, SIGKILL);
      wait4(pid_, &status, 0, &ru);
      reaped = true;
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(-pid_, SIGKILL);
  finished_ = true;
  r.timed_out = r.timed_out || timed_out_;
  r.wall_s = std::chrono::duration<double>(LabClock::now() - t0_).count();
  r.max_rss_mib = ru.ru_maxrss / 1024.0;
  r.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  if (reaped && !r.timed_out) {
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  }
  std::ifstream in(err_path_, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  if (r.err.size() > 4096) r.err = r.err.substr(r.err.size() - 4096);
  r.out = buf_;
  return r;
}

}  // namespace ouro::lab
