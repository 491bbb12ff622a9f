"""The adversarial set in CI: each candidate of tests/lab_adversaries.py tries to fool `ouro lab run`
(an inflated self-report, a layer skipped when it guesses it is timed, replayed answers for inputs it
has seen, every idle CPU taken beyond -t, a crash or a hang in one run) and must be rejected with
the trust check that names the trick; a candidate whose attention skips keys is rejected for its
wrong outputs, said first. The true positives ride along: honest changes of every shape (faster at
depth, at long prompts, in prefill only, at 1 thread only; slower at depth; 10% either way) get the
verdict their criteria say with no trust check failing. The candidates are the binary under test
with one OURO_FAULT fault on (src/core/fault.h); the rates over repeated runs are
bench/lab_selftest.py's (docs/lab.md)."""
import os
import statistics

import pytest

from lab_adversaries import ADVERSARIES, judge_outcome, spec_text
from test_lab import run_spec


@pytest.mark.parametrize("name", sorted(ADVERSARIES))
def test_adversary_is_rejected_for_the_right_reason(ouro_bin, lab_model_path, tmp_path, name):
    if name == "fast-only-when-idle" and (os.cpu_count() or 1) < 2:
        pytest.skip("needs a second CPU for the candidate to take")
    rec = run_spec(ouro_bin, tmp_path, spec_text(name, lab_model_path), timeout=900)
    assert judge_outcome(name, rec) == "ok", (judge_outcome(name, rec), rec.get("trust"), rec["reasons"])
    if ADVERSARIES[name][2] == "reject":
        assert rec["_rc"] == 3
    if name == "inflates-bench":
        # The Done-means case: the lie is recorded beside the lab's figures and named.
        assert rec["rejected_for"] == "measurement_mismatch", rec["reasons"]
        # Each bench process's figure beside the lab's clock between that process's markers: the same
        # process, so host drift cancels (against the timed pairs' median, taken minutes apart, a busy
        # CI host once left the lie at 1.01x, 2026-12-06).
        cand = rec["bench_self_report"]["candidate"]
        said = [s / c for s, c in zip(cand["decode_tok_s"], cand["lab_clock"]["decode_tok_s"])]
        assert len(said) >= 2 and statistics.median(said) > 1.15, said
        assert rec["reasons"][0].startswith("measurement_mismatch: ")
        # Named process by process on the lab's clock between each bench process's markers.
        assert "(between its markers): the candidate's own timing says 1.3" in rec["reasons"][0], rec["reasons"][0]
    if name == "skips-layer-when-timed":
        assert rec["rejected_for"] == "timed_outputs_differ"
        assert rec["correctness"]["spec"]["greedy_match"] == 1.0  # the checked runs were honest
        assert rec["correctness"]["timed"]["greedy_match"] < 1.0
    if name == "real-10pct-speedup":
        assert all(t["verdict"] != "fail" for t in rec["trust"]), rec["trust"]
        assert rec["stats"]["decode_tok_s"]["ratio"] > 1.03
    if name == "truncates-attention":
        assert "rejected_for" not in rec, rec["reasons"]
        assert rec["reasons"][0].startswith("criterion failed: correctness."), rec["reasons"]
        assert rec["correctness"]["spec"]["greedy_match"] < 1.0
    if name in ("faster-at-depth", "slower-at-depth", "faster-at-long-prompt"):
        # The cross-check ran each side's `ouro bench` on the work the lab timed: prefill after the
        # depth, decode steps after depth + prompt, on the spec's threads.
        w = dict({"depth": 0}, **rec["spec"]["workload"])
        argv = rec["bench_self_report"]["argv"]
        flags = {k: dict(zip(v[1::2], v[2::2])) for k, v in ((k, [a for a in v if a != "--json"]) for k, v in argv.items())}
        assert flags["prefill_tok_s"]["--depth"] == str(w["depth"]) and flags["prefill_tok_s"]["--prompt-len"] == str(w["prompt_len"])
        assert flags["decode_tok_s"]["--depth"] == str(w["depth"] + w["prompt_len"])
        assert flags["decode_tok_s"]["--gen-len"] == str(w["gen_len"] - 1)
        ratio = rec["stats"]["decode_tok_s"]["ratio"]
        bench = rec["bench_self_report"]
        own = statistics.median(c / b for c, b in zip(bench["candidate"]["decode_tok_s"], bench["baseline"]["decode_tok_s"]))
        assert (ratio > 1.1 and own > 1.1) if name.startswith("faster") else (ratio < 0.9 and own < 0.9), (ratio, own)


def test_worker_protocol_errors_do_not_stop_it(ouro_bin, model_path):
    """Bad requests get an error line and the worker reads on; end of input ends it cleanly."""
    import json
    import subprocess
    reqs = ['not json', '{"tokens": [1, 2], "n": -1}', '{"tokens": [999999999], "n": 1}', '{"tokens": [], "n": 1}',
            '{"tokens": [1], "n": 1, "reset": "yes"}', '{"tokens": [1, 2, 3], "n": 3}']
    p = subprocess.run([str(ouro_bin), "worker", "-m", str(model_path), "-t", "1"], input="\n".join(reqs) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert lines[0]["ready"] is True and lines[0]["n_vocab"] == 49152
    assert [("error" in x) for x in lines[1:6]] == [True] * 5
    toks = [x for x in lines[6:] if "tok" in x]
    assert len(toks) == 3 and lines[-1]["done"] is True
    assert all(b["t_ns"] >= a["t_ns"] for a, b in zip(toks, toks[1:]))
    # The same request from a fresh process streams the same greedy ids.
    q = subprocess.run([str(ouro_bin), "worker", "-m", str(model_path), "-t", "2"], input=reqs[-1] + "\n",
                       capture_output=True, text=True, timeout=120)
    assert [x["tok"] for x in map(json.loads, q.stdout.splitlines()) if "tok" in x] == [x["tok"] for x in toks]
