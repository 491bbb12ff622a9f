// Turning a spec's side (a git revision or the working tree, plus CMake options) into an `ouro`
// binary: each revision in its own git worktree under the lab's cache, its build directory inside
// that worktree (so ccache, with CCACHE_BASEDIR set to the worktree, hits across revisions), cached
// by commit and options. The working tree builds in the checkout's own build directory.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "lab/spec.h"

namespace ouro::lab {

struct BuildContext {
  std::string repo_root;   // the checkout (git top level)
  std::string cache_root;  // $XDG_CACHE_HOME/ouro/lab (or ~/.cache/ouro/lab)
  std::string worktree_bin;  // --bin: use this binary for "worktree" sides with no build options
  bool no_build = false;     // --no-build: never build the working tree (use what is there)
  bool verbose = true;       // progress on stderr
};

struct Binary {
  std::string path;        // the ouro executable
  std::string revision;    // as the spec says
  std::string commit;      // resolved commit (HEAD for the working tree)
  bool dirty = false;      // working tree with uncommitted changes to tracked files
  std::string diff_sha256; // of `git diff HEAD` when dirty
  std::string write_dir;   // the directory its runs may write to besides the run folder
  std::vector<std::string> build;
};

std::string default_cache_root();
// The checkout that holds `start` (git rev-parse --show-toplevel), or an error.
Expected<std::string> repo_root_of(const std::string& start);
// Resolves a revision to a full commit id (an error names the revision).
Expected<std::string> resolve_commit(const std::string& repo_root, const std::string& rev);
// What a side will run, without building: the resolved commit and, for "worktree", whether the
// checkout is dirty and the hash of its diff (path and write_dir stay empty).
Expected<Binary> describe_side(const BuildContext& ctx, const Side& side);
// Builds (or finds cached) the binary for one side.
Expected<Binary> prepare_binary(const BuildContext& ctx, const Side& side);

}  // namespace ouro::lab
