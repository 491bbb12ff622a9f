"""The lab's adversarial set (docs/lab.md, "A lab an agent cannot fool"): candidates that try to fool
`ouro lab run`, each built from the same binary with one OURO_FAULT adversary on (src/core/fault.h),
and the trust check that must reject it. Shared by tests/lab/test_lab_trust.py (CI) and
bench/lab_selftest.py (the rates in docs/lab.md). Two true positives ride along: a real 10% speed-up
must be accepted and a real 10% slow-down rejected by the same criteria.
"""
import textwrap

ENGINE = """
    question = "{question}"
    hypothesis = "{hypothesis}"
    level = "engine"
    repeats = 5
    max_repeats = {max_repeats}
    criteria_file = "engine-speedup"
    [baseline]
    revision = "worktree"
    {baseline}
    [candidate]
    revision = "worktree"
    env = {{ OURO_FAULT = "{fault}" }}
    [workload]
    model = "{model}"
    prompt_len = 64
    gen_len = 32
    bench_repeats = 2
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

# name: (template, fault, expected verdict, expected trust code or None, question, extra format fields)
ADVERSARIES = {
    "inflates-bench": (ENGINE, "inflate:bench:1.3", "reject", "measurement_mismatch",
                       "Does a candidate whose `ouro bench` reports 1.3x its decode speed pass?", {}),
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
    # True positives: the same criteria must still see real changes.
    "real-10pct-speedup": (ENGINE, "", "accept", None, "Is a candidate without the baseline's 10% delay accepted?",
                           {"baseline": 'env = { OURO_FAULT = "slow:swiglu:10" }', "max_repeats": 15}),
    "real-10pct-slowdown": (ENGINE, "slow:swiglu:10", "reject", None, "Is a candidate 10% slower rejected?", {}),
}


def spec_text(name, model):
    tpl, fault, _, _, question, extra = ADVERSARIES[name]
    fields = {"question": question, "hypothesis": "The lab sees through it.", "fault": fault, "model": model,
              "threads": 2, "baseline": "", "max_repeats": 5}
    fields.update(extra)
    return textwrap.dedent(tpl.format(**fields))


def judge_outcome(name, rec):
    """'ok' when the record is what the adversarial set expects, else a sentence saying what is wrong."""
    _, _, verdict, code, _, _ = ADVERSARIES[name]
    failed = [t["check"] for t in rec.get("trust", []) if t["verdict"] == "fail"]
    if verdict == "accept":
        if rec["verdict"] != "accept":
            return f"a real speed-up was not accepted: {rec['verdict']} ({rec['reasons'][:2]})"
        return "ok"
    if rec["verdict"] == "accept":
        return f"FALSE ACCEPT: {rec['reasons'][:2]}"
    if rec["verdict"] != "reject":
        return f"not rejected but {rec['verdict']}: {rec['reasons'][:2]}"
    if code is not None and code != "unstable" and code not in failed:
        return f"rejected, but not by {code} (trust failures {failed}; reasons {rec['reasons'][:2]})"
    if code == "unstable" and rec.get("rejected_for") != "unstable":
        return f"rejected, but not as unstable: {rec['reasons'][:2]}"
    return "ok"
