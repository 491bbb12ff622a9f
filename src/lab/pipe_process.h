// A measured process the lab talks to while it runs: requests on its stdin, answers read line by
// line from its stdout and stamped on arrival with the lab's own monotonic clock. Same confinement
// as run_process (process group, address-space limit, no core dumps, Landlock writes); stderr goes
// to a file whose tail names a failure. Used for `ouro worker` and marker-framed `ouro microbench`
// runs (docs/lab.md, "What a candidate can and cannot influence").
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "core/status.h"
#include "lab/process.h"

namespace ouro::lab {

using LabClock = std::chrono::steady_clock;

struct Line {
  std::string text;
  LabClock::time_point arrived;  // when the lab's read returned it
};

class PipeProcess {
 public:
  PipeProcess() = default;
  ~PipeProcess();
  PipeProcess(const PipeProcess&) = delete;
  PipeProcess& operator=(const PipeProcess&) = delete;

  // Starts argv (argv[0] a path) with `env` in `cwd`; an error when it cannot be started.
  Status start(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
               const ProcLimits& limits);
  // Writes `s` plus a newline to its stdin (false when the pipe is closed: it has exited).
  bool send(const std::string& s);
  // The next line of its stdout, waiting at most until `deadline`; nullopt at end of file or when
  // the deadline passes (timed_out() says which).
  std::optional<Line> read_line(LabClock::time_point deadline);
  bool timed_out() const { return timed_out_; }
  // CPU seconds (user + system) the process has used so far, from /proc/PID/stat (threads included).
  double cpu_seconds() const;
  // Closes stdin, waits up to `grace_s` for it to exit (then kills the group), and returns how it
  // ended: exit code or signal, wall time since start, CPU time, peak RSS, stderr's last 4 KiB;
  // `hung` marks a process killed because a read passed its deadline.
  ProcResult finish(double grace_s);
  pid_t pid() const { return pid_; }
  bool confined() const { return confined_; }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string err_path_;
  std::string buf_;
  bool eof_ = false, timed_out_ = false, confined_ = false, finished_ = false;
  LabClock::time_point t0_;
};

}  // namespace ouro::lab
