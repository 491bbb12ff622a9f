"""`ouro trace summarize | overlap | diff` on synthetic traces with known answers.

Every expected figure is computed here independently of the C++ code: spans have integer
microsecond bounds, so a span is the set of its 1-us cells [t, t+1) and unions, overlaps, self
times (each cell goes to the innermost span: latest start, then earliest end) and idle times are
set arithmetic. Results are compared to 1e-9 relative. Then: B/E pairs and the bare-array form
give the same answers as X events; malformed files exit 1 with one "ouro: FILE: ..." line; bad
flags exit 2; 200 seeded mutations of a small valid trace never crash.

Contract decisions (docs/trace.md, "Reading a trace"):
  * the op table of summarize is the cat "op" spans of the main thread (the thread with the most
    op time; with no op spans at all, every span of the busiest thread);
  * shares are self time / wall; rows + residual = 100%;
  * --a matching no span is a runtime error (exit 1), --b matching none is fine.
"""
import collections
import json
import math
import os
import random
import subprocess

import pytest

CRASH_MARKERS = ("Segmentation", "terminate called", "internal error", "Aborted", "core dumped",
                 "AddressSanitizer", "runtime error:", "std::")
OPS = ["attn_norm", "qkv", "rope_kv", "attention", "attn_out", "ffn_norm", "gate_up", "swiglu", "down"]


# ---- running ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """No cached probe may leak into the results: an empty cache and home."""
    d = tmp_path_factory.mktemp("home")
    e = dict(os.environ)
    e["XDG_CACHE_HOME"] = str(d / "cache")
    e["HOME"] = str(d)
    return e


def run(ouro_bin, env, *args, timeout=60):
    return subprocess.run([str(ouro_bin), *map(str, args)], capture_output=True, text=True, errors="replace",
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def describe(p):
    return f"$ {' '.join(map(str, p.args))}\nexit {p.returncode}\nstdout: {p.stdout[:800]!r}\nstderr: {p.stderr[:800]!r}"


def assert_no_crash(p):
    assert p.returncode >= 0, f"killed by signal {-p.returncode}\n{describe(p)}"
    for m in CRASH_MARKERS:
        assert m not in p.stderr, f"crash marker {m!r}\n{describe(p)}"


def ok_json(ouro_bin, env, *args):
    p = run(ouro_bin, env, *args, "--json")
    assert p.returncode == 0, describe(p)
    assert p.stderr == "", describe(p)
    return json.loads(p.stdout)


def assert_error(p, code, *needles):
    assert_no_crash(p)
    assert p.returncode == code, describe(p)
    assert p.stdout == "", describe(p)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ouro: "), describe(p)
    for n in needles:
        assert str(n) in lines[0], f"{n!r} not in the message\n{describe(p)}"


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def write(path, obj):
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


# ---- synthetic traces ------------------------------------------------------------------------

def X(name, cat, tid, ts, dur, pid=1, **args):
    e = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def meta(tid, name, pid=1):
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def ouro_like(seed, layers=3, steps=3, workers=2, extra_op=None, drop_sample=False, slow=None):
    """A trace in Ouro's vocabulary (docs/trace.md): request > phase > op (> sync-wait) on the main
    thread, pool.job kernels on workers, plus counter/flow/metadata events. Integer microseconds;
    parents are strictly longer than children, so no two spans of one thread coincide."""
    rng = random.Random(seed)
    ev = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "ouro"}}, meta(0, "main")]
    ev += [meta(w, f"worker-{w}") for w in range(1, workers + 1)]
    ev.append(X("tokenize", "io", 0, 0, 7, bytes=12, tokens=3))
    t = 10
    req_start = t
    for step in range(steps):
        ph_start = t
        t += rng.randint(1, 3)
        for layer in range(layers):
            names = OPS + ([extra_op] if extra_op else [])
            for op in names:
                t += rng.randint(0, 4)
                dur = rng.randint(3, 40) * (3 if slow == op else 1)
                args = {"layer": layer, "tokens": 1, "bytes": rng.randint(1, 10**6), "flops": rng.randint(0, 10**7)}
                if op == "swiglu":
                    del args["flops"]  # an op without flops
                ev.append(X(op, "op", 0, t, dur, **args))
                if dur >= 10 and op not in ("attn_norm", "ffn_norm", "swiglu"):
                    for w in range(1, workers + 1):
                        ks = t + rng.randint(0, 3)
                        ev.append(X("pool.job", "kernel", w, ks, rng.randint(1, t + dur - ks), region=op))
                    k0 = t + rng.randint(1, 3)
                    ev.append(X("pool.job", "kernel", 0, t, k0 - t, region=op))
                    ws = k0 + rng.randint(0, 2)
                    we = t + dur - rng.randint(0, 2)
                    if we > ws:
                        ev.append(X("pool.wait", "sync-wait", 0, ws, we - ws, region=op))
                t += dur
        for op, dur in (("output_norm", rng.randint(2, 5)), ("lm_head", rng.randint(30, 60))):
            t += rng.randint(0, 2)
            ev.append(X(op, "op", 0, t, dur, bytes=rng.randint(10**5, 10**7), flops=rng.randint(10**5, 10**8)))
            t += dur
        t += 1
        ev.append(X("prefill" if step == 0 else "decode", "phase", 0, ph_start, t - ph_start, tokens=1, pos=step))
        ev.append({"name": "kv_cache", "ph": "C", "pid": 1, "tid": 0, "ts": t, "args": {"tokens": step + 1}})
        if not drop_sample:
            ev.append(X("sample", "sample", 0, t + 1, rng.randint(2, 9), vocab=49152))
        t += 12
    ev.append(X("generate", "request", 0, req_start - 1, t - req_start + 2, request_id=1))
    ev.append({"name": "request", "cat": "request", "ph": "s", "pid": 1, "tid": 0, "ts": 0, "id": 1})
    ev.append(X("pool.job", "kernel", 1, t + 5, 4, region="late"))  # the wall ends on a worker
    rng.shuffle(ev)  # order in the file must not matter
    return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": {"dropped_events": {"main": 0}}}


