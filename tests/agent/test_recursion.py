"""Recursion: `ouro agent --llm` against `ouro serve`. Ouro's own model proposes Ouro's next
experiment, through the same OpenAI-compatible request any endpoint gets, with the proposal's JSON
schema as `response_format`.

The 135M model's proposals are not good ones; what this checks is the plumbing and the contract:
every reply the server gives parses and matches the agent's schema (constrained decoding), so no
step is skipped for invalid JSON, and every step ends as a ledger record (a refusal with its reason,
or a lab run) followed by the account.
"""
import json
import pathlib
import subprocess
import sys
import time

_SERVE = pathlib.Path(__file__).resolve().parent.parent / "serve"
if str(_SERVE) not in sys.path:
    sys.path.insert(0, str(_SERVE))

import servelib  # noqa: E402

from ouro_testlib import ROOT, isolated_cache_env  # noqa: E402


def test_agent_against_ouro_serve(ouro_bin, model_path, tmp_path):
    ouro_bin = pathlib.Path(ouro_bin).resolve()
    srv = servelib.Server(ouro_bin, model_path)
    try:
        model = json.loads(servelib.get(srv.url, "/v1/models").body)["data"][0]["id"]
        ledger = tmp_path / "ledger.jsonl"
        env = isolated_cache_env(tmp_path / "cache")
        env.pop("OPENAI_API_KEY", None)
        t0 = time.monotonic()
        p = subprocess.run(
            [str(ouro_bin), "agent", "--goal", "raise decode throughput", "--criteria", "engine-speedup",
             "--llm", srv.url + "/v1", "--llm-model", model, "--budget", "2", "--json", "--base-args", "-t 2",
             "-m", str(model_path), "--prompt-len", "16", "--gen-len", "16", "--repeats", "2",
             "--bin", str(ouro_bin), "--ledger", str(ledger), "--quiet-wait", "5"],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
        print(f"agent against ouro serve: {time.monotonic() - t0:.1f} s")
        assert p.returncode == 0, p.stderr[-3000:]
        account = json.loads(p.stdout)
    finally:
        rc = srv.stop(timeout=30)
    assert rc == 0, srv.tail()

    recs = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    assert recs and recs[-1]["kind"] == "agent-account" and recs[-1]["id"] == account["id"]
    steps = recs[-1]["steps"]
    assert len(steps) == 2, steps
    # The server's replies always parsed and matched the schema: nothing was retried or skipped.
    assert recs[-1]["tried"]["llm_retries"] == 0, recs[-1]["tried"]
    assert all(s["outcome"] != "skipped" for s in steps), steps
    for r in recs[:-1]:
        if r.get("kind") == "agent-step":  # refused (or error) before any run, with its reason
            assert r["verdict"] in ("refused", "error") and r["reasons"], r
            assert "proposal" in r and isinstance(r["proposal"], dict), r
        else:  # a lab run of the model's proposal
            assert r["verdict"] in ("accept", "reject", "inconclusive"), r
            assert "agent" in r["note"]
    v = subprocess.run([str(ouro_bin), "lab", "verify", "--ledger", str(ledger)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
