"""The adversarial set in CI: each candidate of tests/lab_adversaries.py tries to fool `ouro lab run`
(an inflated self-report, a layer skipped when it guesses it is timed, replayed answers for inputs it
has seen, every idle CPU taken beyond -t, a crash or a hang in one run) and must be rejected with
the trust check that names the trick; a real 10% speed-up must still be accepted. The candidates are
the binary under test with one OURO_FAULT adversary on (src/core/fault.h); the rates over repeated
runs are bench/lab_selftest.py's (docs/lab.md)."""
import os
import statistics

import pytest

from lab_adversaries import ADVERSARIES, judge_outcome, spec_text
from test_lab import run_spec


@pytest.mark.parametrize("name", sorted(ADVERSARIES))
def test_adversary_is_rejected_for_the_right_reason(ouro_bin, model_path, tmp_path, name):
    if name == "fast-only-when-idle" and (os.cpu_count() or 1) < 2:
        pytest.skip("needs a second CPU for the candidate to take")
    rec = run_spec(ouro_bin, tmp_path, spec_text(name, model_path), timeout=900)
    assert judge_outcome(name, rec) == "ok", (judge_outcome(name, rec), rec.get("trust"), rec["reasons"])
    if ADVERSARIES[name][2] == "reject":
        assert rec["_rc"] == 3
    if name == "inflates-bench":
        # The Done-means case: the lie is recorded beside the lab's figures and named.
        assert rec["rejected_for"] == "measurement_mismatch", rec["reasons"]
        bench = rec["bench_self_report"]
        lab_c = rec["stats"]["decode_tok_s"]["candidate_median"]
        assert statistics.median(bench["candidate"]["decode_tok_s"]) > 1.15 * lab_c  # three runs of its bench
        assert rec["reasons"][0].startswith("measurement_mismatch: ")
    if name == "skips-layer-when-timed":
        assert rec["rejected_for"] == "timed_outputs_differ"
        assert rec["correctness"]["spec"]["greedy_match"] == 1.0  # the checked runs were honest
        assert rec["correctness"]["timed"]["greedy_match"] < 1.0
    if name == "real-10pct-speedup":
        assert all(t["verdict"] != "fail" for t in rec["trust"]), rec["trust"]
        assert rec["stats"]["decode_tok_s"]["ratio"] > 1.03


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