def generic_trace(seed):
    """A non-Ouro trace: nested call trees on string-named threads, no op/kernel categories."""
    rng = random.Random(seed)
    ev = [meta("render", "CrRendererMain", pid=7), meta("io", "IOThread", pid=7)]

    def tree(tid, start, end, depth):
        ev.append(X(rng.choice(["layout", "paint", "script", "gc", "parse"]), rng.choice(["blink", "v8"]), tid,
                    start, end - start, pid=7))
        t = start + rng.randint(0, 3)
        while depth < 4 and t < end - 3:
            d = rng.randint(1, max(1, (end - t) // 2))
            if t + d >= end or (t == start and t + d == end):
                break
            tree(tid, t, t + d, depth + 1)
            t += d + rng.randint(0, 5)

    t = 0
    for _ in range(6):
        d = rng.randint(50, 300)
        tree("render", t, t + d, 0)
        t += d + rng.randint(0, 30)
    ev.append(X("wait", "sync-wait", "render", t + 2, 40, pid=7))
    t2 = 5
    for _ in range(4):
        d = rng.randint(5, 60)
        tree("io", t2, t2 + d, 2)
        t2 += d + rng.randint(50, 100)
    return ev  # the bare-array form


# ---- the reference (integer cells) -----------------------------------------------------------

def spans(trace):
    evs = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in evs if e.get("ph") == "X"]


def cells(s):
    return range(s["ts"], s["ts"] + s["dur"])


def union(ss):
    out = set()
    for s in ss:
        out.update(cells(s))
    return out


def thread(s):
    return (str(s.get("pid", 0)), str(s.get("tid", 0)))


def wall(ss):
    return min(s["ts"] for s in ss), max(s["ts"] + s["dur"] for s in ss)


def self_cells(ss):
    """Self time per span index (cells), innermost = latest start, then earliest end; kernel and
    sync-wait spans (parts of an op) rank below all others."""
    best = {}
    for i, s in enumerate(ss):
        key = (s.get("cat") not in ("kernel", "sync-wait"), s["ts"], -(s["ts"] + s["dur"]))
        for c in cells(s):
            if c not in best or key > best[c][0]:
                best[c] = (key, i)
    counts = collections.Counter(i for _, i in best.values())
    return [counts.get(i, 0) for i in range(len(ss))]


def main_of(ss):
    ops = [s for s in ss if s.get("cat") == "op"]
    pool = ops or ss
    per = collections.defaultdict(list)
    for s in pool:
        per[thread(s)].append(s)
    return max(per, key=lambda t: len(union(per[t])))


def ref_summary(trace, probe=None):
    ss = spans(trace)
    w0, w1 = wall(ss)
    W = w1 - w0
    main = main_of(ss)
    op_mode = any(s.get("cat") == "op" for s in ss)
    table = [s for s in ss if thread(s) == main and (not op_mode or s.get("cat") == "op")]
    selfs = self_cells(table)
    waits = union(s for s in ss if thread(s) == main and s.get("cat") == "sync-wait")
    rows = {}
    for s, sc in zip(table, selfs):
        r = rows.setdefault((s["name"], s.get("cat", "")), dict(calls=0, total=0, self=0, wait=0, bytes=None, flops=None))
        r["calls"] += 1
        r["total"] += s["dur"]
        r["self"] += sc
        r["wait"] += s["dur"] if s.get("cat") == "sync-wait" else len(set(cells(s)) & waits)
        for k in ("bytes", "flops"):
            if k in s.get("args", {}):
                r[k] = (r[k] or 0) + s["args"][k]
    layers = collections.defaultdict(lambda: dict(calls=0, total=0, self=0))
    for s, sc in zip(table, selfs):
        lay = str(s["args"]["layer"]) if "layer" in s.get("args", {}) else "(no layer)"
        layers[lay]["calls"] += 1
        layers[lay]["total"] += s["dur"]
        layers[lay]["self"] += sc
    busy_cats = {"op", "kernel"} if any(s.get("cat") in ("op", "kernel") for s in ss) else None
    threads = {}
    for s in ss:
        threads.setdefault(thread(s), [])
        threads[thread(s)].append(s)
    trows = {}
    for t, tss in threads.items():
        busy = len(union(s for s in tss if busy_cats is None or s.get("cat") in busy_cats))
        trows[t] = dict(busy=busy, waiting=len(union(s for s in tss if s.get("cat") == "sync-wait")), idle=W - busy,
                        spans=len(tss))
    return dict(wall=W, w0=w0, main=main, rows=rows, residual=W - sum(selfs), layers=dict(layers), threads=trows,
                mode="op" if op_mode else "all-spans")


def check_summary(got, ref):
    assert got["mode"] == ref["mode"]
    assert close(got["wall_s"], ref["wall"] / 1e6)
    assert got["wall_start_us"] == ref["w0"]
    assert (got["main_thread"]["pid"], got["main_thread"]["tid"]) == ref["main"]
    assert {(o["name"], o["cat"]) for o in got["ops"]} == set(ref["rows"])
    for o in got["ops"]:
        r = ref["rows"][(o["name"], o["cat"])]
        assert o["calls"] == r["calls"], o
        assert close(o["total_s"], r["total"] / 1e6), o
        assert close(o["self_s"], r["self"] / 1e6), o
        assert close(o["share"], r["self"] / ref["wall"]), o
        assert close(o["mean_s"], r["total"] / r["calls"] / 1e6), o
        assert close(o["wait_s"], r["wait"] / 1e6), o
        for k, rate in (("bytes", "gb_s"), ("flops", "gflop_s")):
            if r[k] is None:
                assert o[k] is None and o[rate] is None, o
            else:
                assert close(o[k], r[k]), o
                assert close(o[rate], r[k] / (r["total"] / 1e6) / 1e9), o
    selfs = [o["self_s"] for o in got["ops"]]
    assert selfs == sorted(selfs, reverse=True)
    assert close(got["residual"]["self_s"], ref["residual"] / 1e6)
    assert close(sum(o["share"] for o in got["ops"]) + got["residual"]["share"], 1.0)
    assert close(sum(o["self_s"] for o in got["ops"]) + got["residual"]["self_s"], got["wall_s"])
    lay = {l["layer"]: l for l in got["layers"]}
    if any(k != "(no layer)" for k in ref["layers"]):
        assert set(lay) == set(ref["layers"])
        for k, r in ref["layers"].items():
            assert lay[k]["calls"] == r["calls"]
            assert close(lay[k]["total_s"], r["total"] / 1e6)
            assert close(lay[k]["self_s"], r["self"] / 1e6)
        assert close(sum(l["share"] for l in got["layers"]) + got["residual"]["share"], 1.0)
    else:
        assert got["layers"] == []
    th = {(t["pid"], t["tid"]): t for t in got["threads"]}
    for t, r in ref["threads"].items():
        assert th[t]["spans"] == r["spans"]
        assert close(th[t]["busy_s"], r["busy"] / 1e6), t
        assert close(th[t]["waiting_s"], r["waiting"] / 1e6), t
        assert close(th[t]["idle_s"], r["idle"] / 1e6), t


# ---- summarize -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2])
def test_summarize_ouro_like(ouro_bin, env, tmp_path, seed):
    tr = ouro_like(seed)
    got = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "t.json", tr))
    ref = ref_summary(tr)
    check_summary(got, ref)
    assert got["main_thread"]["label"] == "tid 0 (main)"
    assert got["probe"] is None
    assert all(o["verdict"] in ("unknown", "waiting") for o in got["ops"])
    assert len(got["layers"]) == 3 + 1  # layers 0..2 and the ops without a layer


