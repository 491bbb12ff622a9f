#!/usr/bin/env python3
"""Interleaved throughput comparison: `ouro bench` against llama.cpp (llama-cpp-python), same GGUF.

Each measurement is a fresh process: ouro is `ouro bench --repeats 1 --warmup W ... --json`, llama.cpp
is this script re-run as a worker (--llama-worker) that loads the model and measures the same two
figures the same way (src/cli/cmd_bench.cpp):
  pp  one forward over P token ids from an empty cache; tok/s = P / time. The ids are the ones ouro
      uses: std::mt19937(1234) draws, each modulo n_vocab.
  tg  G single-token forwards from an empty cache, starting from the first prompt id (1 when P = 0),
      each next id the argmax of the previous step's logits; tok/s = G / time.
llama.cpp side: n_threads = n_threads_batch = T, n_batch = n_ubatch >= P (so pp is one decode),
one llama_decode per step via llama_batch_get_one (only the last position's logits are produced, as
in ouro), llama_synchronize before the clock stops, cache cleared with llama_memory_clear.

Memory bandwidth on shared machines drifts by tens of percent over minutes, so the engines are
run alternately (ouro, llama.cpp, ouro, llama.cpp, ...) for --rounds rounds after --warmup-runs
discarded runs of each; per-round figures, each engine's medians, the ratio of the medians and the
median of the per-round (paired) ratios are printed. --json FILE writes the whole record. Then
llama.cpp's own llama-bench (C++, built from the same sdist by scripts/build_llama_tools.sh) runs pp P
and tg G on the same file and threads, and its figures are printed beside the binding's, which they
should match (--no-llama-bench skips it).
--depth D: both engines measure pp and tg after D cached tokens (the D ids drawn after the prompt's,
filled once, untimed, then restored before each measurement: llama-bench's -d, ouro bench's --depth;
llama.cpp's side keeps a sequence-state snapshot, ouro rewinds to a mark); each measurement
process's peak RSS is recorded beside its figures (os.wait4), so a depth table shows what the cache
costs in memory.
Each measurement also records the 1-minute load average and the share of its wall time in which
some task waited for a CPU (Linux /proc/pressure/cpu, "stall%"): both engines spin-wait between
parallel steps, so with T = all cores any other load makes them collapse (10-50x was seen on a
2-core VM); a warning is printed when stall% exceeds 5%.

Usage: .venv/bin/python bench/compare_llamacpp.py [--prompt-len 512] [--gen-len 128] [--depth 0]
       [--threads 2] [--rounds 5] [--json out.json]
"""
import argparse
import ctypes
import datetime
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OURO = ROOT / "build" / "ouro"
PROMPT_SEED = 1234      # cmd_bench.cpp: std::mt19937 rng(1234)
STALL_WARN = 0.05       # warn when CPU pressure (some tasks waiting for a CPU) exceeds 5% of a run


def mt19937(seed):
    """std::mt19937 (32-bit Mersenne Twister, default tempering): yields its raw outputs."""
    mask = 0xFFFFFFFF
    mt = [seed & mask]
    for i in range(1, 624):
        mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & mask)
    while True:
        for i in range(624):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
            mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        for i in range(624):
            y = mt[i]
            y ^= y >> 11
            y ^= (y << 7) & 0x9D2C5680
            y ^= (y << 15) & 0xEFC60000
            y ^= y >> 18
            yield y


def check_mt19937():
    """The C++ standard fixes the 10000th output of a default-seeded (5489) std::mt19937."""
    g = mt19937(5489)
    for _ in range(9999):
        next(g)
    assert next(g) == 4123659995, "mt19937 implementation does not match std::mt19937"


