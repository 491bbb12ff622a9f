// Running one measured process: its own process group, a wall-clock timeout (SIGKILL to the whole
// group), an address-space limit, no core dumps, stdin from /dev/null, stdout/stderr to files, and
// (where the kernel has Landlock) writes confined to the directories it is given.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro::lab {

struct ProcLimits {
  double timeout_s = 300;
  double memory_mib = 0;                // 0: no limit
  std::vector<std::string> write_dirs;  // empty: writes are not confined
};

struct ProcResult {
  bool started = false;       // exec succeeded
  int exit_code = -1;         // when it exited
  int signal = 0;             // when a signal ended it
  bool timed_out = false;
  double wall_s = 0;
  double max_rss_mib = 0;
  double cpu_s = 0;           // user + system CPU time of the process (and its waited-for children)
  bool confined = false;      // writes were confined (Landlock available and applied)
  std::string out, err;       // captured output (err: the last 4 KiB)
  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // "exit code 3", "killed by SIGABRT", "timed out after 5 s", "could not start: ..."
  std::string failure() const;
};

// argv[0] is a path. env: the full environment (not merged). cwd: "" keeps the current directory.
ProcResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       const std::string& cwd, const ProcLimits& limits);
// This process's environment as a map.
std::map<std::string, std::string> current_env();
// Runs a helper command (git, cmake) with a generous timeout; the output or an error naming it.
Expected<std::string> capture(const std::vector<std::string>& argv, const std::string& cwd, double timeout_s = 600);
// In a forked child (used by run_process and PipeProcess): process group, descriptors 0-2, limits,
// directory, write confinement, exec; failures reported as an errno on status_fd.
[[noreturn]] void exec_child(const std::vector<char*>& argv, const std::vector<char*>& envp, const std::string& cwd,
                             const ProcLimits& limits, int in_fd, int out_fd, int err_fd, int status_fd);
// True when the kernel supports Landlock (writes can be confined).
bool landlock_available();

}  // namespace ouro::lab