def test_summarize_generic_trace(ouro_bin, env, tmp_path):
    tr = generic_trace(5)
    got = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "g.json", tr))
    ref = ref_summary(tr)
    assert ref["mode"] == "all-spans" and ref["main"] == ("7", "render")
    check_summary(got, ref)
    assert got["main_thread"]["label"] == "tid render (CrRendererMain)"
    # Nested spans: self time is less than the total for the roots.
    assert any(o["self_s"] < o["total_s"] for o in got["ops"])
    assert [o["verdict"] for o in got["ops"] if o["cat"] == "sync-wait"] == ["waiting"]


def test_summarize_text(ouro_bin, env, tmp_path):
    p = run(ouro_bin, env, "trace", "summarize", write(tmp_path / "t.json", ouro_like(3)))
    assert p.returncode == 0, describe(p)
    for needle in ("main thread: tid 0 (main)", "qkv", "residual", "wall", "100.0%", "layers", "worker-2",
                   "probe: none"):
        assert needle in p.stdout, needle
    p = run(ouro_bin, env, "trace", "summarize", "--top", "2", tmp_path / "t.json")
    assert p.returncode == 0 and "(9 more)" in p.stdout, describe(p)


PROBE = {"version": 1, "cpu_model": "test", "max_threads": 2,
         "read_gb_s": {"1": 6.0, "2": 10.0}, "triad_gb_s": {"1": 5.0},
         "fp32_gflops": {"1": 60.0, "2": 100.0}, "bf16_gflops": {}, "int8_gops": {"1": 250.0, "2": 400.0},
         "measured_at": "2024-01-01T00:00:00Z"}


def verdict_trace():
    """Ops built to land in each verdict class against PROBE (10 GB/s, 100 GFLOP/s fp32, 400 int8).
    10 GB/s = 10,000 bytes/us; 100 GFLOP/s = 100,000 flop/us; ridge = 10 flop/byte."""
    ev = [meta(0, "main")]
    t = 0

    def op(name, dur, **args):
        nonlocal t
        ev.append(X(name, "op", 0, t, dur, **args))
        t += dur + 1
        return t - dur - 1

    op("mem", 100, bytes=800_000, flops=1_000)                       # 80% of bandwidth, AI tiny
    op("comp", 100, bytes=1_000, flops=8_000_000)                     # 80% of fp32 peak
    op("ridge", 100, bytes=600_000, flops=6_000_000)                  # 60%/60%, AI == ridge: compute
    op("int8mm", 100, bytes=1_000, flops=8_000_000, precision="int8")  # 20% of the int8 peak
    s = op("waity", 100, bytes=1_000)
    ev.append(X("pool.wait", "sync-wait", 0, s + 20, 60))             # 60% of the op waiting
    for _ in range(3):
        op("tiny", 5, bytes=100)                                      # mean 5 us, far from roofs
    op("slow", 200, bytes=1_000)                                      # long, far from roofs
    op("nodata", 50)                                                  # no bytes, no flops
    return {"traceEvents": ev}


