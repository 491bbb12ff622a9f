"""`ouro lab`: the runner's verdicts, correctness checks, limits, statistics and spec errors.

Each test writes its spec into tmp_path and runs `ouro lab run` from the repository root with its
own XDG_CACHE_HOME (run folders, worktrees) and `--bin` pointing at the binary under test, so the
"worktree" sides never rebuild. Faults are injected with OURO_FAULT in one side's env
(src/core/fault.h). The bisect and build tests use a tiny stand-in project in a temporary git
repository, so they exercise real worktrees and CMake builds in seconds.
"""
import hashlib
import json
import subprocess
import textwrap
import time

import pytest

from ouro_testlib import ROOT, isolated_cache_env


def lab(ouro_bin, tmp_path, *args, timeout=600, cwd=ROOT, env_extra=None):
    env = isolated_cache_env(tmp_path / "cache")
    env.pop("OURO_FAULT", None)
    env.update(env_extra or {})
    t0 = time.monotonic()
    p = subprocess.run([str(ouro_bin), "lab", *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=timeout)
    p.elapsed = time.monotonic() - t0
    return p


def write_spec(tmp_path, text, name="spec.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def run_spec(ouro_bin, tmp_path, spec_text, *extra, name="spec.toml", timeout=600):
    spec = write_spec(tmp_path, spec_text, name)
    p = lab(ouro_bin, tmp_path, "run", spec, "--json", "--no-ledger", "--bin", ouro_bin, "--quiet-wait", "5", *extra,
            timeout=timeout)
    assert p.returncode in (0, 3, 4), f"lab run failed ({p.returncode}):\n{p.stderr}"
    rec = json.loads(p.stdout)
    rec["_rc"] = p.returncode
    rec["_elapsed"] = p.elapsed
    return rec


KERNEL_SPEC = """
question = "Is rmsnorm as fast in two identical configurations?"
hypothesis = "Identical binaries differ only by noise."
level = "kernel"
repeats = 5
criteria = ["candidate.ns_per_op <= 1.05 * baseline.ns_per_op"]
[baseline]
revision = "worktree"
[candidate]
revision = "worktree"
{cand}
[workload]
kernel = "rmsnorm"
kernel_args = ["--cols", "2048", "--tokens", "16"]
min_time_ms = 40
seeds = [1, 2]
"""


def test_slower_candidate_is_rejected_and_attributed(ouro_bin, lab_model_path, tmp_path):
    """A candidate made 25% slower in one op (swiglu) fails a 5% criterion, and the trace diff names
    swiglu. The fault spins in swiglu for 25% of the time since its previous call (OURO_FAULT=slow),
    so the run is 25% slower however fast the machine is at that moment: a fixed delay calibrated
    beforehand once came out as 6.3% on a loaded CI machine. 25%, not 10%: a ratio of 1/1.1 = 0.91
    lies 4% from the 0.95 bound, and on a busy CI host 40 pairs of prefill left its interval
    [0.888, 0.959] across it (inconclusive, 2026-12-06); the adversarial set's real-10pct-slowdown
    checks a 10% change against the 2% bounds of engine-speedup. Measured on prefill, which is
    compute-bound here, where decode's memory bandwidth swings more."""
    prompt_len = 128
    rec = run_spec(ouro_bin, tmp_path, f"""
        question = "Is a candidate with a delay in swiglu caught?"
        hypothesis = "It is about 20% slower in prefill (1/1.25), all of it in swiglu."
        level = "engine"
        repeats = 8
        max_repeats = 40
        trace = true
        criteria = ["candidate.prefill_tok_s >= 0.95 * baseline.prefill_tok_s"]
        [baseline]
        revision = "worktree"
        [candidate]
        revision = "worktree"
        env = {{ OURO_FAULT = "slow:swiglu:25" }}
        [workload]
        model = "{lab_model_path}"
        prompt_len = {prompt_len}
        gen_len = 0
        bench_repeats = 3
        threads = 2
        greedy_tokens = 4
        """)
    st = rec["stats"]["prefill_tok_s"]
    assert rec["verdict"] == "reject", (f"ratio {st['ratio']:.3f} CI {st['ci']} pairs {rec['pairs']} "
                                        f"others {rec['samples']['others_cores']}", rec["reasons"])
    assert rec["_rc"] == 3
    crit = [c for c in rec["criteria"] if c["expr"].startswith("candidate.prefill_tok_s")][0]
    assert crit["verdict"] == "fail"
    assert 0.65 < rec["stats"]["prefill_tok_s"]["ratio"] < 0.9
    assert rec["attribution"][0]["name"] == "swiglu", rec["attribution"]
    assert rec["attribution"][0]["delta_ms"] > 0
    assert any("swiglu" in r for r in rec["reasons"])
    # correctness is unaffected by a delay
    assert rec["correctness"]["top1_agreement"] == 1.0
    assert rec["correctness"]["greedy_match"] == 1.0


def test_identical_configurations_show_no_change(ouro_bin, tmp_path):
    """Two identical configurations: "no change" and no false reject in at least 19 of 20 runs."""
    changes, rejects = [], 0
    for i in range(20):
        rec = run_spec(ouro_bin, tmp_path, KERNEL_SPEC.format(cand=""), name=f"aa{i}.toml")
        changes.append(rec["stats"]["ns_per_op"]["change"])
        rejects += rec["verdict"] == "reject"
        assert rec["correctness"]["exact"] == 1.0
    assert changes.count("none") >= 19, changes
    assert rejects <= 1


def test_identical_request_returns_the_stored_record(ouro_bin, tmp_path):
    """Nobody re-rolls a measurement until a lucky number comes up: the same request (same binaries,
    options, workload, repeats, metrics and criteria; the question and note do not count) returns
    the stored record without measuring or appending; --force measures again and says so."""
    ledger = tmp_path / "ledger.jsonl"
    spec_a = write_spec(tmp_path, KERNEL_SPEC.format(cand="").replace("repeats = 5", "repeats = 2\nmax_repeats = 2"), "a.toml")
    spec_b = write_spec(tmp_path, KERNEL_SPEC.format(cand="").replace("repeats = 5", "repeats = 2\nmax_repeats = 2")
                        .replace("Is rmsnorm as fast", "Asked differently: is rmsnorm as fast"), "b.toml")

    def run(spec, *extra):
        p = lab(ouro_bin, tmp_path, "run", spec, "--ledger", ledger, "--bin", ouro_bin, "--quiet-wait", "5", *extra)
        assert p.returncode in (0, 3, 4), p.stderr
        return p

    p1 = run(spec_a, "--json", "--note", "first")
    first = json.loads(p1.stdout)
    assert first["id"] == "E0001" and len(first["measurement_key"]) == 64 and "reused" not in first
    p2 = run(spec_b, "--json", "--note", "second")
    second = json.loads(p2.stdout)
    assert second["reused"] is True and second["id"] == "E0001" and second["hash"] == first["hash"]
    assert second["identical_records"] == ["E0001"] and p2.returncode == p1.returncode
    assert "identical to E0001" in p2.stderr and "checking correctness" not in p2.stderr and p2.elapsed < 5
    p3 = run(spec_a)  # the text form says what happened
    assert p3.stdout.startswith("identical to E0001: returning the stored record (use --force to measure again)")
    assert len(ledger.read_text().splitlines()) == 1
    forced = json.loads(run(spec_a, "--json", "--force").stdout)
    assert forced["id"] == "E0002" and forced["forced"] is True and forced["force_of"] == "E0001"
    assert forced["measurement_key"] == first["measurement_key"] and "reused" not in forced
    assert len(ledger.read_text().splitlines()) == 2
    assert lab(ouro_bin, tmp_path, "verify", "--ledger", ledger).returncode == 0


def test_a_real_difference_is_found_by_the_same_spec(ouro_bin, tmp_path):
    """The statistics are not blind: the matmul kernel forced to the scalar reference is slower.
    10 ms timed windows, not 40: the scalar side runs each window many times longer (a run of this
    test took 40 s with 40 ms windows), and a difference of that size needs no long window."""
    spec = KERNEL_SPEC.format(cand='args = ["--isa", "scalar"]').replace('"rmsnorm"', '"matmul"').replace(
        '["--cols", "2048", "--tokens", "16"]', '["--type", "q4_1", "--rows", "256", "--cols", "576"]').replace(
        "min_time_ms = 40", "min_time_ms = 10")
    assert "min_time_ms = 10" in spec
    rec = run_spec(ouro_bin, tmp_path, spec)
    assert rec["stats"]["ns_per_op"]["change"] == "higher", rec["stats"]
    assert rec["verdict"] == "reject"


def memo_key(ouro_bin, model_path, text):
    p = subprocess.run([str(ouro_bin), "tokenize", text, "--json", "-m", str(model_path)], capture_output=True,
                       text=True, check=True)
    ids = json.loads(p.stdout)["ids"]
    return hashlib.sha256("".join(f"{i}," for i in ids).encode()).hexdigest()[:16]


def test_candidate_replaying_cached_outputs_is_caught_by_held_out_inputs(ouro_bin, lab_model_path, tmp_path):
    prompts = ["The capital of France is", "def fibonacci(n):"]
    memo = tmp_path / "memo"
    memo.mkdir()
    for text in prompts:  # the cheat: the baseline's answers for exactly the spec's inputs
        stem = memo / memo_key(ouro_bin, lab_model_path, text)
        subprocess.run([str(ouro_bin), "logits", "--text", text, "--all", "--out", f"{stem}.npy", "-m", str(lab_model_path)],
                       check=True, capture_output=True)
        g = subprocess.run([str(ouro_bin), "generate", "-p", text, "-n", "4", "--temp", "0", "--json", "-m",
                            str(lab_model_path)], check=True, capture_output=True, text=True)
        (memo.parent / "memo" / f"{stem.name}.gen.json").write_text(g.stdout)
    rec = run_spec(ouro_bin, tmp_path, f"""
        question = "Is a candidate that memorized the spec's inputs caught?"
        hypothesis = "It matches on the spec's prompts and fails on held-out ones."
        level = "engine"
        repeats = 2
        criteria = ["candidate.decode_tok_s >= 0.5 * baseline.decode_tok_s"]
        [baseline]
        revision = "worktree"
        [candidate]
        revision = "worktree"
        env = {{ OURO_FAULT = "memo:{memo}" }}
        [workload]
        model = "{lab_model_path}"
        prompts = {json.dumps(prompts)}
        prompt_len = 8
        gen_len = 8
        greedy_tokens = 4
        """)
    corr = rec["correctness"]
    assert corr["spec"]["top1_agreement"] == 1.0 and corr["spec"]["greedy_match"] == 1.0  # fooled on its inputs
    assert corr["heldout"]["top1_agreement"] < 0.5
    assert rec["verdict"] == "reject"
    assert any("correctness.top1_agreement" in r for r in rec["reasons"]), rec["reasons"]


@pytest.mark.parametrize("fault,needle", [("crash", "SIGABRT"), ("hang", "timed out")])
def test_crashing_and_hanging_candidates_are_rejected(ouro_bin, tmp_path, fault, needle):
    spec = KERNEL_SPEC.format(cand=f'env = {{ OURO_FAULT = "{fault}" }}').replace("repeats = 5", "repeats = 3\ntimeout = 4")
    rec = run_spec(ouro_bin, tmp_path, spec, timeout=120)
    assert rec["verdict"] == "reject"
    assert any(needle in r and "candidate" in r for r in rec["reasons"]), rec["reasons"]
    assert rec["_elapsed"] < 60


def test_malformed_specs_fail_before_anything_runs(ouro_bin, tmp_path):
    good = KERNEL_SPEC.format(cand="")
    cases = {
        "syntax": ("question = ", "TOML syntax"),
        "unknown key": (good.replace('level = "kernel"', 'level = "kernel"\nspeed = 1'), "speed"),
        "bad level": (good.replace('level = "kernel"', 'level = "gpu"'), "level"),
        "unknown metric": (good.replace("candidate.ns_per_op <=", "candidate.ns <="), "unknown metric 'ns'"),
        "malformed criterion": (good.replace("<= 1.05 *", "<= 1.05 * *"), "column"),
        "not a comparison": (good.replace("<= 1.05 * baseline.ns_per_op", "+ 1"), "comparison"),
        "unknown criteria file": (good.replace('level = "kernel"', 'level = "kernel"\ncriteria_file = "mine"'), "mine"),
        "criteria file for another level": (
            good.replace('level = "kernel"', 'level = "kernel"\ncriteria_file = "engine-no-regression"'), "not for level"),
        "unknown revision": (good.replace('revision = "worktree"', 'revision = "no-such-branch-xyz"', 1), "unknown revision"),
        "engine metric at serve level": (good.replace('level = "kernel"', 'level = "serve"').replace("ns_per_op", "decode_tok_s")
                                         .split("[workload]")[0], "unknown metric 'decode_tok_s' for level serve"),
        "trace at serve level": (good.replace('level = "kernel"', 'level = "serve"\ntrace = true')
                                 .replace("ns_per_op", "output_tok_s").split("[workload]")[0], "not available at level serve"),
        "concurrency below serve level": (good.replace("[workload]", "[workload]\nconcurrency = 4"),
                                          "only serve-level specs"),
    }
    for name, (text, needle) in cases.items():
        spec = write_spec(tmp_path, text, "bad.toml")
        p = lab(ouro_bin, tmp_path, "run", spec, "--no-ledger")
        assert p.returncode == 2, f"{name}: rc {p.returncode}\n{p.stderr}"
        assert needle in p.stderr, f"{name}: {p.stderr}"
        assert p.stderr.startswith("ouro: "), name
    # nothing was built or run: no worktree, no run folder
    assert not (tmp_path / "cache" / "ouro" / "lab" / "trees").exists()
    assert not (tmp_path / "cache" / "ouro" / "lab" / "runs").exists()
    p = lab(ouro_bin, tmp_path, "check", write_spec(tmp_path, good, "good.toml"))
    assert p.returncode == 0 and "correctness.max_rel_diff <= 1e-3" in p.stdout  # the default floor


SERVE_SPEC = """
question = "Do two servers answer the same at the same speed?"
hypothesis = "{hypothesis}"
level = "serve"
repeats = 2
max_repeats = 2
timeout = 120
criteria = ["candidate.output_tok_s >= 0.5 * baseline.output_tok_s"]
[baseline]
revision = "worktree"
args = ["--max-batch", "8"]
[candidate]
revision = "worktree"
{cand}
[workload]
model = "{model}"
prompt_len = 16
gen_len = 8
concurrency = 4
requests = 8
threads = 2
greedy_tokens = 6
"""


def test_serve_level_drives_both_servers_with_loadtest(ouro_bin, model_path, tmp_path):
    """A serve-level spec starts each side's `ouro serve` with its flags, loads it with `ouro
    loadtest`, compares greedy texts (spec seed and a held-out one) and the served figures; a
    candidate whose server crashes is rejected with the reason."""
    rec = run_spec(ouro_bin, tmp_path, SERVE_SPEC.format(hypothesis="A batch of 8 or 16 answers the same.", model=model_path,
                                                          cand='args = ["--max-batch", "16"]'), timeout=900)
    assert rec["correctness"]["spec"]["greedy_match"] == 1.0 and rec["correctness"]["heldout"]["greedy_match"] == 1.0
    assert rec["verdict"] != "reject", rec["reasons"]
    st = rec["stats"]["output_tok_s"]
    assert st["baseline_median"] > 0 and st["candidate_median"] > 0
    assert rec["revisions"]["candidate"]["args"] == ["--max-batch", "16"]
    bad = run_spec(ouro_bin, tmp_path, SERVE_SPEC.format(hypothesis="A crashing server is caught.", model=model_path,
                                                          cand='env = { OURO_FAULT = "crash" }'), name="crash.toml",
                   timeout=900)
    assert bad["verdict"] == "reject"
    assert any("candidate" in r and "correctness run" in r for r in bad["reasons"]), bad["reasons"]


def test_ledger_records_rerun_verify_and_tamper(ouro_bin, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    spec = write_spec(tmp_path, KERNEL_SPEC.format(cand="").replace("repeats = 5", "repeats = 3"))
    # Any verdict (0 accept, 3 reject, 4 inconclusive) is recorded: this test is about the ledger,
    # and three pairs of identical binaries on a busy host can end in any of them (a false reject
    # at three pairs once in CI, 2026-12-06; the false-alarm rate is the test above's).
    p = lab(ouro_bin, tmp_path, "run", spec, "--ledger", ledger, "--bin", ouro_bin, "--note", "first try",
            "--quiet-wait", "5")
    assert p.returncode in (0, 3, 4), p.stdout + p.stderr
    assert "recorded as E0001" in p.stdout
    p = lab(ouro_bin, tmp_path, "rerun", "E0001", "--ledger", ledger, "--bin", ouro_bin, "--json", "--quiet-wait", "5")
    assert p.returncode in (0, 3, 4), p.stdout + p.stderr
    rerun = json.loads(p.stdout)
    assert rerun["kind"] == "rerun" and rerun["rerun_of"] == "E0001" and rerun["id"] == "E0002"
    assert "ns_per_op" in rerun["rerun_comparison"]["metrics"]
    lines = ledger.read_text().splitlines()
    first = json.loads(lines[0])
    for key in ("spec", "revisions", "machine", "command", "samples", "stats", "correctness", "criteria", "verdict",
                "reasons", "note", "hash", "prev"):
        assert key in first, key
    assert first["note"] == "first try"
    assert len(first["samples"]["bandwidth_gb_s"]) == first["pairs"]
    assert json.loads(lines[1])["prev"] == first["hash"]
    assert lab(ouro_bin, tmp_path, "verify", "--ledger", ledger).returncode == 0
    show = lab(ouro_bin, tmp_path, "show", "E0001", "--ledger", ledger)
    assert show.returncode == 0 and "rmsnorm" in show.stdout
    # edit one sample in the first record
    first["samples"]["baseline"]["ns_per_op"][0] *= 0.5
    ledger.write_text("\n".join([json.dumps(first, separators=(",", ":"), sort_keys=True)] + lines[1:]) + "\n")
    p = lab(ouro_bin, tmp_path, "verify", "--ledger", ledger)
    assert p.returncode == 1 and "line 1" in (p.stdout + p.stderr)
    # and a damaged ledger is never extended
    p = lab(ouro_bin, tmp_path, "run", spec, "--ledger", ledger, "--bin", ouro_bin, "--quiet-wait", "5")
    assert p.returncode == 1 and len(ledger.read_text().splitlines()) == 2


@pytest.mark.parametrize("path,old,new,kernel", [
    ("src/kernels/kda_vec.inc", "  constexpr int kChunk = 16;", "  constexpr int kChunk = 8;", "kda_recurrent"),
    ("src/kernels/kda.cpp", "  float* xd = e + dk;                     // dk", "  float* xd = e + dk;  // dk", "kda_chunk"),
    ("src/kernels/moe.cpp", "  std::fill(s.count.begin(), s.count.end(), 0);\n", "  s.count.assign(s.count.size(), 0);\n", "moe"),
])
def test_plan_routes_a_kernel_change_to_its_microbenchmark(ouro_bin, tmp_path, path, old, new, kernel):
    """A change inside the vector KDA recurrence (kda_vec.inc) is a kda_recurrent kernel spec, one
    inside the chunked form (kda_chunked) a kda_chunk spec, one in the MoE routing (moe_route) a moe
    spec, each valid as written."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    f = repo / path
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, new, 1))
    p = lab(ouro_bin, tmp_path, "plan", base, "worktree", "-o", tmp_path / "planned", "--json", cwd=repo)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert kernel in plan["kernels"] and {s["level"] for s in plan["specs"]} == {"kernel"}, plan
    spec = next(s for s in plan["specs"] if s["path"].endswith(f"kernel-{kernel}.toml"))
    check = lab(ouro_bin, tmp_path, "check", spec["path"], cwd=repo)
    assert check.returncode == 0, check.stderr


def test_plan_routes_changes_to_the_cheapest_level(ouro_bin, tmp_path):
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]

    def commit(path, old, new, msg):
        f = repo / path
        text = f.read_text()
        assert old in text, (path, old)
        f.write_text(text.replace(old, new, 1))
        subprocess.run([*git, "commit", "-qam", msg], check=True)
        return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    c1 = commit("src/kernels/ops.cpp", "const float scale = 1.0f / std::sqrt(ss", "const float scale = 1.0f / sqrtf(ss",
               "touch the body of rmsnorm")
    out = tmp_path / "planned"
    p = lab(ouro_bin, tmp_path, "plan", base, c1, "-o", out, "--json", cwd=repo)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["kernels"] == ["rmsnorm"], plan
    assert [s["level"] for s in plan["specs"]] == ["kernel"]
    spec = plan["specs"][0]["path"]
    check = lab(ouro_bin, tmp_path, "check", spec, cwd=repo)
    assert check.returncode == 0, check.stderr  # the proposed spec is valid as written
    c2 = commit("src/core/thread_pool.cpp", "#include", "// pool\n#include", "touch the pool")
    plan = json.loads(lab(ouro_bin, tmp_path, "plan", c1, c2, "-o", out, "--json", cwd=repo).stdout)
    assert [s["level"] for s in plan["specs"]] == ["engine"]
    c3 = commit("README.md", "#", "# ", "docs only")
    plan = json.loads(lab(ouro_bin, tmp_path, "plan", c2, c3, "-o", out, "--json", cwd=repo).stdout)
    assert plan["specs"] == [] and "no speed experiment" in plan["notes"][0]
    p = lab(ouro_bin, tmp_path, "plan", "--base-args", "-t 1", "--cand-args", "-t 2", "-o", out, "--json", cwd=repo)
    plan = json.loads(p.stdout)
    assert plan["touched"] == ["--threads: 1 -> 2"] and [s["level"] for s in plan["specs"]] == ["engine"]
    p = lab(ouro_bin, tmp_path, "plan", "--base-args", "--isa avx2", "--cand-args", "--isa avx512", "-o", out, "--json",
            cwd=repo)
    assert [s["level"] for s in json.loads(p.stdout)["specs"]] == ["kernel", "engine"]


# ---- a stand-in project: real git history, real CMake builds, in seconds ----------------------

FAKE_MAIN = r"""
// A stand-in `ouro` that speaks the lab's microbench protocol: spins DELAY_US per op, --iters N of
// them between the @timed-start/@timed-end markers the lab stamps.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "delay.h"
static double spin_ns() {
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(DELAY_US)) {}
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}
int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "microbench") != 0) return 2;
  const char* out = nullptr; long seed = 0, iters = 20; bool json = false, markers = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--markers")) markers = true;
  }
  double best = 1e300, total = 0;
  if (markers) { std::puts("@timed-start"); std::fflush(stdout); }
  for (long k = 0; k < iters; ++k) { double t = spin_ns(); total += t; if (t < best) best = t; }
  if (markers) { std::puts("@timed-end"); std::fflush(stdout); }
  if (out) {
    FILE* f = std::fopen(out, "wb");
    const char head[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    std::string h = head; while ((10 + h.size() + 1) % 64) h += ' '; h += '\n';
    unsigned short hl = (unsigned short)h.size();
    std::fwrite("\x93NUMPY\x01\x00", 1, 8, f); std::fwrite(&hl, 2, 1, f); std::fwrite(h.data(), 1, h.size(), f);
    float v[2] = {(float)seed, 1.0f}; std::fwrite(v, 4, 2, f); std::fclose(f);
  }
  if (json) std::printf("{\"ns_per_op\": %f, \"total_ns\": %f, \"gb_s\": 1.0, \"gflops\": 1.0}\n", best, total);
  return 0;
}
"""

FAKE_SPEC = """
question = "Is the stand-in's op within 20% of v0?"
hypothesis = "A commit made it slower."
level = "kernel"
repeats = 3
max_repeats = 15
criteria = ["candidate.ns_per_op <= 1.2 * baseline.ns_per_op"]
[baseline]
revision = "v0"
[candidate]
revision = "{cand}"
[workload]
kernel = "spin"
seeds = [1]
min_time_ms = 40
"""


@pytest.fixture
def fake_repo(tmp_path):
    repo = tmp_path / "fake"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\nproject(fake CXX)\n"
                                         "add_executable(ouro main.cpp)\n")
    (repo / "main.cpp").write_text(FAKE_MAIN)
    commits = []
    for i, delay in enumerate([300, 300, 300, 600, 600, 600]):
        (repo / "delay.h").write_text(f"#define DELAY_US {delay}\n")
        (repo / "NOTES").write_text(f"step {i}\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", f"step {i}"], check=True)
        commits.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
        if i == 0:
            subprocess.run([*git, "tag", "v0"], check=True)
    return repo, commits, git


def test_bisect_finds_the_first_slow_revision(ouro_bin, tmp_path, fake_repo):
    repo, commits, _ = fake_repo
    spec = write_spec(tmp_path, FAKE_SPEC.format(cand="HEAD"))
    p = lab(ouro_bin, tmp_path, "bisect", "--good", commits[0], "--bad", commits[-1], spec, "--json", "--no-ledger",
            "--quiet-wait", "2", cwd=repo)
    # stdout holds the steps' verdicts and the error (it failed once in a full run, rc 1 after the
    # third revision's three pairs; the rerun passed): printed so the next failure says why.
    assert p.returncode == 0, p.stderr + p.stdout
    out = json.loads(p.stdout)
    assert out["good_verdict"] == "accept" and out["bad_verdict"] == "reject"
    assert out["first_bad"] == commits[3]
    tested = [s["commit"] for s in out["steps"]]
    assert len(tested) <= 4 and len(set(tested)) == len(tested)  # binary search, builds reused
    trees = list((tmp_path / "cache" / "ouro" / "lab" / "trees").iterdir())
    assert len(trees) == len(set(tested))  # one worktree per revision tested (v0 == commits[0])


def test_a_candidate_that_does_not_build_is_rejected(ouro_bin, tmp_path, fake_repo):
    repo, commits, git = fake_repo
    (repo / "main.cpp").write_text("this is not C++\n")
    subprocess.run([*git, "commit", "-qam", "broken"], check=True)
    spec = write_spec(tmp_path, FAKE_SPEC.format(cand="HEAD"))
    p = lab(ouro_bin, tmp_path, "run", spec, "--json", "--no-ledger", "--quiet-wait", "2", cwd=repo)
    assert p.returncode == 3, p.stderr
    rec = json.loads(p.stdout)
    assert rec["verdict"] == "reject" and "does not build" in rec["reasons"][0]
