#!/usr/bin/env python3
"""Issue 5's ratio goal, side by side: output tokens/s at 1 and at 16 concurrent streams for each
weight configuration, every configuration's server started fresh by `ouro loadtest --serve-bin`,
configurations interleaved round by round (order reversed every other round) so machine drift
touches all alike. Prints the medians and the ratios; writes JSON. Decisions are made by lab
specs (experiments/specs/serve-*.toml); this is the table.

usage: bench/serve_ratio.py [--bin build/ouro] [--model PATH] [--rounds 3] [--out FILE]
"""
import argparse
import json
import statistics
import subprocess

from compare_serve import OURO_CONFIGS  # one definition of the two configurations

CONFIGS = {"native": " ".join(OURO_CONFIGS["ouro"]), "w8a8+head": " ".join(OURO_CONFIGS["ouro-w8a8"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/ouro")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/serve-ratio.json")
    a = ap.parse_args()
    runs = {}
    points = [(name, c) for name in CONFIGS for c in (1, 16)]
    for rnd in range(a.rounds):
        for name, c in (points if rnd % 2 == 0 else list(reversed(points))):
            args = f"-m {a.model} -t {a.threads} {CONFIGS[name]}".strip()
            p = subprocess.run([a.bin, "loadtest", "--serve-bin", a.bin, "--serve-args", args, "--concurrency", str(c),
                                "--requests", str(16 if c == 1 else 32), "--prompt-len", "32", "--gen-len", "64", "--json"],
                               capture_output=True, text=True, check=True)
            tok_s = json.loads(p.stdout)["output_tok_s"]
            runs.setdefault(f"{name} c{c}", []).append(tok_s)
            print(f"round {rnd + 1}: {name} c{c}: {tok_s:.1f} tok/s", flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    best_c1 = max(v for k, v in med.items() if k.endswith(" c1"))
    ratios = {f"{n} c16 / {n} c1": med[f"{n} c16"] / med[f"{n} c1"] for n in CONFIGS}
    ratios.update({f"{n} c16 / best c1": med[f"{n} c16"] / best_c1 for n in CONFIGS})
    for k, v in med.items():
        print(f"{k:16s} {v:7.1f} tok/s")
    for k, v in ratios.items():
        print(f"{k:28s} {v:5.2f}x")
    with open(a.out, "w") as f:
        json.dump({"runs": runs, "median": med, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