def test_summarize_verdicts_with_probe(ouro_bin, env, tmp_path):
    tr = write(tmp_path / "v.json", verdict_trace())
    probe = write(tmp_path / "probe.json", PROBE)
    got = ok_json(ouro_bin, env, "trace", "summarize", tr, "--probe", probe)
    check_summary(got, ref_summary(verdict_trace()))
    assert got["probe"]["read_gb_s"] == 10.0 and got["probe"]["fp32_gflops"] == 100.0
    assert got["probe"]["int8_gops"] == 400.0 and got["probe"]["bf16_gflops"] is None
    v = {o["name"]: o for o in got["ops"]}
    expect = {"mem": "memory-bound", "comp": "compute-bound", "ridge": "compute-bound", "int8mm": "under-utilized",
              "waity": "waiting", "tiny": "overhead-bound", "slow": "under-utilized", "nodata": "unknown"}
    assert {k: o["verdict"] for k, o in v.items()} == expect
    assert close(v["mem"]["gb_s"], 8.0) and close(v["mem"]["bw_fraction"], 0.8)
    assert close(v["comp"]["gflop_s"], 80.0) and close(v["comp"]["flop_fraction"], 0.8)
    assert v["int8mm"]["peak"] == "int8" and close(v["int8mm"]["flop_fraction"], 0.2)
    assert v["comp"]["peak"] == "fp32"
    assert close(v["waity"]["wait_s"], 60e-6)
    # Without a probe: no fractions, and only the waiting verdict survives.
    got = ok_json(ouro_bin, env, "trace", "summarize", tr)
    assert {o["name"]: o["verdict"] for o in got["ops"]} == {k: ("waiting" if k == "waity" else "unknown")
                                                             for k in expect}
    assert all(o["bw_fraction"] is None and o["flop_fraction"] is None for o in got["ops"])


def test_bad_probe_file(ouro_bin, env, tmp_path):
    tr = write(tmp_path / "v.json", verdict_trace())
    for i, bad in enumerate(["{", "[]", '{"read_gb_s": 5}', '{"read_gb_s": {"1": "fast"}}', '{"cpu_model": "x"}']):
        p = write(tmp_path / f"probe{i}.json", bad)
        assert_error(run(ouro_bin, env, "trace", "summarize", tr, "--probe", p), 1, p)
    assert_error(run(ouro_bin, env, "trace", "summarize", tr, "--probe", tmp_path / "nope.json"), 1, "nope.json")


# ---- B/E, bare arrays, optional fields -----------------------------------------------------------

def to_begin_end(trace, seed, interleave):
    """Every X event as a B/E pair (B carries name and layer, E the other args)."""
    rng = random.Random(seed)
    evs = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            evs.append((-1, 0, 0, e))
            continue
        args = dict(e.get("args", {}))
        b = {k: v for k, v in e.items() if k not in ("dur", "args")}
        b["ph"] = "B"
        if "layer" in args:
            b["args"] = {"layer": args.pop("layer")}
        end = {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]}
        if args:
            end["args"] = args
        # At one instant: ends before begins; outer begins first; inner ends first.
        evs.append((e["ts"], 1, -(e["ts"] + e["dur"]), b))
        evs.append((e["ts"] + e["dur"], 0, -e["ts"], end))
    evs.sort(key=lambda x: x[:3])
    out = [e for *_, e in evs]
    if not interleave:  # one block per thread, threads in random order
        order = list({str(e.get("tid")) for e in out})
        rng.shuffle(order)
        out = [e for t in order for e in out if str(e.get("tid")) == t]
    return {"traceEvents": out}


@pytest.mark.parametrize("interleave", [True, False])
def test_begin_end_pairs_equal_complete_events(ouro_bin, env, tmp_path, interleave):
    tr = ouro_like(4)
    be = to_begin_end(tr, 4, interleave)
    assert not any(e.get("ph") == "X" for e in be["traceEvents"])
    a = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "x.json", tr))
    b = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "be.json", be))
    a.pop("file"), b.pop("file")
    assert a == b
    check_summary(b, ref_summary(tr))
    d = ok_json(ouro_bin, env, "trace", "diff", tmp_path / "x.json", tmp_path / "be.json")
    assert all(r["delta_s"] == 0 for r in d["rows"]) and d["new"] == [] and d["vanished"] == []


def test_unmatched_begin_end_are_ignored(ouro_bin, env, tmp_path):
    tr = ouro_like(4)
    be = to_begin_end(tr, 4, True)
    be["traceEvents"].insert(0, {"ph": "E", "pid": 1, "tid": 0, "ts": 0})
    be["traceEvents"].append({"ph": "B", "pid": 1, "tid": 0, "ts": 10**6, "name": "never_ends"})
    got = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "be.json", be))
    assert got["unmatched_end"] == 1 and got["unclosed_begin"] == 1
    check_summary(got, ref_summary(tr))


