#!/usr/bin/env python3
"""The lab's false-alarm rate, measured: N runs of `ouro lab run` whose two sides are the same
binary with the same options, at one level (kernel, engine or serve), with the criteria a person
would use for "no regression" at that level. Every "reject" is a false alarm and every "change"
other than "none" a false discovery. Prints the counts, the pairs each run needed and the per-pair
ratios, and writes all records as JSON lines (docs/lab.md quotes the figures).

usage: bench/lab_identical.py --level kernel|engine|serve [--runs 20] [--bin build/ouro]
                              [--out bench/results/lab-identical-LEVEL.jsonl]
The environment passes through, so OURO_ISA=avx2 measures the AVX2 kernels' noise.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

# One spec per level; the criteria are the shipped no-regression ones where a file exists.
SPECS = {
    "kernel": """
        question = "Is rmsnorm as fast in two identical configurations?"
        hypothesis = "Identical binaries differ only by noise."
        level = "kernel"
        repeats = 5
        criteria = ["candidate.ns_per_op <= 1.05 * baseline.ns_per_op"]
        [baseline]
        revision = "worktree"
        [candidate]
        revision = "worktree"
        [workload]
        kernel = "rmsnorm"
        kernel_args = ["--cols", "2048", "--tokens", "16"]
        min_time_ms = 40
        seeds = [1, 2]
        """,
    "engine": """
        question = "Are two identical engine configurations as fast?"
        hypothesis = "Identical binaries differ only by noise."
        level = "engine"
        repeats = 5
        criteria_file = "engine-no-regression"
        [baseline]
        revision = "worktree"
        [candidate]
        revision = "worktree"
        [workload]
        model = "{model}"
        prompt_len = 128
        gen_len = {gen_len}
        bench_repeats = {bench_repeats}
        threads = 2
        """,
    "serve": """
        question = "Do two identical servers serve as fast?"
        hypothesis = "Identical binaries differ only by noise."
        level = "serve"
        repeats = 5
        criteria = ["candidate.output_tok_s >= 0.95 * baseline.output_tok_s", "correctness.greedy_match == 1"]
        [baseline]
        revision = "worktree"
        [candidate]
        revision = "worktree"
        [workload]
        model = "{model}"
        prompt_len = 32
        gen_len = 32
        concurrency = 4
        requests = 8
        threads = 2
        greedy_tokens = 8
        """,
}


def fmt(x):
    """A bound of the interval; null is an unbounded side (fewer than two usable pairs)."""
    return "inf" if x is None else f"{x:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--level", choices=sorted(SPECS), required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--bin", default=str(ROOT / "build" / "ouro"))
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--out")
    ap.add_argument("--gen-len", type=int, default=64, help="engine level: tokens decoded per sample")
    ap.add_argument("--bench-repeats", type=int, default=3,
                    help="engine level: repeats inside one bench process (the sample is their median)")
    a = ap.parse_args()
    out = pathlib.Path(a.out or ROOT / "bench" / "results" / f"lab-identical-{a.level}.jsonl")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lab-identical-"))
    spec = tmp / "spec.toml"
    spec.write_text(textwrap.dedent(SPECS[a.level]).format(model=a.model, gen_len=a.gen_len, bench_repeats=a.bench_repeats))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"))
    env.pop("OURO_FAULT", None)
    verdicts, changes, pairs, records = [], [], [], []
    t0 = time.monotonic()
    for i in range(a.runs):
        p = subprocess.run([a.bin, "lab", "run", str(spec), "--json", "--no-ledger", "--bin", a.bin, "--quiet-wait", "5"],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
        if p.returncode not in (0, 3, 4):
            raise SystemExit(f"lab run {i} failed ({p.returncode}):\n{p.stderr}")
        rec = json.loads(p.stdout)
        head = rec["headline"]
        b, c = rec["samples"]["baseline"][head], rec["samples"]["candidate"][head]
        ratios = [y / x for x, y in zip(b, c)]
        verdicts.append(rec["verdict"])
        changes.append(rec["stats"][head]["change"])
        pairs.append(rec["pairs"])
        records.append(rec)
        print(f"run {i + 1:2d}: {rec['verdict']:12s} change={changes[-1]:6s} pairs={rec['pairs']:2d} "
              f"ratio={rec['stats'][head]['ratio']:.4f} ci=[{fmt(rec['stats'][head]['ci'][0])}, "
              f"{fmt(rec['stats'][head]['ci'][1])}] pair ratios " + " ".join(f"{r:.3f}" for r in ratios), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"\nlevel {a.level}, isa {records[0].get('machine', {}).get('isa', '?')}, OURO_ISA={os.environ.get('OURO_ISA', 'auto')}: "
          f"{a.runs} identical runs in {time.monotonic() - t0:.0f} s")
    for v in ("accept", "inconclusive", "reject"):
        print(f"  {v:12s} {verdicts.count(v)}")
    print(f"  change != none {sum(ch != 'none' for ch in changes)}; pairs median {statistics.median(pairs)}, max {max(pairs)}")
    print(f"  records: {out}")


if __name__ == "__main__":
    main()
