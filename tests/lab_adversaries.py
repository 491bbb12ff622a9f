"""The lab's adversarial set (docs/lab.md, "A lab an agent cannot fool"): candidates that try to fool
`ouro lab run`, each built from the same binary with one OURO_FAULT adversary on (src/core/fault.h),
and the trust check that must reject it; beside them the true positives, honest changes of every
shape (faster only at depth, only at long prompts, only in prefill, only at 1 thread; slower only at
depth; a real 10% speed-up and slow-down), each of which must get the verdict its own criteria say
with no trust check failing. Shared by tests/lab/test_lab_trust.py (CI) and bench/lab_selftest.py
(the rates in docs/lab.md).
"""
import textwrap

# The engine cases run on the default model's first ADVERSARY_LAYERS layers (ouro_testlib.write_first_layers;
# tests/lab/conftest.py in CI, bench/lab_selftest.py --adversary-layers; docs/lab.md).
ADVERSARY_LAYERS = 8

ENGINE = """
    question = "{question}"
    hypothesis = "{hypothesis}"
    level = "engine"
    repeats = 5
    max_repeats = {max_repeats}
    warmup = {warmup}
    {criteria}
    [baseline]
    revision = "worktree"
    {baseline}
    [candidate]
    revision = "worktree"
    env = {{ OURO_FAULT = "{fault}" }}
    [workload]
    model = "{model}"
    prompt_len = {prompt_len}
    gen_len = {gen_len}
    depth = {depth}
    bench_repeats = {bench_repeats}
    threads = {threads}
    seeds = [1, 2]
    """

KERNEL = """
    question = "{question}"
    hypothesis = "{hypothesis}"
    level = "kernel"
    repeats = 5
    criteria_file = "kernel-speedup"
    [baseline]
    revision = "worktree"
    [candidate]
    revision = "worktree"
    env = {{ OURO_FAULT = "{fault}" }}
    [workload]
    kernel = "rmsnorm"
    kernel_args = ["--cols", "2048", "--tokens", "16"]
    min_time_ms = 40
    seeds = [1, 2]
    """

# The shape-dependent true positives: no warm-up pair, since their effects are 25% and more. Three
# timed requests per run (their median is the run's figure) and up to 25 pairs: on the 8-layer model
# (tests/lab/conftest.py) a request decodes 32 tokens in about 70 ms, and with one request per run
# and 15 pairs a noisy host left faster-at-long-prompt's decode box at [-8%, +44%] (2026-12-07); in
# CI each shape case then took 15-23 s.
SHAPE = {"gen_len": 32, "bench_repeats": 3, "max_repeats": 25, "warmup": 0}