def test_bare_array_and_missing_optional_fields(ouro_bin, env, tmp_path):
    tr = ouro_like(6)
    a = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "o.json", tr))
    b = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "a.json", tr["traceEvents"]))
    a.pop("file"), b.pop("file")
    assert a == b
    # Events with only ph/ts/dur: pid and tid default to 0, name and cat to "".
    bare = [{"ph": "X", "ts": 0, "dur": 10}, {"ph": "X", "ts": 5, "dur": 10, "name": "n"}, {"ph": "i", "ts": 3},
            {"ph": "X", "ts": 30, "dur": 0.5, "args": {"layer": "L", "bytes": "many"}}]
    got = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "bare.json", bare))
    assert got["spans"] == 3 and close(got["wall_s"], 30.5e-6)
    assert close(got["residual"]["self_s"], 15e-6)
    assert {l["layer"] for l in got["layers"]} == {"L", "(no layer)"}


def test_fractional_microseconds(ouro_bin, env, tmp_path):
    ev = [X("a", "op", 0, 0.25, 1.5), X("b", "op", 0, 2.0, 0.125), X("k", "kernel", 1, 0.5, 3.0)]
    got = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "f.json", ev))
    assert close(got["wall_s"], 3.25e-6)
    assert close(got["residual"]["self_s"], (3.25 - 1.5 - 0.125) * 1e-6)
    ov = ok_json(ouro_bin, env, "trace", "overlap", tmp_path / "f.json", "--a", "a", "--b", "k")
    assert close(ov["overlap_s"], 1.25e-6) and close(ov["fraction"], 1.25 / 1.5)


# ---- overlap ---------------------------------------------------------------------------------

def glob_match(glob, s):
    import fnmatch
    return fnmatch.fnmatchcase(s, glob.replace("[", "[[]").replace("?", "[?]"))


def matcher(pattern):
    if pattern.startswith("cat:"):
        return lambda s: glob_match(pattern[4:], s.get("cat", ""))
    if pattern.startswith("name:"):
        pattern = pattern[5:]
    return lambda s: glob_match(pattern, s.get("name", ""))


def runs(cellset):
    out, cur = [], None
    for c in sorted(cellset):
        if cur and c == cur[1]:
            cur[1] = c + 1
        else:
            cur = [c, c + 1]
            out.append(cur)
    return out


@pytest.mark.parametrize("a,b", [("cat:op", "cat:kernel"), ("attn*", "*"), ("*norm", "pool.*"),
                                 ("name:qkv", "cat:sync-wait"), ("cat:op", "nothing-matches"),
                                 ("generate", "cat:o*"), ("*e*", "cat:*a*")])
def test_overlap(ouro_bin, env, tmp_path, a, b):
    tr = ouro_like(7)
    ss = spans(tr)
    A = union(s for s in ss if matcher(a)(s))
    B = union(s for s in ss if matcher(b)(s))
    got = ok_json(ouro_bin, env, "trace", "overlap", write(tmp_path / "t.json", tr), "--a", a, "--b", b)
    assert got["a_spans"] == sum(1 for s in ss if matcher(a)(s))
    assert got["b_spans"] == sum(1 for s in ss if matcher(b)(s))
    assert close(got["a_s"], len(A) / 1e6) and close(got["b_s"], len(B) / 1e6)
    assert close(got["overlap_s"], len(A & B) / 1e6)
    assert close(got["fraction"], len(A & B) / len(A))
    assert close(got["a_without_b_s"], len(A - B) / 1e6)
    w0 = wall(ss)[0]
    expect = sorted(runs(A - B), key=lambda r: (-(r[1] - r[0]), r[0]))[:5]
    assert [(s["start_us"], s["end_us"]) for s in got["longest_a_without_b"]] == [tuple(r) for r in expect]
    for s, r in zip(got["longest_a_without_b"], expect):
        assert close(s["duration_s"], (r[1] - r[0]) / 1e6) and close(s["start_s"], (r[0] - w0) / 1e6)


def test_overlap_text_and_no_match(ouro_bin, env, tmp_path):
    t = write(tmp_path / "t.json", ouro_like(7))
    p = run(ouro_bin, env, "trace", "overlap", t, "--a", "cat:op", "--b", "cat:kernel")
    assert p.returncode == 0 and "A overlapped by B" in p.stdout and "longest stretches" in p.stdout, describe(p)
    assert_error(run(ouro_bin, env, "trace", "overlap", t, "--a", "nope*", "--b", "cat:op"), 1, "nope*", t)


def test_glob_literals(ouro_bin, env, tmp_path):
    ev = [X("a?b", "c", 0, 0, 5), X("axb", "c", 0, 10, 5), X("[x]", "c", 0, 20, 5), X("cat:z", "c", 0, 30, 5)]
    t = write(tmp_path / "g.json", ev)
    for pat, n in (("a?b", 1), ("a*b", 2), ("[x]", 1), ("*", 4), ("**", 4), ("name:cat:z", 1), ("cat:c", 4),
                   ("cat:z", 0), ("*:*", 1)):
        p = run(ouro_bin, env, "trace", "overlap", t, "--a", "*", "--b", pat, "--json")
        assert p.returncode == 0, describe(p)
        assert json.loads(p.stdout)["b_spans"] == n, pat


# ---- diff ------------------------------------------------------------------------------------

def ref_profile(trace):
    ss = spans(trace)
    main = main_of(ss)
    on_main = [s for s in ss if thread(s) == main]
    selfs = self_cells(on_main)
    keys = collections.defaultdict(lambda: dict(calls=0, total=0, self=0))

    def key(s):
        a = s.get("args", {})
        return (s.get("cat", ""), s.get("name", ""), str(a["layer"]) if "layer" in a else None)

    for s in ss:
        keys[key(s)]["calls"] += 1
        keys[key(s)]["total"] += s["dur"]
    for s, sc in zip(on_main, selfs):
        keys[key(s)]["self"] += sc
    w0, w1 = wall(ss)
    return dict(keys), w1 - w0, (w1 - w0) - sum(selfs)


