#!/usr/bin/env python3
"""Served throughput and latency: `ouro serve` against llama.cpp's own C++ server (`llama-server`,
built by scripts/build_llama_tools.sh from the pinned sdist) and, as a second row when asked,
llama-cpp-python's Python server; same GGUF, same threads, same `ouro loadtest`, in one run.

Every server is started once and stays up; the scenarios run alternately (ouro, peer, peer, ouro,
... the order flips each round) so that drifts of the shared machine's memory bandwidth hit all.
Scenarios (each a closed loop of streamed completions at temperature 0 on random-word prompts):
  c1    concurrency 1, prompt ~32 tokens, 64 generated      (single-stream rate)
  c16   concurrency 16, prompt ~32 tokens, 64 generated     (batched decode)
  ttft8 concurrency 8, prompt ~512 tokens, 16 generated     (time to first token under load)
Ouro runs in two configurations, each its own server: "ouro" (defaults: the GGUF's Q4_1 weights)
and "ouro-w8a8" (`--weights w8a8 --w8a8-ops qkv,o,gate_up,down,head`, the throughput mode);
--ouro-configs picks them. llama-server is configured as its documentation recommends for
throughput: one slot per concurrent request (--parallel 16, the largest concurrency), continuous
batching (its default), the same context per sequence as Ouro's (4096: -c 16 x 4096) and the same
threads for prompt and generation. Prints per-scenario medians over rounds of output tok/s and
TTFT p50/p99 for each server, and the ratios against the first peer of --peers; --json FILE writes
the whole record (every loadtest record included).

The Python peer needs llama-cpp-python's server extras (fastapi, uvicorn, sse-starlette,
starlette-context, pydantic-settings); this script installs them into .venv when that peer is asked
for (scripts/requirements-bench.txt). They are never needed by the tests.

Usage: .venv/bin/python bench/compare_serve.py [--threads 2] [--rounds 3] [--peers llama-server,llama-cpp-python]
       [--json out.json]
"""
import argparse
import datetime
import json
import os
import pathlib
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OURO = ROOT / "build" / "ouro"
OURO_CONFIGS = {
    "ouro": [],
    "ouro-w8a8": ["--weights", "w8a8", "--w8a8-ops", "qkv,o,gate_up,down,head"],
}
PEERS = ("llama-server", "llama-cpp-python")
CTX_PER_SEQ = 4096  # Ouro's default context per sequence (min(train context, 4096)); both servers get it
SCENARIOS = {
    "c1": dict(concurrency=1, requests=6, prompt_len=32, gen_len=64),
    "c16": dict(concurrency=16, requests=32, prompt_len=32, gen_len=64),
    "ttft8": dict(concurrency=8, requests=16, prompt_len=512, gen_len=16),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=180):
    import urllib.request
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up in {timeout} s")


def ensure_peer_extras():
    try:
        import fastapi, uvicorn, sse_starlette, starlette_context, pydantic_settings  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(ROOT / "scripts" / "requirements-bench.txt")],
                       check=True)


