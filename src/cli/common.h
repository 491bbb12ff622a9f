// Pieces shared by the subcommands: common flags, loading the engine, reporting errors.
#pragma once
#include <string>
#include <vector>

#include "cli/args.h"
#include "runtime/engine.h"

namespace ouro {

// Flags every model-loading subcommand accepts.
extern const std::vector<std::string> kCommonValueFlags;  // --model --threads --ctx --isa

// A file shipped in the repository: `rel` from the working directory, else next to the binary's
// build directory (BUILD/.. / rel), else `rel` as given (for the caller's error message).
std::string find_repo_file(const std::string& rel);

// Builds the launch configuration from common flags (and OURO_MODEL).
Expected<LaunchConfig> launch_config_from(const Args& a);
Expected<std::unique_ptr<Engine>> load_engine(const Args& a);
// Prints "ouro: message" to stderr and returns the exit code of the error's kind.
int report(const Error& e);
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b);
// Parses "1,2,3" into ids.
Expected<std::vector<int>> parse_id_list(const std::string& s);

// The lab's memo fault (src/core/fault.h, OURO_FAULT=memo:DIR): "DIR/<first 16 hex digits of the
// SHA-256 of the ids>" for an input, or "" when that fault is off. A memo candidate replays the file
// stored for a known input and answers any other input cheaply and wrongly.
std::string memo_stem(const std::vector<int>& ids);

// Tracing flags (--trace FILE, --trace-buffer N) of generate and bench.
extern const std::vector<std::string> kTraceFlags;
// Starts recording when --trace is given (validates --trace-buffer first).
Status start_trace(const Args& a);
// Writes the trace file when --trace was given; the launch configuration goes into otherData.
Status finish_trace(const Args& a, const Engine& e);

// Sampling flags shared by generate and chat.
extern const std::vector<std::string> kSamplingFlags;
Expected<SamplingParams> sampling_from(const Args& a);

int cmd_generate(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_worker(int argc, char** argv);
int cmd_trace(int argc, char** argv);
int cmd_probe(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_loadtest(int argc, char** argv);
int cmd_quality(int argc, char** argv);
int cmd_mcp(int argc, char** argv);
int cmd_agent(int argc, char** argv);

}  // namespace ouro

namespace ouro {
// True when argv holds --help or -h (then the command prints its usage and exits 0).
bool wants_help(int argc, char** argv);
}  // namespace ouro