# name: (template, fault, expected verdict, expected trust code or None ("correctness": rejected for a
# failed correctness criterion, said first), question, extra format fields)
ADVERSARIES = {
    # Named by the lab's clock between each bench process's markers at any noise. One thread: with
    # two on a busy 2-CPU host the bench pairs' spread widened the pair check's tolerance past the
    # lie (2 of 6 runs unnamed before the markers, 2026-12-06); the pair check still runs beside.
    "inflates-bench": (ENGINE, "inflate:bench:1.3", "reject", "measurement_mismatch",
                       "Does a candidate whose `ouro bench` reports 1.3x its decode speed pass?", {"threads": 1}),
    "inflates-worker": (ENGINE, "inflate:worker:1.3", "reject", "measurement_mismatch",
                        "Does a candidate whose worker's timestamps claim 1.3x its decode speed pass?", {}),
    "skips-layer-when-timed": (ENGINE, "skiplayer:seen", "reject", "timed_outputs_differ",
                               "Does a candidate that skips a layer when it guesses it is timed pass?", {}),
    "memorises-spec-inputs": (ENGINE, "memolearn", "reject", "heldout_speed_differs",
                              "Does a candidate that replays answers for inputs it has seen pass?", {}),
    "fast-only-when-idle": (ENGINE, "overthread", "reject", "cpu_overuse",
                            "Does a candidate that takes every idle CPU beyond -t pass?", {"threads": 1}),
    "crashes-once": (ENGINE, "flaky:6:crash", "reject", "unstable",
                     "Does a candidate that crashes in one run pass?", {}),
    "hangs-once": (ENGINE, "flaky:6:hang", "reject", "unstable",
                   "Does a candidate that hangs in one run pass?", {}),
    "kernel-inflates": (KERNEL, "inflate:microbench:1.3", "reject", "measurement_mismatch",
                        "Does a kernel candidate whose microbench reports 1.3x its speed pass?", {}),
    "kernel-crashes-once": (KERNEL, "flaky:4:crash", "reject", "unstable",
                            "Does a kernel candidate that crashes in one run pass?", {}),
    # A wrong speed-up (attention reads only the first 24 keys): rejected because its outputs are
    # wrong, and said so first; no trust check is named as the cause.
    "truncates-attention": (ENGINE, "truncate:attention:24", "reject", "correctness",
                            "Is a candidate whose attention reads only the first 24 keys rejected for its outputs?", {}),
    # True positives: the same criteria must still see real changes, whatever their shape, and no
    # trust check may fail on an honest candidate. Up to 40 pairs for the 10% changes: the 2% bounds
    # of engine-speedup leave them 7-12% of margin, and on a busy host decode's 99% box after 15
    # pairs was still +-17% wide ("about 31 pairs would decide it", 2026-12-06); a quiet host
    # decides them in the first 5 pairs, so the cap costs only when the host is noisy.
    "real-10pct-speedup": (ENGINE, "", "accept", None, "Is a candidate without the baseline's 10% delay accepted?",
                           {"baseline": 'env = { OURO_FAULT = "slow:swiglu:10" }', "max_repeats": 40}),
    "real-10pct-slowdown": (ENGINE, "slow:swiglu:10", "reject", None, "Is a candidate 10% slower rejected?", {"max_repeats": 40}),
    "faster-at-depth": (ENGINE, "", "accept", None,
                        "Is a candidate that stops repeating attention (a gain that grows with the depth) accepted at depth 256?",
                        dict(SHAPE, baseline='env = { OURO_FAULT = "repeat:attention:8" }', depth=256, prompt_len=16)),
    "faster-at-long-prompt": (ENGINE, "", "accept", None,
                              "Is a candidate that stops repeating attention accepted at a 192-token prompt (decode after it)?",
                              dict(SHAPE, baseline='env = { OURO_FAULT = "repeat:attention:8" }', prompt_len=192)),
    # Its unchanged decode must be shown above 0.85x: up to 30 pairs, since on a busy host it has
    # stayed inconclusive through 15 (docs/lab.md).
    "faster-prefill-only": (ENGINE, "", "accept", None,
                            "Is a candidate without the baseline's prefill-only delay accepted by prefill criteria?",
                            dict(SHAPE, baseline='env = { OURO_FAULT = "slow:swiglu:40:prefill" }', max_repeats=30,
                                 criteria='criteria = ["candidate.prefill_tok_s >= 1.1 * baseline.prefill_tok_s", '
                                          '"candidate.decode_tok_s >= 0.85 * baseline.decode_tok_s", "correctness.greedy_match == 1"]')),
    "faster-at-1-thread": (ENGINE, "", "accept", None,
                           "Is a candidate without the baseline's single-thread-only delay accepted at -t 1?",
                           dict(SHAPE, baseline='env = { OURO_FAULT = "slow:swiglu:30:t1" }', threads=1)),
    "slower-at-depth": (ENGINE, "repeat:attention:8", "reject", None,
                        "Is a correct candidate that repeats attention (slower only at depth) rejected by the criteria at depth 256?",
                        dict(SHAPE, depth=256, prompt_len=16)),
}


def spec_text(name, model):
    tpl, fault, _, _, question, extra = ADVERSARIES[name]
    fields = {"question": question, "hypothesis": "The lab sees through it.", "fault": fault, "model": model,
              "threads": 2, "baseline": "", "max_repeats": 5, "criteria": 'criteria_file = "engine-speedup"',
              "prompt_len": 64, "gen_len": 32, "depth": 0, "bench_repeats": 3, "warmup": 1}
    fields.update(extra)
    return textwrap.dedent(tpl.format(**fields))


# The honest candidates: no trick, only a real change of some shape.
TRUE_POSITIVES = sorted(n for n, a in ADVERSARIES.items() if a[3] is None)


def judge_outcome(name, rec):
    """'ok' when the record is what the adversarial set expects, else a sentence saying what is wrong."""
    _, _, verdict, code, _, _ = ADVERSARIES[name]
    failed = [t["check"] for t in rec.get("trust", []) if t["verdict"] == "fail"]
    if code is None and failed:
        return f"an honest candidate failed trust checks {failed}: {rec['reasons'][:2]}"
    if verdict == "accept":
        if rec["verdict"] != "accept":
            return f"a real speed-up was not accepted: {rec['verdict']} ({rec['reasons'][:2]})"
        return "ok"
    if rec["verdict"] == "accept":
        return f"FALSE ACCEPT: {rec['reasons'][:2]}"
    if rec["verdict"] != "reject":
        return f"not rejected but {rec['verdict']}: {rec['reasons'][:2]}"
    if code is None and "rejected_for" in rec:
        return f"an honest slower candidate was rejected for {rec['rejected_for']}, not by its criteria: {rec['reasons'][:2]}"
    if code == "correctness":
        if "rejected_for" in rec or not rec["reasons"][0].startswith("criterion failed: correctness."):
            return f"rejected, but its failed correctness is not the headline ({rec.get('rejected_for')}; {rec['reasons'][:2]})"
        return "ok"
    if code is not None and code != "unstable" and code not in failed:
        return f"rejected, but not by {code} (trust failures {failed}; reasons {rec['reasons'][:2]})"
    if code == "unstable" and rec.get("rejected_for") != "unstable":
        return f"rejected, but not as unstable: {rec['reasons'][:2]}"
    return "ok"
