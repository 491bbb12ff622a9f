#!/usr/bin/env python3
"""Decode speed at long context for each KV cache type, side by side in one run (issue 6).

For each depth and KV configuration, `ouro bench --depth D --prompt-len 1 --gen-len G` fills the
cache once (untimed) and measures tg G R times; configurations run interleaved round by round so
that machine drift touches all of them alike. Prints a table and writes JSON (medians of the
rounds' medians). Decisions are made by lab specs (experiments/specs/kv-*.toml); this is the table.

usage: bench/kv_depth.py [--bin build/ouro] [--depths 4096,8000] [--kv f32,bf16,fp8,int8]
                         [--rounds 1] [--gen-len 64] [--threads 2] [--out bench/results/kv-depth.json]
"""
import argparse
import json
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/ouro")
    ap.add_argument("--depths", default="4096,8000")
    ap.add_argument("--kv", default="f32,bf16,fp8,int8")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/kv-depth.json")
    a = ap.parse_args()
    depths = [int(d) for d in a.depths.split(",")]
    kvs = a.kv.split(";") if ";" in a.kv else a.kv.split(",")
    samples = {(d, kv): [] for d in depths for kv in kvs}
    info = {}
    for r in range(a.rounds):
        for d in depths:
            for kv in kvs:
                cmd = [a.bin, "bench", "--json", "--ctx", "8192", "--depth", str(d), "--prompt-len", "0",
                       "--gen-len", str(a.gen_len), "--repeats", str(a.repeats), "--warmup", "1",
                       "-t", str(a.threads), "--kv", kv]
                j = json.loads(subprocess.check_output(cmd, text=True))
                samples[(d, kv)].append(j["decode_tok_s"]["median"])
                info[kv] = j["kv_bytes_per_token"]
                print(f"round {r + 1} depth {d} kv {kv}: tg{a.gen_len} {j['decode_tok_s']['median']:.1f} tok/s",
                      file=sys.stderr)
    rows = []
    for d in depths:
        base = statistics.median(samples[(d, kvs[0])])
        for kv in kvs:
            m = statistics.median(samples[(d, kv)])
            rows.append({"depth": d, "kv": kv, "kv_bytes_per_token": info[kv], "decode_tok_s": m,
                         "vs_" + kvs[0]: m / base, "samples": samples[(d, kv)]})
    print(f"| depth | kv | KV bytes/token | tg{a.gen_len} tok/s | vs {kvs[0]} |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['depth']} | {r['kv']} | {r['kv_bytes_per_token']} | {r['decode_tok_s']:.1f} | "
              f"{r['vs_' + kvs[0]]:.2f}x |")
    with open(a.out, "w") as f:
        json.dump({"gen_len": a.gen_len, "repeats": a.repeats, "rounds": a.rounds, "threads": a.threads,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
