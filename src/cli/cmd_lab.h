// `ouro lab ...` subcommands. cmd_lab.cpp dispatches; each function gets the arguments after its name.
#pragma once

namespace ouro {

int cmd_lab(int argc, char** argv);
int cmd_microbench(int argc, char** argv);

// Experiments (cmd_lab.cpp)
int lab_run(int argc, char** argv);
int lab_rerun(int argc, char** argv);
int lab_plan(int argc, char** argv);
int lab_bisect(int argc, char** argv);
int lab_check(int argc, char** argv);
// The ledger (cmd_lab_ledger.cpp)
int lab_verify(int argc, char** argv);
int lab_log(int argc, char** argv);
int lab_show(int argc, char** argv);
int lab_report(int argc, char** argv);

}  // namespace ouro