def test_diff(ouro_bin, env, tmp_path):
    base = ouro_like(8)
    cand = ouro_like(9, layers=4, extra_op="moe_router", drop_sample=True, slow="attention")
    got = ok_json(ouro_bin, env, "trace", "diff", write(tmp_path / "base.json", base),
                  write(tmp_path / "cand.json", cand))
    kb, wb, rb = ref_profile(base)
    kc, wc, rc = ref_profile(cand)
    assert close(got["base"]["wall_s"], wb / 1e6) and close(got["cand"]["wall_s"], wc / 1e6)
    assert close(got["delta_wall_s"], (wc - wb) / 1e6)
    rows = {(r["cat"], r["name"], r["layer"]): r for r in got["rows"]}
    assert set(rows) == set(kb) | set(kc)
    zero = dict(calls=0, total=0, self=0)
    for k, r in rows.items():
        b, c = kb.get(k, zero), kc.get(k, zero)
        assert close(r["base_s"], b["self"] / 1e6) and close(r["cand_s"], c["self"] / 1e6), k
        assert close(r["delta_s"], (c["self"] - b["self"]) / 1e6), k
        assert (r["base_calls"], r["cand_calls"]) == (b["calls"], c["calls"]), k
        assert close(r["base_total_s"], b["total"] / 1e6) and close(r["cand_total_s"], c["total"] / 1e6), k
    deltas = [abs(r["delta_s"]) for r in got["rows"]]
    assert deltas == sorted(deltas, reverse=True)
    # The residual is main-thread time in no span; with it the contributions sum to the wall delta.
    assert close(got["residual"]["base_s"], rb / 1e6) and close(got["residual"]["cand_s"], rc / 1e6)
    assert close(got["residual"]["delta_s"], (rc - rb) / 1e6)
    assert close(sum(r["delta_s"] for r in got["rows"]) + got["residual"]["delta_s"], got["delta_wall_s"])
    new = {(k["cat"], k["name"], k["layer"]) for k in got["new"]}
    gone = {(k["cat"], k["name"], k["layer"]) for k in got["vanished"]}
    assert new == set(kc) - set(kb) and gone == set(kb) - set(kc)
    assert ("op", "moe_router", "0") in new and ("op", "qkv", "3") in new
    assert gone == {("sample", "sample", None)}
    # The slowed op explains the most; its helpers' waits stay with it (pool.wait has no self time).
    assert got["rows"][0]["name"] == "attention" and got["rows"][0]["delta_s"] > 0
    assert got["by_name"][0]["name"] == "attention"
    for r in got["rows"]:
        if r["cat"] == "sync-wait":
            assert r["base_s"] == r["cand_s"] == 0 and r["base_total_s"] > 0
    # Summed over layers: each (cat, name) row is the sum of its layer rows.
    names = collections.defaultdict(float)
    for r in got["rows"]:
        names[(r["cat"], r["name"])] += r["delta_s"]
    assert {(r["cat"], r["name"]) for r in got["by_name"]} == set(names)
    for r in got["by_name"]:
        assert close(r["delta_s"], names[(r["cat"], r["name"])])

    p = run(ouro_bin, env, "trace", "diff", tmp_path / "base.json", tmp_path / "cand.json", "--top", "5")
    assert p.returncode == 0, describe(p)
    for needle in ("residual / not in spans", "more keys)", "new in cand", "vanished from base", "attention"):
        assert needle in p.stdout, needle


def test_parts_of_an_op_stay_with_it(ouro_bin, env, tmp_path):
    ev = [meta(0, "main"),
          X("A", "op", 0, 0, 100, layer=0), X("pool.job", "kernel", 0, 0, 40, region="A"),
          X("pool.wait", "sync-wait", 0, 50, 40, region="A"), X("pool.job", "kernel", 1, 0, 95, region="A"),
          X("pool.job", "kernel", 0, 200, 30, region="bare"),  # in no op: its own time
          X("B", "op", 0, 300, 10)]
    t = write(tmp_path / "p.json", ev)
    d = ok_json(ouro_bin, env, "trace", "diff", t, t)
    rows = {(r["cat"], r["name"], r["layer"]): r for r in d["rows"]}
    assert close(rows[("op", "A", "0")]["base_s"], 100e-6)
    assert close(rows[("kernel", "pool.job", None)]["base_s"], 30e-6)
    assert close(rows[("kernel", "pool.job", None)]["base_total_s"], 165e-6)
    assert rows[("sync-wait", "pool.wait", None)]["base_s"] == 0
    assert close(rows[("op", "B", None)]["base_s"], 10e-6)
    assert close(d["residual"]["base_s"], 170e-6)
    s = ok_json(ouro_bin, env, "trace", "summarize", t)
    a = next(o for o in s["ops"] if o["name"] == "A")
    assert close(a["self_s"], 100e-6) and close(a["wait_s"], 40e-6) and a["verdict"] == "unknown"
    assert close(s["residual"]["self_s"], 200e-6)
    th = {t["tid"]: t for t in s["threads"]}
    assert close(th["0"]["busy_s"], 140e-6) and close(th["0"]["waiting_s"], 40e-6) and close(th["0"]["idle_s"], 170e-6)
    assert close(th["1"]["busy_s"], 95e-6) and close(th["1"]["idle_s"], 215e-6)


