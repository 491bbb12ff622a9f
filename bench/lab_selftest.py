#!/usr/bin/env python3
"""`ouro lab`'s own error rates, in one command (docs/lab.md, "A lab an agent cannot fool"):

- false accepts: every candidate of the adversarial set (tests/lab_adversaries.py) run R times
  through `ouro lab run`; each run must end as the set expects (rejected by the trust check that
  names the trick, or for its wrong outputs). A false accept is an adversary accepted; a miss is
  any other wrong outcome.
- true positives: the honest candidates of the same file (faster at depth, at long prompts, in
  prefill only, at 1 thread; slower at depth; 10% either way), run R times each: a true positive
  missed is one that does not get the verdict its criteria say, or that fails a trust check.
- false rejects: N identical runs per level (bench/lab_identical.py's specs: both sides the same
  binary and options); a reject of identical sides is a false reject, whether by a criterion or by
  a trust check.

usage: bench/lab_selftest.py [--adversary-runs 1] [--identical-runs 20] [--levels kernel,engine]
                             [--adversary-layers 8] [--bin build/ouro] [--out bench/results/lab-selftest.jsonl]
The adversarial set runs on the model's first 8 layers, as in CI (tests/lab/conftest.py);
--adversary-layers 0 runs it on the whole model. The identical runs use the whole model.
The environment passes through (OURO_ISA=avx2 measures the AVX2 kernels). Prints one table.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from ouro_testlib import write_first_layers  # noqa: E402
from lab_adversaries import ADVERSARIES, ADVERSARY_LAYERS, TRUE_POSITIVES, judge_outcome, spec_text  # noqa: E402
from lab_identical import MODEL, SPECS  # noqa: E402


def lab_run(binary, spec_path, env):
    p = subprocess.run([binary, "lab", "run", str(spec_path), "--json", "--no-ledger", "--bin", binary, "--quiet-wait", "5"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    if p.returncode not in (0, 3, 4):
        raise SystemExit(f"lab run of {spec_path} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--adversary-runs", type=int, default=1)
    ap.add_argument("--identical-runs", type=int, default=20)
    ap.add_argument("--levels", default="kernel,engine")
    ap.add_argument("--only", default="", help="comma-separated case names of the adversarial set (default: all)")
    ap.add_argument("--bin", default=str(ROOT / "build" / "ouro"))
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--adversary-layers", type=int, default=ADVERSARY_LAYERS, help="the adversarial set's model: the first N layers (0: all)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "lab-selftest.jsonl"))
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lab-selftest-"))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"))
    env.pop("OURO_FAULT", None)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.monotonic()
    adv_model = a.model
    if a.adversary_layers > 0:
        adv_model = str(tmp / f"first{a.adversary_layers}.gguf")
        write_first_layers(a.model, adv_model, a.adversary_layers)
    with out.open("w") as log:
        names = [n for n in a.only.split(",") if n] or sorted(ADVERSARIES)
        for name in names:
            kind = "true-positive" if name in TRUE_POSITIVES else "adversary"
            spec = tmp / f"{name}.toml"
            spec.write_text(spec_text(name, adv_model))
            for i in range(a.adversary_runs):
                rec = lab_run(a.bin, spec, env)
                outcome = judge_outcome(name, rec)
                rows.append((kind, name, rec["verdict"], rec.get("rejected_for", ""), outcome))
                log.write(json.dumps({"kind": kind, "name": name, "outcome": outcome, "record": rec}) + "\n")
                print(f"{name:28s} {rec['verdict']:12s} {rec.get('rejected_for', ''):22s} {outcome}", flush=True)
        for level in [x for x in a.levels.split(",") if x]:
            spec = tmp / f"identical-{level}.toml"
            spec.write_text(textwrap.dedent(SPECS[level]).format(model=a.model, gen_len=64, bench_repeats=3))
            for i in range(a.identical_runs):
                rec = lab_run(a.bin, spec, env)
                failed = [t["check"] for t in rec.get("trust", []) if t["verdict"] == "fail"]
                rows.append(("identical", level, rec["verdict"], rec.get("rejected_for", ""), ",".join(failed)))
                log.write(json.dumps({"kind": "identical", "level": level, "record": rec}) + "\n")
                print(f"identical {level:8s} run {i + 1:2d}: {rec['verdict']:12s} pairs {rec['pairs']:2d} "
                      f"trust failures {failed or 'none'}", flush=True)
    isa = rows and json.loads(out.read_text().splitlines()[0])["record"].get("machine", {}).get("isa", "?")
    print(f"\nisa {isa}, OURO_ISA={os.environ.get('OURO_ISA', 'auto')}, {time.monotonic() - t0:.0f} s; records in {out}")
    adv = [r for r in rows if r[0] == "adversary"]
    false_accepts = sum(1 for r in adv if r[4].startswith("FALSE ACCEPT"))
    misses = sum(1 for r in adv if r[4] != "ok")
    print(f"adversarial set: {len(adv)} runs, {false_accepts} false accepts, {misses} outcomes not as expected")
    tps = [r for r in rows if r[0] == "true-positive"]
    print(f"true positives: {len(tps)} runs, {sum(1 for r in tps if r[4] != 'ok')} not as their criteria say "
          f"(or with a trust check failing)")
    for level in [x for x in a.levels.split(",") if x]:
        ids = [r for r in rows if r[0] == "identical" and r[1] == level]
        v = [r[2] for r in ids]
        print(f"identical {level}: {len(ids)} runs: accept {v.count('accept')}, inconclusive {v.count('inconclusive')}, "
              f"reject (false) {v.count('reject')}; trust false rejects {sum(1 for r in ids if r[3])}")


if __name__ == "__main__":
    main()
