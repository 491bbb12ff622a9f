"""`ouro agent`: the loop that proposes, tests and learns (docs/agents.md, "The loop: ouro agent").

(a) Against a scripted OpenAI-compatible stub (a Python http.server in a thread, nothing of
    Ouro's own code) that returns in turn a good proposal, a harmful one, one whose diff edits a
    criteria file, and invalid JSON twice: the temporary ledger shows accept, reject (with
    reasons), refused (nothing ran), skipped (after one retry the stub saw), and the account; the
    ledger verifies and the ledger tools read the new record kinds. The good and the harmful
    proposal switch the kernels between scalar and the host's vector ISA on hybrid-tiny (about
    30x either way on any host with AVX2), never a lever whose effect depends on the host: two
    threads are not faster on a host whose two CPUs are busy or are one core's two hyperthreads.
(b) `--policy tune` on isa {scalar,auto} x kv {f32,int8}: an exhaustive sweep with
    `ouro bench --json` in the test itself says which configuration is fastest; the agent's final
    configuration is within noise of it, and it measured fewer configurations than the sweep.

Every run uses its own XDG_CACHE_HOME (shared by the module so the probe is measured once),
`--bin` (the lab never builds), `--quiet-wait 5`, and a cheap workload.
"""
import http.server
import json
import statistics
import subprocess
import textwrap
import threading
import time

import pytest

from ouro_testlib import ROOT, isolated_cache_env


@pytest.fixture(scope="module")
def abs_bin(ouro_bin):
    return ouro_bin.resolve()  # runs start in other directories too


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    return tmp_path_factory.mktemp("agent-cache")


