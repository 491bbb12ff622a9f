#!/usr/bin/env python3
"""What tracing costs: decode (and prefill) throughput of three configurations, interleaved in
rounds so that bandwidth drift hits all of them alike:
  off     build/ouro bench                       (spans compiled in, tracing disabled)
  on      build/ouro bench --trace FILE          (spans recorded and written)
  none    build-notrace/ouro bench               (spans compiled away: -DOURO_NO_TRACE=ON)
Prints medians and the ratios on/off and off/none. Build the third binary first with
  scripts/build.sh build-notrace Release -DOURO_NO_TRACE=ON
Usage: .venv/bin/python bench/trace_overhead.py [--rounds 7] [--prompt-len 128] [--gen-len 128]"""
import argparse
import json
import pathlib
import random
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def bench(binary, args, trace=None):
    cmd = [str(binary), "bench", "--repeats", "1", "--warmup", "1", "--json", *args]
    if trace:
        cmd += ["--trace", trace]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return out["prefill_tok_s"]["median"], out["decode_tok_s"]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    args = ["--prompt-len", str(a.prompt_len), "--gen-len", str(a.gen_len), "--threads", str(a.threads)]
    bins = {"off": ROOT / "build" / "ouro", "on": ROOT / "build" / "ouro", "none": ROOT / "build-notrace" / "ouro"}
    for name, b in bins.items():
        if not b.exists():
            raise SystemExit(f"missing {b}: see the usage in this file's docstring")
    res = {k: ([], []) for k in bins}
    with tempfile.TemporaryDirectory() as tmp:
        names = list(bins)
        for r in range(a.rounds):
            order = names[r % 3:] + names[:r % 3]  # rotate, so no configuration always runs first
            for name in order:
                b = bins[name]
                pp, tg = bench(b, args, trace=f"{tmp}/t.json" if name == "on" else None)
                res[name][0].append(pp)
                res[name][1].append(tg)
            print(f"round {r + 1}: " + "  ".join(f"{k} pp {res[k][0][-1]:.1f} tg {res[k][1][-1]:.1f}" for k in bins))
    med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in res.items()}
    for k, (pp, tg) in med.items():
        print(f"median {k:4s}: prefill {pp:.1f} tok/s, decode {tg:.1f} tok/s")
    paired = lambda x, y, i: statistics.median(p / q for p, q in zip(res[x][i], res[y][i]))
    def ci(x, y, i, n=2000):
        """95% bootstrap interval of the median of the paired (same-round) ratios."""
        ratios = [p / q for p, q in zip(res[x][i], res[y][i])]
        rng = random.Random(1)
        meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
        return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]
    for x, y, label in (("on", "off", "on/off  "), ("off", "none", "off/none")):
        lo, hi = ci(x, y, 1)
        print(f"decode {label} = {med[x][1] / med[y][1]:.4f} (median of paired ratios {paired(x, y, 1):.4f}, "
              f"95% bootstrap interval [{lo:.4f}, {hi:.4f}])")
    print(f"prefill on/off  = {med['on'][0] / med['off'][0]:.4f}; off/none = {med['off'][0] / med['none'][0]:.4f}")
    ratios = [res["off"][1][i] / res["none"][1][i] for i in range(a.rounds)]
    print(f"decode off/none per round: min {min(ratios):.4f} max {max(ratios):.4f}")


if __name__ == "__main__":
    main()
