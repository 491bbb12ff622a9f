#!/usr/bin/env python3
"""`ouro probe` against the independent STREAM triad (bench/stream_triad.cpp), back to back.

Each round runs `ouro probe --refresh --json` (into a private XDG_CACHE_HOME), then
`ouro_stream_triad N`, and prints both triad figures per thread count with their ratio, plus the
share of each run's wall time during which some task waited for a CPU (Linux /proc/pressure/cpu,
"stall%"; the figures mean little above a few percent).

Usage: bench/probe_vs_stream.py [--build build] [--rounds 3] [--threads N] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time


def cpu_stall_us():
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.split("total=")[1])
    except OSError:
        return None
    return None


def timed(cmd, env=None):
    s0, w0 = cpu_stall_us(), time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    s1, w1 = cpu_stall_us(), time.monotonic()
    stall = (s1 - s0) / 1e6 / (w1 - w0) if s0 is not None and s1 is not None else float("nan")
    return out, stall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json")
    a = ap.parse_args()
    env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="ouro-probe-"))
    rows = []
    print(f"{'round':>5} {'thr':>3}  {'probe triad':>11} {'stream med':>10} {'stream best':>11}  "
          f"{'probe/med':>9} {'probe/best':>10}  {'probe read':>10}  {'stall% p/s':>10}")
    for rnd in range(1, a.rounds + 1):
        out, stall_p = timed([f"{a.build}/ouro", "probe", "--refresh", "--json", "--threads", str(a.threads)], env)
        probe = json.loads(out)
        out, stall_s = timed([f"{a.build}/ouro_stream_triad", str(a.threads)])
        stream = {int(m[1]): (float(m[2]), float(m[3]))
                  for m in re.finditer(r"threads (\d+): best ([\d.]+) GB/s\s+median ([\d.]+)", out)}
        for t in sorted(stream):
            p = probe["triad_gb_s"][str(t)]
            best, med = stream[t]
            row = {"round": rnd, "threads": t, "probe_triad": p, "probe_read": probe["read_gb_s"][str(t)],
                   "stream_median": med, "stream_best": best, "stall_probe": stall_p, "stall_stream": stall_s}
            rows.append(row)
            print(f"{rnd:>5} {t:>3}  {p:>11.1f} {med:>10.1f} {best:>11.1f}  {p / med:>9.2f} {p / best:>10.2f}  "
                  f"{row['probe_read']:>10.1f}  {100 * stall_p:>4.0f}/{100 * stall_s:<4.0f}")
    for t in sorted({r["threads"] for r in rows}):
        ratios = sorted(r["probe_triad"] / r["stream_median"] for r in rows if r["threads"] == t)
        print(f"threads {t}: probe/stream-median ratio over {len(ratios)} rounds: median {statistics.median(ratios):.2f}"
              f" (range {ratios[0]:.2f}-{ratios[-1]:.2f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": probe["cpu_model"], "rounds": rows}, f, indent=1)


if __name__ == "__main__":
    main()
