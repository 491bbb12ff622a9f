#include "lab/builds.h"

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <thread>
#include <unistd.h>

#include "core/sha256.h"
#include "lab/process.h"

namespace fs = std::filesystem;

namespace ouro::lab {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string options_key(const std::vector<std::string>& build) {
  std::string joined;
  for (const auto& b : build) joined += b + "\n";
  return sha256_hex(joined).substr(0, 10);
}

// One build at a time per cache (two cores: parallel builds only thrash), across processes.
class CacheLock {
 public:
  explicit CacheLock(const std::string& path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~CacheLock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  int fd_ = -1;
};

Status cmake_build(const std::string& src, const std::string& dir, const std::vector<std::string>& opts,
                   const std::string& ccache_base, bool verbose) {
  const std::string log = dir + "/lab-build.log";
  auto env = current_env();
  if (!ccache_base.empty()) env["CCACHE_BASEDIR"] = ccache_base;
  const unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  auto run = [&](std::vector<std::string> argv) -> Status {
    std::string cmake = "/usr/bin/cmake";
    if (access(cmake.c_str(), X_OK) != 0) cmake = "cmake";
    argv.insert(argv.begin(), cmake);
    if (argv[0].find('/') == std::string::npos) return runtime_error("cmake not found at /usr/bin/cmake");
    ProcLimits lim;
    lim.timeout_s = 3600;
    ProcResult r = run_process(argv, env, src, lim);
    FILE* f = std::fopen(log.c_str(), "a");
    if (f) {
      std::fputs(r.out.c_str(), f);
      std::fputs(r.err.c_str(), f);
      std::fclose(f);
    }
    if (!r.ok()) return runtime_error("build in " + dir + " failed (" + r.failure() + "); see " + log);
    return Ok{};
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::exists(dir + "/CMakeCache.txt")) {
    if (verbose) std::fprintf(stderr, "lab: configuring %s\n", dir.c_str());
    std::vector<std::string> argv = {"-S", src, "-B", dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"};
    argv.insert(argv.end(), opts.begin(), opts.end());
    if (Status s = run(argv); !s) return s;
  }
  if (verbose) std::fprintf(stderr, "lab: building %s\n", dir.c_str());
  return run({"--build", dir, "--target", "ouro", "-j", std::to_string(jobs)});
}

}  // namespace

std::string default_cache_root() {
  const char* x = std::getenv("XDG_CACHE_HOME");
  if (x && *x) return std::string(x) + "/ouro/lab";
  const char* h = std::getenv("HOME");
  return std::string(h && *h ? h : "/tmp") + "/.cache/ouro/lab";
}

Expected<std::string> repo_root_of(const std::string& start) {
  auto r = capture({"git", "rev-parse", "--show-toplevel"}, start);
  if (!r) return runtime_error("not inside a git checkout (" + start + "): the lab builds revisions with git");
  return trim(*r);
}

Expected<std::string> resolve_commit(const std::string& repo_root, const std::string& rev) {
  auto r = capture({"git", "rev-parse", "--verify", "--quiet", rev + "^{commit}"}, repo_root);
  if (!r) return usage_error("unknown revision '" + rev + "' in " + repo_root);
  return trim(*r);
}

Expected<Binary> describe_side(const BuildContext& ctx, const Side& side) {
  Binary b;
  b.revision = side.revision;
  b.build = side.build;
  if (side.revision != "worktree") {
    auto commit = resolve_commit(ctx.repo_root, side.revision);
    if (!commit) return commit.error();
    b.commit = *commit;
    return b;
  }
  auto head = resolve_commit(ctx.repo_root, "HEAD");
  if (!head) return head.error();
  b.commit = *head;
  auto st = capture({"git", "status", "--porcelain", "--untracked-files=no"}, ctx.repo_root);
  if (!st) return st.error();
  b.dirty = !trim(*st).empty();
  if (b.dirty) {
    auto d = capture({"git", "diff", "HEAD"}, ctx.repo_root);
    if (d) b.diff_sha256 = sha256_hex(*d);
  }
  return b;
}

Expected<Binary> prepare_binary(const BuildContext& ctx, const Side& side) {
  auto described = describe_side(ctx, side);
  if (!described) return described.error();
  Binary b = *described;
  if (side.revision == "worktree") {
    if (side.build.empty() && !ctx.worktree_bin.empty()) {
      b.path = ctx.worktree_bin;
      b.write_dir = fs::path(ctx.worktree_bin).parent_path().string();
      return b;
    }
    const std::string dir = side.build.empty() ? ctx.repo_root + "/build" : ctx.repo_root + "/build/lab-" + options_key(side.build);
    if (!ctx.no_build) {
      CacheLock lock(ctx.repo_root + "/build/.lab-lock");
      if (Status s = cmake_build(ctx.repo_root, dir, side.build, "", ctx.verbose); !s) return s.error();
    }
    b.path = dir + "/ouro";
    b.write_dir = dir;
    if (access(b.path.c_str(), X_OK) != 0) return runtime_error("no ouro binary at " + b.path + " (build it, or drop --no-build)");
    return b;
  }
  std::error_code ec;
  fs::create_directories(ctx.cache_root + "/trees", ec);
  CacheLock lock(ctx.cache_root + "/lock");
  const std::string tree = ctx.cache_root + "/trees/" + b.commit.substr(0, 16);
  if (!fs::exists(tree + "/CMakeLists.txt")) {
    if (fs::exists(tree)) fs::remove_all(tree, ec);
    capture({"git", "worktree", "prune"}, ctx.repo_root);
    if (ctx.verbose) std::fprintf(stderr, "lab: checking out %s in %s\n", b.commit.substr(0, 12).c_str(), tree.c_str());
    auto r = capture({"git", "worktree", "add", "--detach", "--force", tree, b.commit}, ctx.repo_root);
    if (!r) return r.error();
  }
  const std::string dir = tree + "/build-lab-" + options_key(side.build);
  b.path = dir + "/ouro";
  b.write_dir = tree;
  if (access(b.path.c_str(), X_OK) == 0) return b;  // cached by commit and options
  if (Status s = cmake_build(tree, dir, side.build, tree, ctx.verbose); !s) return s.error();
  if (access(b.path.c_str(), X_OK) != 0) return runtime_error("the build of " + side.revision + " produced no " + b.path);
  return b;
}

}  // namespace ouro::lab