def test_diff_generic_and_identical(ouro_bin, env, tmp_path):
    g1 = write(tmp_path / "g1.json", generic_trace(1))
    g2 = write(tmp_path / "g2.json", generic_trace(2))
    got = ok_json(ouro_bin, env, "trace", "diff", g1, g2)
    kb, wb, rb = ref_profile(generic_trace(1))
    kc, wc, rc = ref_profile(generic_trace(2))
    assert close(got["delta_wall_s"], (wc - wb) / 1e6)
    assert close(got["residual"]["delta_s"], (rc - rb) / 1e6)
    assert close(sum(r["delta_s"] for r in got["rows"]) + got["residual"]["delta_s"], got["delta_wall_s"])
    same = ok_json(ouro_bin, env, "trace", "diff", g1, g1)
    assert same["delta_wall_s"] == 0 and all(r["delta_s"] == 0 for r in same["rows"])
    assert same["residual"]["delta_s"] == 0 and same["new"] == [] and same["vanished"] == []


def test_empty_trace(ouro_bin, env, tmp_path):
    e = write(tmp_path / "e.json", {"traceEvents": [meta(0, "main")]})
    got = ok_json(ouro_bin, env, "trace", "summarize", e)
    assert got["spans"] == 0 and got["wall_s"] == 0 and got["ops"] == []
    assert run(ouro_bin, env, "trace", "summarize", e).returncode == 0
    d = ok_json(ouro_bin, env, "trace", "diff", e, write(tmp_path / "t.json", ouro_like(1)))
    assert close(sum(r["delta_s"] for r in d["rows"]) + d["residual"]["delta_s"], d["delta_wall_s"])


# ---- malformed input and usage errors ----------------------------------------------------------