def bench_prompt(n, n_vocab):
    g = mt19937(PROMPT_SEED)
    return [next(g) % n_vocab for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# llama.cpp worker (runs in its own process)

def llama_worker(args):
    import numpy as np
    import llama_cpp

    P, G, T, D = args.prompt_len, args.gen_len, args.threads, args.depth
    n_ctx = context_for(args)
    n_batch = max(512, P)
    llm = llama_cpp.Llama(str(args.model), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=T,
                          n_threads_batch=T, logits_all=False, flash_attn=args.flash_attn, verbose=False)
    ctx = llm.ctx
    mem = llama_cpp.llama_get_memory(ctx)
    n_vocab = llm.n_vocab()
    ids = bench_prompt(P + D, n_vocab)
    prompt, depth_ids = ids[:P], ids[P:]
    prompt_arr = (llama_cpp.llama_token * max(P, 1))(*prompt)
    tok_arr = (llama_cpp.llama_token * 1)()

    def decode(arr, n):
        rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, n))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    snapshot = []  # the sequence's state at depth D (llama_state_seq_get_data), once filled

    def start_at_depth():
        """An empty cache, then the D depth ids (untimed): filled in batches the first time and kept
        as a sequence-state snapshot, restored before every later measurement (as ouro bench rewinds
        to its mark), so a deep row fills the depth once. Progress goes to stderr with the time."""
        llama_cpp.llama_memory_clear(mem, False)
        if D == 0:
            return
        if snapshot:
            buf, n = snapshot
            if llama_cpp.llama_state_seq_set_data(ctx, buf, n, 0) != n:
                raise RuntimeError("llama_state_seq_set_data did not restore the depth snapshot")
            llama_cpp.llama_synchronize(ctx)
            return
        t0, step = time.monotonic(), max(1, 8192 // n_batch)
        for k, i in enumerate(range(0, D, n_batch)):
            chunk = depth_ids[i:i + n_batch]
            decode((llama_cpp.llama_token * len(chunk))(*chunk), len(chunk))
            if D >= 16384 and (k + 1) % step == 0:
                log(f"depth fill {i + len(chunk)}/{D} tokens after {time.monotonic() - t0:.0f} s")
        llama_cpp.llama_synchronize(ctx)
        n = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * n)()
        if llama_cpp.llama_state_seq_get_data(ctx, buf, n, 0) != n:
            raise RuntimeError("llama_state_seq_get_data did not copy the depth state")
        snapshot.extend((buf, n))
        log(f"depth fill done: {D} tokens in {time.monotonic() - t0:.0f} s; snapshot {n / 2**20:.0f} MiB")

    def log(msg):
        if D >= 16384:
            print(f"[{datetime.datetime.now().strftime('%H:%M:%S')}] llama.cpp worker: {msg}", file=sys.stderr, flush=True)

    pp, tg = [], []
    for r in range(args.inproc_warmup + 1):
        keep = r >= args.inproc_warmup
        if P > 0:
            start_at_depth()
            log(f"timed pp{P} starts")
            t0 = time.perf_counter()
            decode(prompt_arr, P)
            llama_cpp.llama_synchronize(ctx)
            if keep:
                pp.append(P / (time.perf_counter() - t0))
            log(f"timed pp{P} ends: {P / (time.perf_counter() - t0):.2f} tok/s")
        if G > 0:
            start_at_depth()
            log(f"timed tg{G} starts")
            tok = prompt[0] if P > 0 else 1
            t0 = time.perf_counter()
            for _ in range(G):
                tok_arr[0] = tok
                decode(tok_arr, 1)
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
                tok = int(logits.argmax())
            if keep:
                tg.append(G / (time.perf_counter() - t0))
            log(f"timed tg{G} ends: {G / (time.perf_counter() - t0):.2f} tok/s")
    out = {"prefill_tok_s": pp[0] if pp else None, "decode_tok_s": tg[0] if tg else None,
           "n_ctx": n_ctx, "n_batch": n_batch, "flash_attn": args.flash_attn,
           "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip()}
    print(json.dumps(out))


def context_for(args):
    """The context both engines get: the depth plus the longer of the prompt and the generation,
    rounded up to 256 (at least 512)."""
    return max(512, -(-(args.depth + max(args.prompt_len, args.gen_len, 1)) // 256) * 256)


def run_rss(cmd, timeout):
    """Runs cmd; returns (exit code, stdout, stderr, the process's peak RSS in MiB from os.wait4)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = {}
    readers = [threading.Thread(target=lambda k, f: got.__setitem__(k, f.read()), args=(k, f), daemon=True)
               for k, f in (("out", p.stdout), ("err", p.stderr))]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    for t in readers:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in readers):
        p.kill()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join()
    if p.returncode == -9 and time.monotonic() >= deadline:
        raise RuntimeError(f"{' '.join(cmd)} ran past {timeout:.0f} s")
    return p.returncode, got.get("out", ""), got.get("err", ""), ru.ru_maxrss / 1024.0


# ---------------------------------------------------------------------------------------------
# driver

def loadavg():
    try:
        return float(pathlib.Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def cpu_stall_us():
    """Cumulative microseconds in which some runnable task waited for a CPU (Linux PSI), or None."""
    try:
        line = pathlib.Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_describe():
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_ouro(args):
    cmd = [str(args.ouro), "bench", "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len),
           "--repeats", "1", "--warmup", str(args.inproc_warmup), "--threads", str(args.threads),
           "--model", str(args.model), "--json", *shlex.split(args.ouro_args)]
    if args.depth > 0:
        cmd += ["--depth", str(args.depth), "--ctx", str(context_for(args))]
    rc, out, err, rss = run_rss(cmd, args.timeout)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}: {err.strip()}")
    j = json.loads(out)
    return {"prefill_tok_s": j.get("prefill_tok_s", {}).get("median"),
            "decode_tok_s": j.get("decode_tok_s", {}).get("median"), "peak_rss_mib": rss, "raw": j}


def machine_ceilings(args):
    """`ouro probe --json`: the cached ceilings for this CPU, measured now (a few seconds) when no
    cache exists. Every figure this script prints is stated beside them and the kernel ISA."""
    p = subprocess.run([str(args.ouro), "probe", "--json", "--threads", str(args.threads)],
                       capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"ouro probe exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def describe_ceilings(probe, threads):
    """One line: read bandwidth and int8 / FP32 peaks at `threads` threads (the figures a ratio of
    the ceiling is taken against)."""
    def at(key):
        v = probe.get(key) or {}
        return v.get(str(threads)) or (max(v.values()) if v else None)
    parts = [f"read {at('read_gb_s'):.1f} GB/s" if at('read_gb_s') else None,
             f"int8 {at('int8_gops'):.0f} GOP/s ({probe.get('int8_kernel', '?')})" if at('int8_gops') else None,
             f"fp32 {at('fp32_gflops'):.0f} GFLOP/s ({probe.get('fp32_kernel', '?')})" if at('fp32_gflops') else None]
    return f"probe at {threads} threads: " + ", ".join(x for x in parts if x)


def run_llama(args):
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--llama-worker",
           "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len), "--threads", str(args.threads),
           "--inproc-warmup", str(args.inproc_warmup), "--model", str(args.model), "--depth", str(args.depth)]
    if args.flash_attn:
        cmd.append("--flash-attn")
    rc, out, err, rss = run_rss(cmd, args.timeout)
    if rc != 0:
        raise RuntimeError(f"llama.cpp worker exited {rc}: {err.strip()[-2000:]}")
    j = json.loads(out.strip().splitlines()[-1])
    return {"prefill_tok_s": j["prefill_tok_s"], "decode_tok_s": j["decode_tok_s"], "peak_rss_mib": rss, "raw": j}


def run_llama_best(args):
    """llama.cpp twice, flash attention off then on, each figure the faster of the two (with depth,
    flash attention slows llama.cpp's prefill and speeds its decode: at 16k cached tokens pp512 85
    vs 60 tok/s and tg 10 vs 27, 2026-12-07); both processes' figures are kept in the raw record."""
    runs = {fa: run_llama(argparse.Namespace(**{**vars(args), "flash_attn": fa})) for fa in (False, True)}
    best = {}
    for k in ("prefill_tok_s", "decode_tok_s"):
        fa = max(runs, key=lambda f: runs[f][k] or 0)
        best[k], best[k + "_flash_attn"] = runs[fa][k], fa
    raw = dict(runs[False]["raw"])
    raw["flash_attn"] = "best of off and on"
    raw["by_flash_attn"] = {("on" if fa else "off"): {k: r[k] for k in ("prefill_tok_s", "decode_tok_s", "peak_rss_mib")}
                            for fa, r in runs.items()}
    raw["chosen_flash_attn"] = {k: ("on" if best[k + "_flash_attn"] else "off") for k in ("prefill_tok_s", "decode_tok_s")}
    return {"prefill_tok_s": best["prefill_tok_s"], "decode_tok_s": best["decode_tok_s"],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs.values()), "raw": raw}


def run_llama_bench(args):
    """llama.cpp's own llama-bench (scripts/build_llama_tools.sh) on the same file and threads: pp P and
    tg G, --rounds repetitions each; returns its JSON records, or None with the reason printed."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build_llama_tools.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"llama-bench: not run (scripts/build_llama_tools.sh failed: {r.stderr.strip()[-500:]})")
        return None
    exe = pathlib.Path(r.stdout.strip().splitlines()[-1]) / "llama-bench"
    cmd = [str(exe), "-m", str(args.model), "-t", str(args.threads), "-r", str(args.rounds), "-o", "json",
           "-fa", "on" if args.flash_attn else "off"]
    cmd += ["-p", str(args.prompt_len) if args.prompt_len else "0", "-n", str(args.gen_len) if args.gen_len else "0"]
    if args.depth > 0:
        cmd += ["-d", str(args.depth)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout * 4)
    if b.returncode != 0:
        print(f"llama-bench: failed ({b.returncode}): {b.stderr.strip()[-500:]}")
        return None
    recs = [x for x in json.loads(b.stdout) if x.get("n_prompt", 0) > 0 or x.get("n_gen", 0) > 0]
    return {"argv": cmd, "records": recs}


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, width=8):
    return f"{x:{width}.1f}" if x is not None else " " * (width - 1) + "-"


def ratio(a, b):
    return a / b if a is not None and b else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-len", "-P", type=int, default=512)
    ap.add_argument("--gen-len", "-G", type=int, default=128)
    ap.add_argument("--threads", "-T", type=int, default=2)
    ap.add_argument("--depth", "-D", type=int, default=0,
                    help="cached tokens before every measurement, both engines (llama-bench -d; default 0)")
    ap.add_argument("--rounds", type=int, default=5, help="measured ouro/llama.cpp pairs (default 5)")
    ap.add_argument("--warmup-runs", type=int, default=1,
                    help="discarded runs of each engine, alternated, before the rounds (default 1)")
    ap.add_argument("--inproc-warmup", type=int, default=0,
                    help="discarded repeats inside each measured process, both engines (ouro --warmup; "
                         "default 0)")
    ap.add_argument("--model", type=pathlib.Path, default=DEFAULT_MODEL)
    ap.add_argument("--ouro", type=pathlib.Path, default=DEFAULT_OURO)
    ap.add_argument("--ouro-args", default="",
                    help="more flags for ouro bench, e.g. '--weights w8a8' (a configuration of the same file; "
                         "llama.cpp runs the file's own types)")
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp flash attention (default off)")
    ap.add_argument("--flash-attn-best", action="store_true",
                    help="llama.cpp measured with flash attention off and on in every round, each figure the "
                         "faster of the two (its best configuration per figure; doubles llama.cpp's time)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per measurement process")
    ap.add_argument("--json", type=pathlib.Path, help="write the full record to this file")
    ap.add_argument("--no-llama-bench", action="store_true",
                    help="skip llama.cpp's own llama-bench (built once by scripts/build_llama_tools.sh)")
    ap.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.model = args.model.resolve()
    if args.prompt_len < 0 or args.gen_len < 0 or (args.prompt_len == 0 and args.gen_len == 0):
        ap.error("need --prompt-len >= 0, --gen-len >= 0, not both 0")
    if args.depth < 0:
        ap.error("need --depth >= 0")
    if args.flash_attn and args.flash_attn_best:
        ap.error("--flash-attn and --flash-attn-best exclude each other")
    if args.threads < 1 or args.rounds < 1 or args.warmup_runs < 0 or args.inproc_warmup < 0:
        ap.error("need --threads >= 1, --rounds >= 1, --warmup-runs >= 0, --inproc-warmup >= 0")

    if args.llama_worker:
        llama_worker(args)
        return

    check_mt19937()
    import llama_cpp
    if not args.ouro.exists():
        sys.exit(f"compare_llamacpp: ouro binary not found at {args.ouro}")
    if not args.model.exists():
        sys.exit(f"compare_llamacpp: model not found at {args.model}")

    P, G, T = args.prompt_len, args.gen_len, args.threads
    print(f"ouro {git_describe()} vs llama-cpp-python {llama_cpp.__version__}  model {args.model.name}  "
          f"cpu {cpu_model()}  threads {T}  pp{P} tg{G}" + (f" at depth {args.depth}" if args.depth else "") + f"  rounds {args.rounds} (+{args.warmup_runs} warm-up)"
          + (f"  ouro flags: {args.ouro_args}" if args.ouro_args else ""), flush=True)

    probe = machine_ceilings(args)
    isa = run_ouro(argparse.Namespace(**{**vars(args), "prompt_len": 0, "gen_len": 1, "depth": 0}))["raw"].get("isa")
    print(f"ouro kernels {isa} (OURO_ISA={os.environ.get('OURO_ISA', 'auto')}); {describe_ceilings(probe, T)}", flush=True)

    engines = (("ouro", run_ouro), ("llama.cpp", run_llama_best if args.flash_attn_best else run_llama))
    samples = {name: [] for name, _ in engines}
    warmups = []
    for w in range(args.warmup_runs):
        for name, fn in engines:
            r = fn(args)
            warmups.append({"engine": name, "prefill_tok_s": r["prefill_tok_s"], "decode_tok_s": r["decode_tok_s"]})
            print(f"warm-up {w + 1}  {name:9s}  pp {fmt(r['prefill_tok_s'])}  tg {fmt(r['decode_tok_s'])}  tok/s",
                  flush=True)

    rounds, stalls = [], []
    print(f"{'round':>5}  {'ouro pp':>8} {'ouro tg':>8}  {'llama pp':>8} {'llama tg':>8}  {'pp o/l':>6} {'tg o/l':>6}  {'stall%':>6}")
    for i in range(args.rounds):
        rec = {"round": i + 1}
        for name, fn in engines:
            la = loadavg()
            t = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            st0, w0 = cpu_stall_us(), time.monotonic()
            r = fn(args)
            st1, w1 = cpu_stall_us(), time.monotonic()
            stall = (st1 - st0) / 1e6 / (w1 - w0) if st0 is not None and st1 is not None else None
            s = {"round": i + 1, "time_utc": t, "loadavg_1m": la, "wall_s": w1 - w0, "cpu_stall_frac": stall,
                 "prefill_tok_s": r["prefill_tok_s"], "decode_tok_s": r["decode_tok_s"],
                 "peak_rss_mib": r["peak_rss_mib"]}
            samples[name].append(s)
            rec[name] = r
            stalls.append(stall)
        o, l = rec["ouro"], rec["llama.cpp"]
        rec["ratio_pp"] = ratio(o["prefill_tok_s"], l["prefill_tok_s"])
        rec["ratio_tg"] = ratio(o["decode_tok_s"], l["decode_tok_s"])
        rounds.append(rec)
        rp = f"{rec['ratio_pp']:6.3f}" if rec["ratio_pp"] is not None else "     -"
        rt = f"{rec['ratio_tg']:6.3f}" if rec["ratio_tg"] is not None else "     -"
        st = [x for x in (samples["ouro"][-1]["cpu_stall_frac"], samples["llama.cpp"][-1]["cpu_stall_frac"])
              if x is not None]
        sp = f"{100 * max(st):6.1f}" if st else "     -"
        print(f"{i + 1:5d}  {fmt(o['prefill_tok_s'])} {fmt(o['decode_tok_s'])}  "
              f"{fmt(l['prefill_tok_s'])} {fmt(l['decode_tok_s'])}  {rp} {rt}  {sp}", flush=True)

    summary = {}
    for name in samples:
        summary[name] = {k: median([s[k] for s in samples[name]]) for k in ("prefill_tok_s", "decode_tok_s")}
        summary[name]["peak_rss_mib_max"] = max(s["peak_rss_mib"] for s in samples[name])
    for k, key in (("pp", "prefill_tok_s"), ("tg", "decode_tok_s")):
        summary[f"ratio_{k}_of_medians"] = ratio(summary["ouro"][key], summary["llama.cpp"][key])
        summary[f"ratio_{k}_median_paired"] = median([r[f"ratio_{k}"] for r in rounds])
    print(f"{'median':>5}  {fmt(summary['ouro']['prefill_tok_s'])} {fmt(summary['ouro']['decode_tok_s'])}  "
          f"{fmt(summary['llama.cpp']['prefill_tok_s'])} {fmt(summary['llama.cpp']['decode_tok_s'])}")
    for k in ("pp", "tg"):
        a, b = summary[f"ratio_{k}_of_medians"], summary[f"ratio_{k}_median_paired"]
        if a is not None:
            print(f"ouro/llama.cpp {k}{P if k == 'pp' else G}: {a:.3f} (ratio of medians), "
                  f"{b:.3f} (median of per-round ratios)")
    print(f"peak RSS (largest measurement process): ouro {summary['ouro']['peak_rss_mib_max']:.0f} MiB, "
          f"llama.cpp {summary['llama.cpp']['peak_rss_mib_max']:.0f} MiB (its Python interpreter included)")

    # llama.cpp's own benchmark on the same file and threads, beside the binding measured above: the
    # two should agree (same library, same ggml), so a reader sees the binding is a fair stand-in.
    lb = None if args.no_llama_bench else run_llama_bench(args)
    if lb:
        for x in lb["records"]:
            k, n = ("pp", x["n_prompt"]) if x.get("n_prompt", 0) > 0 else ("tg", x["n_gen"])
            mine = summary["llama.cpp"]["prefill_tok_s" if k == "pp" else "decode_tok_s"]
            print(f"llama-bench {k}{n}: {x['avg_ts']:.1f} +- {x.get('stddev_ts', 0):.1f} tok/s "
                  f"({len(x.get('samples_ts', [])) or args.rounds} runs, build {x.get('build_commit', '?')}); "
                  f"the binding above: {fmt(mine).strip()} tok/s" + (f" ({x['avg_ts'] / mine:.3f}x)" if mine else ""))

    worst = max((x for x in stalls if x is not None), default=None)
    if worst is not None and worst > STALL_WARN:
        print(f"WARNING: runnable tasks waited for a CPU during {100 * worst:.0f}% of a measurement "
              f"(/proc/pressure/cpu); the machine was not quiet and these figures are not trustworthy")

    if args.json:
        first_ouro = rounds[0]["ouro"]["raw"]
        record = {
            "ouro_commit": git_describe(),
            "ouro_build_commit": first_ouro.get("commit"),
            "ouro_isa": first_ouro.get("isa"),
            "ouro_isa_setting": os.environ.get("OURO_ISA", "auto"),
            "probe": probe,
            "ouro_cpu": first_ouro.get("cpu"),
            "ouro_cpu_features": first_ouro.get("cpu_features"),
            "ouro_build_flags": first_ouro.get("build_flags"),
            "cpu_model": cpu_model(),
            "n_cpus_online": os.cpu_count(),
            "threads": T,
            "prompt_len": P,
            "gen_len": G,
            "depth": args.depth,
            "rounds": args.rounds,
            "warmup_runs": args.warmup_runs,
            "inproc_warmup": args.inproc_warmup,
            "model": str(args.model),
            "ouro_args": args.ouro_args,
            "llama_cpp_python_version": llama_cpp.__version__,
            "llama_cpp_settings": {k: rounds[0]["llama.cpp"]["raw"][k] for k in ("n_ctx", "n_batch", "flash_attn")},
            "llama_cpp_system_info": rounds[0]["llama.cpp"]["raw"]["system_info"],
            "python": platform.python_version(),
            "kernel": platform.release(),
            "started_utc": samples["ouro"][0]["time_utc"],
            "order": "ouro then llama.cpp in every round",
            "warmups": warmups,
            "samples": samples,
            "per_round_ratios": [{"round": r["round"], "pp": r["ratio_pp"], "tg": r["ratio_tg"]} for r in rounds],
            "summary": summary,
            "ouro_bench_json": [r["ouro"]["raw"] for r in rounds],
            "llama_cpp_worker_json": [r["llama.cpp"]["raw"] for r in rounds],
            "llama_bench": lb,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