def start_ouro(threads, extra):
    p = subprocess.Popen([str(OURO), "serve", "--model", str(MODEL), "--port", "0", "-t", str(threads),
                          "--ctx", str(CTX_PER_SEQ), *extra],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return p, m.group(1)
    raise RuntimeError("ouro serve did not start")


def llama_tools():
    """The folder holding llama-server and llama-bench (built once, cached per CPU)."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build_llama_tools.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"scripts/build_llama_tools.sh failed: {r.stderr.strip()[-2000:]}")
    return pathlib.Path(r.stdout.strip().splitlines()[-1])


def start_llama_server(threads, slots):
    port = free_port()
    p = subprocess.Popen([str(llama_tools() / "llama-server"), "--model", str(MODEL), "--host", "127.0.0.1",
                          "--port", str(port), "--threads", str(threads), "--threads-batch", str(threads),
                          "--parallel", str(slots), "--ctx-size", str(slots * CTX_PER_SEQ), "--cont-batching",
                          "--no-webui"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url)
    return p, url


def start_peer(threads):
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL), "--n_threads", str(threads),
                          "--n_threads_batch", str(threads), "--n_ctx", "4096", "--n_batch", "512", "--host", "127.0.0.1",
                          "--port", str(port), "--verbose", "False",
                          # a new request must not cancel the one being streamed (its default)
                          "--interrupt_requests", "False"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url)
    return p, url


def loadtest(url, sc, seed):
    cmd = [str(OURO), "loadtest", "--url", url, "--json", "--seed", str(seed), "--concurrency", str(sc["concurrency"]),
           "--requests", str(sc["requests"]), "--prompt-len", str(sc["prompt_len"]), "--gen-len", str(sc["gen_len"])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"loadtest failed ({r.returncode}): {r.stderr}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--ouro-configs", default=",".join(OURO_CONFIGS), help="of: " + ", ".join(OURO_CONFIGS))
    ap.add_argument("--peers", default="llama-server", help="comma-separated, of: " + ", ".join(PEERS) +
                    " (ratios are against the first)")
    ap.add_argument("--json")
    a = ap.parse_args()
    peers = a.peers.split(",")
    for pe in peers:
        if pe not in PEERS:
            ap.error(f"--peers: unknown peer '{pe}' (one of {', '.join(PEERS)})")
    unknown = [s for s in a.scenarios.split(",") if s not in SCENARIOS]
    if unknown:
        ap.error(f"--scenarios: unknown scenario '{unknown[0]}' (of {', '.join(SCENARIOS)})")
    for c in a.ouro_configs.split(","):
        if c not in OURO_CONFIGS:
            ap.error(f"--ouro-configs: unknown configuration '{c}' (one of {', '.join(OURO_CONFIGS)})")
    if "llama-cpp-python" in peers:
        ensure_peer_extras()
    servers = {}
    try:
        for c in a.ouro_configs.split(","):
            servers[c] = start_ouro(a.threads, OURO_CONFIGS[c])
        for pe in peers:
            servers[pe] = (start_llama_server(a.threads, max(sc["concurrency"] for sc in SCENARIOS.values()))
                           if pe == "llama-server" else start_peer(a.threads))
        names = list(servers)
        runs = {s: {n: [] for n in names} for s in a.scenarios.split(",")}
        for r in range(a.rounds):
            for s in runs:
                order = names if r % 2 == 0 else names[::-1]
                for n in order:
                    rec = loadtest(servers[n][1], SCENARIOS[s], seed=r)
                    runs[s][n].append(rec)
                    print(f"round {r} {s:6s} {n:17s} out {rec['output_tok_s']:7.1f} tok/s  ttft p50 "
                          f"{rec['ttft_s']['p50'] * 1e3:7.0f} ms  p99 {rec['ttft_s']['p99'] * 1e3:7.0f} ms  "
                          f"completed {rec['completed']}/{rec['requests']}", flush=True)
    finally:
        for p, _ in servers.values():
            p.send_signal(signal.SIGTERM)
        for p, _ in servers.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    med = lambda xs: statistics.median(xs)
    summary = {}
    print(f"\n{'scenario':8s} {'server':17s} {'out tok/s':>10s} {'ttft p50 ms':>12s} {'ttft p99 ms':>12s}")
    for s, per in runs.items():
        summary[s] = {}
        for n, recs in per.items():
            summary[s][n] = {"output_tok_s": med([x["output_tok_s"] for x in recs]),
                             "ttft_p50_s": med([x["ttft_s"]["p50"] for x in recs]),
                             "ttft_p99_s": med([x["ttft_s"]["p99"] for x in recs]),
                             "errors": sum(sum(x["errors"].values()) for x in recs)}
            f = summary[s][n]
            print(f"{s:8s} {n:17s} {f['output_tok_s']:10.1f} {f['ttft_p50_s'] * 1e3:12.0f} {f['ttft_p99_s'] * 1e3:12.0f}")
    p = peers[0]
    ours = [n for n in names if n not in peers]
    ratios = {}
    for o in ours:
        if "c16" in summary:
            ratios[f"{o} c16_vs_peer"] = summary["c16"][o]["output_tok_s"] / summary["c16"][p]["output_tok_s"]
            if "c1" in summary:
                ratios[f"{o} c16_vs_own_c1"] = summary["c16"][o]["output_tok_s"] / summary["c1"][o]["output_tok_s"]
        if "c1" in summary:
            ratios[f"{o} c1_vs_peer"] = summary["c1"][o]["output_tok_s"] / summary["c1"][p]["output_tok_s"]
        if "ttft8" in summary:
            ratios[f"{o} ttft8_p99_vs_peer"] = summary["ttft8"][o]["ttft_p99_s"] / summary["ttft8"][p]["ttft_p99_s"]
    if "c16" in summary and "c1" in summary:
        # The strict reading of "16 streams >= 3x Ouro's single-stream rate": the best 16-stream
        # configuration against the best single stream of any configuration.
        ratios["best c16_vs_best c1"] = (max(summary["c16"][o]["output_tok_s"] for o in ours) /
                                         max(summary["c1"][o]["output_tok_s"] for o in ours))
    print(f"\nratios against {p}:")
    for k, v in ratios.items():
        print(f"{k:32s} {v:6.2f}x")
    if a.json:
        rec = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "threads": a.threads,
               "rounds": a.rounds, "model": MODEL.name, "scenarios": SCENARIOS, "peers": peers,
               "ctx_per_seq": CTX_PER_SEQ,
               "ouro_configs": {c: OURO_CONFIGS[c] for c in ours}, "summary": summary, "ratios": ratios,
               "runs": runs, "ouro_commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                                                           capture_output=True, text=True).stdout.strip()}
        pathlib.Path(a.json).write_text(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