MALFORMED = {
    "not_json": ("this is not json", "not valid JSON"),
    "empty": ("", "not valid JSON"),
    "trailing": ("[] x", "not valid JSON"),
    "scalar_top": ("42", "top level"),
    "null_top": ("null", "top level"),
    "no_events": ('{"otherData": {}}', "traceEvents"),
    "events_number": ('{"traceEvents": 5}', "traceEvents"),
    "events_object": ('{"traceEvents": {}}', "traceEvents"),
    "events_twice": ('{"traceEvents": [], "traceEvents": []}', "twice"),
    "event_number": ("[1]", "event 0"),
    "event_array": ('[{"ph":"X","ts":1,"dur":1}, []]', "event 1"),
    "ts_string": ('[{"ph":"X","ts":"1","dur":1}]', '"ts"'),
    "dur_string": ('[{"ph":"X","ts":1,"dur":"2"}]', '"dur"'),
    "name_number": ('[{"ph":"X","ts":1,"dur":1,"name":5}]', '"name"'),
    "cat_array": ('[{"ph":"X","ts":1,"dur":1,"cat":[]}]', '"cat"'),
    "args_array": ('[{"ph":"X","ts":1,"dur":1,"args":[1]}]', '"args"'),
    "pid_object": ('[{"ph":"X","ts":1,"dur":1,"pid":{}}]', '"pid"'),
    "tid_bool": ('[{"ph":"X","ts":1,"dur":1,"tid":true}]', '"tid"'),
    "ph_number": ('[{"ph":5,"ts":1}]', '"ph"'),
    "no_ph": ('[{"ts":1,"dur":1}]', '"ph"'),
    "no_dur": ('[{"ph":"X","ts":1}]', '"dur"'),
    "no_ts": ('[{"ph":"X","dur":1}]', '"ts"'),
    "negative_dur": ('[{"ph":"X","ts":1,"dur":-1}]', "negative"),
    "begin_no_ts": ('[{"ph":"B","name":"x"}]', '"ts"'),
    "huge_number": ('[{"ph":"X","ts":1e999,"dur":1}]', ""),
    "meta_bad_ts": ('[{"ph":"M","name":"thread_name","ts":"0"}]', '"ts"'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_trace(ouro_bin, env, tmp_path, case):
    text, needle = MALFORMED[case]
    f = write(tmp_path / f"{case}.json", text)
    assert_error(run(ouro_bin, env, "trace", "summarize", f), 1, f, needle)


def test_truncated_and_binary(ouro_bin, env, tmp_path):
    text = json.dumps(ouro_like(1))
    good = write(tmp_path / "good.json", text)
    for frac in (0.1, 0.5, 0.99):
        f = write(tmp_path / f"cut{frac}.json", text[:int(len(text) * frac)])
        assert_error(run(ouro_bin, env, "trace", "summarize", f), 1, f, "not valid JSON")
        # The bad file is named whichever side of a diff it is on, and in overlap.
        assert_error(run(ouro_bin, env, "trace", "diff", good, f), 1, f)
        assert_error(run(ouro_bin, env, "trace", "diff", f, good), 1, f)
        assert_error(run(ouro_bin, env, "trace", "overlap", f, "--a", "*", "--b", "*"), 1, f)
    b = tmp_path / "bin.json"
    b.write_bytes(b'[{"ph":"X","ts":1,"dur":1,"name":"\xff\xfe"}]')
    assert_error(run(ouro_bin, env, "trace", "summarize", b), 1, b)
    assert_error(run(ouro_bin, env, "trace", "summarize", tmp_path / "missing.json"), 1, "missing.json")
    assert_error(run(ouro_bin, env, "trace", "summarize", tmp_path), 1, tmp_path)


def test_usage_errors(ouro_bin, env, tmp_path):
    t = write(tmp_path / "t.json", ouro_like(1))
    cases = [
        ["trace"],
        ["trace", "frobnicate", t],
        ["trace", "summarize"],
        ["trace", "summarize", t, t],
        ["trace", "summarize", t, "--bogus"],
        ["trace", "summarize", t, "--probe"],
        ["trace", "summarize", t, "--top", "-1"],
        ["trace", "summarize", t, "--top", "x"],
        ["trace", "summarize", t, "--json=1"],
        ["trace", "overlap", t, "--a", "x"],
        ["trace", "overlap", t, "--b", "x"],
        ["trace", "overlap", "--a", "x", "--b", "y"],
        ["trace", "overlap", t, "--a", "", "--b", "y"],
        ["trace", "overlap", t, "--a", "x", "--b", "cat:"],
        ["trace", "diff", t],
        ["trace", "diff", t, t, t],
        ["trace", "diff", t, t, "--top", "1.5"],
    ]
    for c in cases:
        assert_error(run(ouro_bin, env, *c), 2)


def test_help(ouro_bin, env):
    for sub in ([], ["summarize"], ["overlap"], ["diff"]):
        p = run(ouro_bin, env, "trace", *sub, "--help")
        assert p.returncode == 0 and p.stdout.startswith("usage: ouro trace"), describe(p)
    p = run(ouro_bin, env, "--help")
    assert "trace" in p.stdout


# ---- fuzz-ish --------------------------------------------------------------------------------

TOKENS = ['{', '}', '[', ']', ',', ':', '"', '1e9', '-', 'null', 'true', '"ph"', '"X"', '"B"', '"E"', '"M"', '\\',
          '"ts"', '"dur"', '0', '-1', '1e400', '"args"', '{"layer":', '\x00', '\u00e9', '"\\ud800"']
VALUES = [None, 1, -5, 1.5, 1e308, -1e308, "x", "", [], {}, True, False, "B", "E", "X", "M", "C", "op",
          {"layer": {}}, {"bytes": "x", "flops": [1]}, {"name": 3}, 2**63, -2**63]
FIELDS = ["ph", "ts", "dur", "name", "cat", "pid", "tid", "args"]


def mutate(text, obj, rng):
    if rng.random() < 0.5:
        s = text
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(s) + 1)
            op = rng.randrange(5)
            if op == 0:
                s = s[:i] + s[i + rng.randint(1, 40):]
            elif op == 1:
                s = s[:i] + rng.choice(TOKENS) + s[i:]
            elif op == 2:
                s = s[:i]
            elif op == 3 and i < len(s):
                s = s[:i] + chr(rng.randrange(32, 127)) + s[i + 1:]
            else:
                j = rng.randrange(len(s) + 1)
                s = s[:i] + s[min(i, j):max(i, j)] + s[i:]
        return s
    o = json.loads(json.dumps(obj))
    evs = o["traceEvents"]
    for _ in range(rng.randint(1, 3)):
        e = rng.choice(evs)
        f = rng.choice(FIELDS + ["args.layer", "args.bytes", "args.flops", "args.name"])
        v = rng.choice(VALUES)
        if f.startswith("args."):
            e.setdefault("args", {})
            if isinstance(e["args"], dict):
                e["args"][f[5:]] = v
        elif v is None and rng.random() < 0.5:
            e.pop(f, None)
        else:
            e[f] = v
    if rng.random() < 0.2:
        o = evs  # bare array
    return json.dumps(o, allow_nan=False)


def test_fuzz_mutations_never_crash(ouro_bin, env, tmp_path):
    base_obj = ouro_like(11, layers=1, steps=1, workers=1)
    base_obj["traceEvents"] += to_begin_end({"traceEvents": [e for e in base_obj["traceEvents"]
                                                              if e.get("ph") == "X"][:6]}, 1, True)["traceEvents"]
    text = json.dumps(base_obj)
    good = write(tmp_path / "good.json", text)
    probe = write(tmp_path / "probe.json", PROBE)
    seen = collections.Counter()
    for i in range(200):
        rng = random.Random(1000 + i)
        f = tmp_path / f"m{i % 4}.json"
        f.write_text(mutate(text, base_obj, rng), errors="surrogatepass")
        cmd = [["trace", "summarize", f, "--json"], ["trace", "summarize", f, "--probe", probe],
               ["trace", "overlap", f, "--a", "*", "--b", "cat:op"], ["trace", "diff", good, f, "--json"]][i % 4]
        p = run(ouro_bin, env, *cmd)
        assert_no_crash(p)
        assert p.returncode in (0, 1), describe(p)
        if p.returncode == 1:
            assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("ouro: ") and str(f) in p.stderr, describe(p)
        elif "--json" in cmd:
            json.loads(p.stdout)
        seen[p.returncode] += 1
    assert seen[0] > 10 and seen[1] > 10, seen


def test_natural_order_of_threads_and_layers(ouro_bin, env, tmp_path):
    ev = [X("a", "k", tid, i * 10, 5) for i, tid in enumerate([10, "abc", 2, "007", -1, "-20", 10**19])]
    ev += [X("o", "op", 0, 100 + i * 10, 5, layer=lay) for i, lay in enumerate([10, 2, "x", 1])]
    got = ok_json(ouro_bin, env, "trace", "summarize", write(tmp_path / "n.json", ev))
    assert [t["tid"] for t in got["threads"]] == ["-20", "-1", "0", "2", "007", "10", "10000000000000000000", "abc"]
    assert [l["layer"] for l in got["layers"]] == ["1", "2", "10", "x"]