def ouro(ouro_bin, cache_home, *args, cwd=ROOT, timeout=900):
    env = isolated_cache_env(cache_home)
    env.pop("OURO_FAULT", None)
    env.pop("OPENAI_API_KEY", None)
    t0 = time.monotonic()
    p = subprocess.run([str(ouro_bin), *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    p.elapsed = time.monotonic() - t0
    return p


def read_ledger(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class ScriptedLLM:
    """POST /v1/chat/completions answers with the next scripted content, OpenAI-shaped."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                stub.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                content = stub.replies.pop(0) if stub.replies else "no more proposals"
                out = json.dumps({"id": "chatcmpl-stub", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.server.shutdown()
        self.server.server_close()


def proposal(hypothesis, params=None, diff="", effect="faster"):
    return json.dumps({"hypothesis": hypothesis, "level": "engine", "params": params or {}, "diff": diff,
                       "expected_effect": effect})


CRITERIA_EDIT = textwrap.dedent("""\
    diff --git a/experiments/criteria/prefill-speedup.toml b/experiments/criteria/prefill-speedup.toml
    --- a/experiments/criteria/prefill-speedup.toml
    +++ b/experiments/criteria/prefill-speedup.toml
    @@ -3,2 +3,2 @@
     levels = ["engine"]
    -criteria = [
    +criteria = [ # looser
    """)


# The lever of the scripted and the target tests: hybrid-tiny's scalar kernels against the host's
# vector ones, on the F32 file, whose outputs are the same bits on every ISA (the quantized files'
# are not, so their greedy texts part). Its matrices are dequantized row by row whatever the ISA:
# prefill gains ~2.5x at one thread, decode only ~1.2x, which a busy CI host could not tell from
# engine-speedup's "decode >= 0.98x" even in 15 pairs of 128-token decodes (box [0.94, 1.50],
# 2026-12-06). So these tests' person writes criteria the lever decides (PREFILL_CRITERIA, in a
# scratch repository the agent runs in), and times 256-token prompts (not 10 ms windows).
PREFILL_CRITERIA = """\
# Written by the test, which is the person here.
description = "Keep a launch change that raises prefill by 15% with identical greedy continuations."
levels = ["engine"]
criteria = [
  "candidate.prefill_tok_s >= 1.15 * baseline.prefill_tok_s",
  "correctness.greedy_match == 1",
]
"""
TINY = ROOT / "models" / "hybrid-tiny.F32.gguf"
WORKLOAD = ["--prompt-len", "256", "--gen-len", "16", "--repeats", "3"]


def test_scripted_llm_outcomes_are_recorded(abs_bin, cache_home, tmp_path):
    """Good (accept), harmful (reject with reasons), criteria-editing (refused, never run), invalid
    JSON twice (asked again once, then skipped); each is a ledger record, then the account."""
    ledger = tmp_path / "ledger.jsonl"
    replies = [
        proposal("The host's vector kernels replace the scalar ones.", {"isa": "auto"},
                 effect="prefill and decode many times faster, identical greedy outputs"),
        proposal("Scalar kernels avoid wide registers.", {"isa": "scalar"}),
        proposal("Loosen the speed-up criterion.", {}, diff=CRITERIA_EDIT),
        "Sure! Here is my proposal: {threads: 2",      # not JSON
        json.dumps({"hypothesis": 1, "level": "engine"}),  # JSON, wrong schema
    ]
    person = scratch_repo(tmp_path / "person", {"experiments/criteria/prefill-speedup.toml": PREFILL_CRITERIA})
    with ScriptedLLM(replies) as llm:
        p = ouro(abs_bin, cache_home, "agent", "--goal", "raise prefill and decode throughput", "--criteria", "prefill-speedup",
                 "--llm", llm.url, "--llm-model", "stub-model", "--llm-key", "sk-test", "--budget", "4", "--json",
                 "--base-args", "-t 1 --isa scalar", "-m", TINY, *WORKLOAD,
                 "--bin", abs_bin, "--ledger", ledger, "--quiet-wait", "5", cwd=person)
    assert p.returncode == 0, p.stderr
    print(f"agent with the scripted LLM: {p.elapsed:.1f} s")
    account = json.loads(p.stdout)

    # The proposer saw the schema, the context, the feedback, and one retry after invalid JSON.
    assert len(llm.requests) == 5, [r["body"]["messages"][-1]["content"][:80] for r in llm.requests]
    first = llm.requests[0]["body"]
    assert first["model"] == "stub-model" and llm.requests[0]["auth"] == "Bearer sk-test"
    rf = first["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert rf["json_schema"]["schema"]["properties"]["level"]["enum"] == ["kernel", "op", "engine", "serve"]
    prompt = "\n".join(m["content"] for m in first["messages"])
    assert "roofline verdict" in prompt and "prefill-speedup" in prompt and "--threads 1 --isa scalar" in prompt
    second = "\n".join(m["content"] for m in llm.requests[1]["body"]["messages"])
    assert "verdict accept" in second  # step 1's verdict was fed back
    retry = llm.requests[4]["body"]["messages"]
    assert "not accepted" in retry[-1]["content"] and "not valid JSON" in retry[-1]["content"]

    recs = read_ledger(ledger)
    runs = [r for r in recs if "spec" in r]
    steps = [r for r in recs if r.get("kind") == "agent-step"]
    assert [r["verdict"] for r in runs] == ["accept", "reject"], [(r["verdict"], r["reasons"]) for r in runs]
    assert len(runs) == 2  # the criteria edit never ran
    assert runs[0]["revisions"]["candidate"]["args"] == ["--threads", "1", "--isa", "auto"]
    assert runs[0]["spec"]["criteria_file"] == "prefill-speedup"
    assert "agent" in runs[0]["note"] and "step 1" in runs[0]["note"]
    assert runs[1]["reasons"] and any("fail" in r or "prefill" in r for r in runs[1]["reasons"]), runs[1]["reasons"]
    assert [s["verdict"] for s in steps] == ["refused", "skipped"]
    assert "experiments/criteria/prefill-speedup.toml" in steps[0]["reasons"][0]
    assert steps[0]["criteria_file"] == "prefill-speedup" and len(steps[0]["criteria_sha256"]) == 64
    assert "invalid proposal twice" in steps[1]["reasons"][0]
    acc = recs[-1]
    assert acc["kind"] == "agent-account" and acc["id"] == account["id"]
    assert acc["tried"]["accept"] == 1 and acc["tried"]["reject"] == 1
    assert acc["tried"]["refused"] == 1 and acc["tried"]["skipped"] == 1 and acc["tried"]["llm_retries"] == 1
    assert acc["final_config"] == "--threads 1 --isa auto" and acc["start_config"] == "--threads 1 --isa scalar"
    assert [s["outcome"] for s in acc["steps"]] == ["accept", "reject", "refused", "skipped"]
    assert acc["offered_for_merge"] == []

    # The criteria file is untouched, and the ledger tools read the agent's record kinds.
    assert subprocess.run(["git", "diff", "--quiet", "--", "experiments/criteria"], cwd=person).returncode == 0
    v = ouro(abs_bin, cache_home, "lab", "verify", "--ledger", ledger)
    assert v.returncode == 0, v.stdout + v.stderr
    log = ouro(abs_bin, cache_home, "lab", "log", "--ledger", ledger)
    assert log.returncode == 0 and "[agent-account]" in log.stdout and "[agent-step]" in log.stdout, log.stdout
    refused = ouro(abs_bin, cache_home, "lab", "log", "--verdict", "refused", "--ledger", ledger)
    assert refused.returncode == 0 and len(refused.stdout.strip().splitlines()) == 2, refused.stdout  # header + one
    show = ouro(abs_bin, cache_home, "lab", "show", acc["id"], "--ledger", ledger)
    assert show.returncode == 0 and "learned:" in show.stdout, show.stdout
    rep = ouro(abs_bin, cache_home, "lab", "report", "--ledger", ledger, "-o", tmp_path / "report.html")
    assert rep.returncode == 0, rep.stderr


# The bar is 15%: the host's vector kernels clear it by far on hybrid-tiny's prefill (about 2x at
# one thread, on AVX2 and AVX-512 hosts alike) and the int8 KV cache misses it by far (nothing to
# read at this depth), so each try is decided in a few pairs. The levers were threads {1,2} on
# SmolLM2 at depth 512 until the lab's verdict on two threads turned out to depend on the host
# (a busy CI host does not run two threads faster) and the test took 160-300 s.
TUNE_CRITERIA = """\
# Written by the test, which is the person here: a KV type may change the outputs a little.
description = "Keep a launch change that raises prefill by 15% with mean KL under 0.05 nats."
levels = ["engine"]
criteria = [
  "candidate.prefill_tok_s >= 1.15 * baseline.prefill_tok_s",
  "correctness.kl_mean <= 0.05",
]
"""


def test_tune_finds_the_sweeps_best_in_fewer_runs(abs_bin, cache_home, tmp_path):
    """isa {scalar,auto} x kv {f32,int8} on hybrid-tiny at one thread: the sweep's best (or within
    noise), with fewer measured configurations than the sweep's four. The criteria file lives in a
    scratch git repository that the test (the person) writes; the agent only reads it."""
    person = scratch_repo(tmp_path / "person", {"experiments/criteria/tune-prefill.toml": TUNE_CRITERIA})
    workload = ["--prompt-len", "256", "--gen-len", "8"]  # 64-token prompts (10 ms) once left auto undecided in CI

    ledger = tmp_path / "ledger.jsonl"
    p = ouro(abs_bin, cache_home, "agent", "--goal", "raise prefill throughput", "--criteria", "tune-prefill",
             "--policy", "tune", "--space", "isa=scalar,auto", "--space", "kv=f32,int8", "--base-args", "-t 1 --isa scalar",
             "--budget", "4", "--json", "-m", TINY, *workload, "--repeats", "3", "--bin", abs_bin,
             "--ledger", ledger, "--quiet-wait", "5", cwd=person)
    assert p.returncode == 0, p.stderr
    print(f"agent --policy tune: {p.elapsed:.1f} s")
    account = json.loads(p.stdout)
    runs = [r for r in read_ledger(ledger) if "spec" in r]
    measured = {tuple(r["revisions"][side]["args"]) for r in runs for side in ("baseline", "candidate")}
    assert 0 < len(runs) and len(measured) < 4, measured
    # The trace ranks isa (the matmuls' share: lm_head) before kv (no op of the hybrid's is
    # llama's attention): isa is tried first, the vector kernels before scalar.
    assert runs[0]["revisions"]["candidate"]["args"] == ["--threads", "1", "--isa", "auto"], runs[0]["revisions"]
    assert account["agent"]["space_configurations"] == 4
    assert account["learned"] and any(l.startswith("ranked isa") for l in account["learned"]), account["learned"]
    final = account["final_args"]

    # The exhaustive sweep, measured here with `ouro bench` (three repeats per point, three rounds
    # interleaved), each point's figure the median of its rounds: one bench process ran 1.37x its
    # twin in a CI-like run (auto/int8 4910 then 6722 tok/s, 2026-12-07), and the best of the
    # maxima made that outlier the bar.
    points = [(isa, kv) for isa in ("scalar", "auto") for kv in ("f32", "int8")]
    speed = {pt: [] for pt in points}
    t0 = time.monotonic()
    for _ in range(3):
        for isa, kv in points:
            b = ouro(abs_bin, cache_home, "bench", "--json", "--repeats", "3", "-m", TINY, *workload,
                     "--threads", "1", "--isa", isa, "--kv", kv)
            assert b.returncode == 0, b.stderr
            speed[(isa, kv)].append(json.loads(b.stdout)["prefill_tok_s"]["median"])
    typical = {pt: statistics.median(v) for pt, v in speed.items()}
    print(f"sweep: {time.monotonic() - t0:.1f} s", typical)
    best = max(typical.values())
    got = dict(zip(final[::2], final[1::2]))
    pt = (got.get("--isa", "auto"), got.get("--kv", "f32"))
    # The agent keeps only changes that clear the criteria's 15% bar, so a point up to 15% better
    # (int8 KV was 1.2x in one CI-like sweep, 2026-12-07) may rightly be left; with the sweep's own
    # noise that sits at 0.85. Scalar kernels run at ~0.4-0.5 of the vector ones: 0.75 still
    # catches an agent that kept the wrong lever.
    # With the agent's steps printed whole (pytest shows a failed test's output uncut, and cuts a
    # long assertion message in its middle): it kept --isa scalar in two full runs, 2026-12-07,
    # and which verdict and reasons left the vector kernels out was cut away.
    print("agent steps:", json.dumps(account.get("steps"), indent=1))
    assert typical[pt] >= 0.75 * best, (final, speed)


def scratch_repo(path, files):
    """A git repository with `files` committed: the person's checkout for one test."""
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(git + cmd, cwd=path, check=True)
    return path


def test_diffs_are_checked_in_a_worktree_and_refused_before_running(abs_bin, model_path, cache_home, tmp_path):
    """A diff that applies is committed on agent/<run>-<step> in a worktree (never the checkout);
    one that needs no experiment, one that does not apply and one that climbs out of the
    repository are refused with their reasons, and their branches and worktrees are removed."""
    person = scratch_repo(tmp_path / "person", {
        "experiments/criteria/engine-speedup.toml": (ROOT / "experiments/criteria/engine-speedup.toml").read_text(),
        "docs/notes.md": "one\ntwo\n",
    })
    docs_diff = "--- a/docs/notes.md\n+++ b/docs/notes.md\n@@ -1,2 +1,2 @@\n one\n-two\n+three\n"
    stale_diff = "--- a/docs/notes.md\n+++ b/docs/notes.md\n@@ -1,2 +1,2 @@\n one\n-zwei\n+drei\n"
    escape_diff = "--- a/../outside.txt\n+++ b/../outside.txt\n@@ -0,0 +1 @@\n+x\n"
    replies = [proposal("Clearer notes.", diff=docs_diff), proposal("Stale.", diff=stale_diff),
               proposal("Escape.", diff=escape_diff)]
    ledger = tmp_path / "ledger.jsonl"
    with ScriptedLLM(replies) as llm:
        p = ouro(abs_bin, cache_home, "agent", "--goal", "tidy", "--criteria", "engine-speedup", "--llm", llm.url,
                 "--llm-model", "stub", "--budget", "3", "--json", "-m", model_path, "--prompt-len", "16", "--gen-len", "4",
                 "--bin", abs_bin, "--ledger", ledger, cwd=person)
    assert p.returncode == 0, p.stderr
    recs = read_ledger(ledger)
    assert not [r for r in recs if "spec" in r]
    steps = [r for r in recs if r.get("kind") == "agent-step"]
    assert [s["verdict"] for s in steps] == ["refused"] * 3
    assert "judges no level" in steps[0]["reasons"][0] and "no engine code changed" in steps[0]["reasons"][0], steps[0]["reasons"]
    assert "does not apply" in steps[1]["reasons"][0]
    assert "climbs out" in steps[2]["reasons"][0]
    assert "committed the diff on agent/" in p.stderr  # the first diff was committed on its own branch before routing
    branches = subprocess.run(["git", "branch", "--list", "agent/*"], cwd=person, capture_output=True, text=True).stdout
    assert branches.strip() == ""
    trees = subprocess.run(["git", "worktree", "list"], cwd=person, capture_output=True, text=True).stdout
    assert len(trees.strip().splitlines()) == 1, trees
    assert (person / "docs/notes.md").read_text() == "one\ntwo\n"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=person, capture_output=True, text=True).stdout == ""


@pytest.mark.parametrize("args, flag", [
    ([], "--goal"),
    (["--goal", "g"], "--criteria"),
    (["--goal", "g", "--criteria", "engine-speedup"], "--llm"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--llm", "http://127.0.0.1:1/v1"], "--llm"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "grid"], "--policy"),
    (["--goal", "g", "--criteria", "no-such-criteria", "--policy", "tune"], "--criteria"),
    (["--goal", "g", "--criteria", "../ledger", "--policy", "tune"], "--criteria"),
    (["--goal", "g", "--criteria", "engine-speedup", "--llm", "https://x/v1", "--llm-model", "m"], "--llm"),
    (["--goal", "g", "--criteria", "engine-speedup", "--llm", "http://127.0.0.1:1/v1"], "--llm-model"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--budget", "0"], "--budget"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--space", "threads=1,9999"], "--space"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--space", "batch=1,2"], "--space"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--space", "kv=f32"], "--space"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--base-args", "--kv q2"], "--base-args"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--target", "decode_tok_s"], "--target"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--target", "speed=3"], "--target"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--bin", "/nonexistent"], "--bin"),
    (["--goal", "g", "--criteria", "engine-speedup", "--policy", "tune", "--frobnicate"], "--frobnicate"),
])
def test_bad_flags_are_usage_errors_naming_the_flag(abs_bin, cache_home, args, flag):
    p = ouro(abs_bin, cache_home, "agent", *args, timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert flag in p.stderr and "internal error" not in p.stderr, p.stderr


def test_invalid_proposals_are_explained_to_the_proposer(abs_bin, model_path, cache_home, tmp_path):
    """Schema and whitelist errors go back to the proposer naming what is wrong (one retry per
    step); a proposal equal to the current configuration is refused, never run."""
    person = scratch_repo(tmp_path / "person", {
        "experiments/criteria/engine-speedup.toml": (ROOT / "experiments/criteria/engine-speedup.toml").read_text()})
    replies = [
        proposal("Bigger batches.", {"batch": 8}),            # not a whitelisted parameter
        proposal("Many threads.", {"threads": 4096}),         # out of range
        json.dumps({"hypothesis": "h", "level": "gpu", "params": {"threads": 2}, "diff": "", "expected_effect": "e"}),
        json.dumps({"hypothesis": "h", "level": "engine", "params": {}, "diff": "", "expected_effect": "e", "extra": 1}),
        proposal("Keep one thread.", {"threads": 1}),         # valid, but nothing changes
    ]
    ledger = tmp_path / "ledger.jsonl"
    with ScriptedLLM(replies) as llm:
        p = ouro(abs_bin, cache_home, "agent", "--goal", "g", "--criteria", "engine-speedup", "--llm", llm.url,
                 "--llm-model", "stub", "--budget", "3", "--json", "-m", model_path, "--prompt-len", "16", "--gen-len", "4",
                 "--base-args", "--threads=1", "--bin", abs_bin, "--ledger", ledger, cwd=person)
    assert p.returncode == 0, p.stderr
    # Requests: step 1, its retry, step 2, its retry, step 3; each retry and each next step says why.
    assert len(llm.requests) == 5
    said = [[m["content"] for m in r["body"]["messages"]] for r in llm.requests]
    assert "'batch' is not a launch parameter" in said[1][-1]
    assert "threads: 4096 is out of range" in said[2][-2] and "Step 1 was skipped" in said[2][-2]
    assert "field 'level': 'gpu'" in said[3][-1]
    assert "unknown field 'extra'" in said[4][-2]
    steps = [r for r in read_ledger(ledger) if r.get("kind") == "agent-step"]
    assert [s["verdict"] for s in steps] == ["skipped", "skipped", "refused"]
    assert "current configuration" in steps[2]["reasons"][0]


def test_tune_stops_when_the_target_is_met(abs_bin, cache_home, tmp_path):
    """--target decode_tok_s=1: the first kept configuration reaches it, and the loop stops."""
    ledger = tmp_path / "ledger.jsonl"
    person = scratch_repo(tmp_path / "person", {"experiments/criteria/prefill-speedup.toml": PREFILL_CRITERIA})
    p = ouro(abs_bin, cache_home, "agent", "--goal", "any decode speed", "--criteria", "prefill-speedup", "--policy", "tune",
             "--space", "isa=scalar,auto", "--space", "kv=f32,bf16", "--base-args", "-t 1 --isa scalar", "--target", "decode_tok_s=1",
             "--budget", "3", "--json", "-m", TINY, *WORKLOAD,
             "--bin", abs_bin, "--ledger", ledger, "--quiet-wait", "5", cwd=person)
    assert p.returncode == 0, p.stderr
    acc = json.loads(p.stdout)
    # The steps as text: pytest shortens a long dict in its message, and a step's verdict and
    # reasons are what a failure here needs (it failed once in a full run, passed alone).
    steps = json.dumps(acc.get("steps"), indent=1)
    assert acc["goal_met"] is True and acc["stopped"] == "the goal was met", steps
    assert [s["outcome"] for s in acc["steps"]] == ["accept"] and acc["final_config"] == "--threads 1 --isa auto", steps

    # The same loop again: the lab finds the identical measurement and appends nothing, so the
    # step gets an agent-step record pointing at the stored run, and nothing is measured twice.
    again = ouro(abs_bin, cache_home, *p.args[1:], cwd=person)
    assert again.returncode == 0, again.stderr
    acc2 = json.loads(again.stdout)
    recs = read_ledger(ledger)
    assert len([r for r in recs if "spec" in r]) == 1
    step = [r for r in recs if r.get("kind") == "agent-step"]
    assert len(step) == 1 and step[0]["reused"] == acc["steps"][0]["id"] and step[0]["verdict"] == "accept"
    assert acc2["steps"][0]["id"] == step[0]["id"] and acc2["goal_met"] is True


# A stand-in project whose `ouro` speaks the lab's microbench protocol: each op spins for
# rmsnorm_delay_us (src/kernels/rmsnorm.h), so a diff to that line is a kernel change `lab plan`
# routes to the kernel level, and real worktrees and CMake builds take seconds.
STANDIN_MAIN = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "kernels/rmsnorm.h"
int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "microbench") != 0) return 2;
  const char* out = nullptr;
  bool json = false, markers = false;
  long iters = 10;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--markers")) markers = true;
  }
  // The lab's protocol: --iters calls between the @timed-start/@timed-end lines it stamps.
  double best = 1e300, total = 0;
  if (markers) { std::puts("@timed-start"); std::fflush(stdout); }
  for (long k = 0; k < iters; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(rmsnorm_delay_us)) {}
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    total += ns;
    if (ns < best) best = ns;
  }
  if (markers) { std::puts("@timed-end"); std::fflush(stdout); }
  if (out) {  // a 2-element float32 .npy, the same for every build
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    const unsigned short len = (unsigned short)h.size();
    const float v[2] = {1.0f, 2.0f};
    FILE* f = std::fopen(out, "wb");
    std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    std::fwrite(&len, 2, 1, f);
    std::fwrite(h.data(), 1, h.size(), f);
    std::fwrite(v, 4, 2, f);
    std::fclose(f);
  }
  if (json) std::printf("{\"ns_per_op\": %f, \"total_ns\": %f, \"gb_s\": 1.0, \"gflops\": 1.0}\n", best, total);
  return 0;
}
"""


def test_an_accepted_diff_is_offered_for_merge_never_merged(abs_bin, model_path, cache_home, tmp_path):
    """A diff that halves the stand-in kernel's time: committed on agent/<run>-1 in a worktree,
    routed to the kernel level, built and measured by the lab, accepted, and offered for merge;
    the person's checkout and its branch are untouched."""
    person = scratch_repo(tmp_path / "person", {
        "experiments/criteria/kernel-speedup.toml": (ROOT / "experiments/criteria/kernel-speedup.toml").read_text(),
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.16)\nproject(standin CXX)\n"
                          "add_executable(ouro src/main.cpp)\ntarget_include_directories(ouro PRIVATE src)\n",
        "src/main.cpp": STANDIN_MAIN,
        "src/kernels/rmsnorm.h": "#pragma once\nconstexpr int rmsnorm_delay_us = 400;\n",
    })
    faster = ("--- a/src/kernels/rmsnorm.h\n+++ b/src/kernels/rmsnorm.h\n@@ -1,2 +1,2 @@\n #pragma once\n"
              "-constexpr int rmsnorm_delay_us = 400;\n+constexpr int rmsnorm_delay_us = 200;\n")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=person, capture_output=True, text=True).stdout.strip()
    ledger = tmp_path / "ledger.jsonl"
    with ScriptedLLM([json.dumps({"hypothesis": "Half the spin halves rmsnorm's time.", "level": "kernel", "params": {},
                                  "diff": faster, "expected_effect": "rmsnorm 2x faster"})]) as llm:
        p = ouro(abs_bin, cache_home, "agent", "--goal", "faster rmsnorm", "--criteria", "kernel-speedup", "--llm", llm.url,
                 "--llm-model", "stub", "--budget", "1", "--json", "-m", model_path, "--prompt-len", "16", "--gen-len", "4",
                 "--repeats", "3", "--ledger", ledger, "--quiet-wait", "2", cwd=person)
    assert p.returncode == 0, p.stderr
    acc = json.loads(p.stdout)
    run = [r for r in read_ledger(ledger) if "spec" in r]
    assert len(run) == 1 and run[0]["verdict"] == "accept", run and run[0]["reasons"]
    assert run[0]["spec"]["level"] == "kernel" and run[0]["spec"]["criteria_file"] == "kernel-speedup"
    branch = acc["offered_for_merge"][0]["branch"]
    assert branch.startswith("agent/") and acc["offered_for_merge"][0]["merge"] == f"git merge {branch}"
    assert run[0]["revisions"]["candidate"]["revision"] == branch
    # The branch holds the change as one commit on HEAD; the checkout is as it was.
    log = subprocess.run(["git", "log", "--format=%P %s", "-1", branch], cwd=person, capture_output=True, text=True).stdout
    assert log.startswith(head) and "agent" in log
    shown = subprocess.run(["git", "show", f"{branch}:src/kernels/rmsnorm.h"], cwd=person, capture_output=True, text=True).stdout
    assert "= 200;" in shown
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=person, capture_output=True, text=True).stdout.strip() == head
    assert "= 400;" in (person / "src/kernels/rmsnorm.h").read_text()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=person, capture_output=True, text=True).stdout == ""
    trees = subprocess.run(["git", "worktree", "list"], cwd=person, capture_output=True, text=True).stdout
    assert not any("tree-1" in line for line in trees.splitlines()), trees
    show = ouro(abs_bin, cache_home, "lab", "show", acc["id"], "--ledger", ledger).stdout
    assert f"offered for merge: {branch} (git merge {branch})" in show, show
