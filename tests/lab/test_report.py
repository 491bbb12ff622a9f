"""`ouro lab verify|log|show|report` on a ledger built here, independently of the C++ code.

The ledger is written by this file: the hash chain is derived with Python's hashlib and
json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False), which for the strings and
simple numbers used here is byte for byte nlohmann's dump(). So `ouro lab verify` accepting it is a
cross-check of the C++ SHA-256 and of the chain rule in src/lab/ledger.h.

The report is opened in headless Chromium. Chromium prints every console message (console.log,
console.error, uncaught exceptions, CSP refusals alike) to stderr as one line containing
":CONSOLE", with no severity of its own, so the check is: the page produces no console line at all.
test_console_check_can_fail proves the check fires on a page that does log.
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from ouro_testlib import run_ouro

GENESIS = "0" * 64
QUESTION_2 = "Does fusing SwiGLU <script>alert(1)</script> help — é?"


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain(records):
    """Lines of a valid ledger: seq, id, prev and hash as src/lab/ledger.h specifies."""
    lines, prev = [], GENESIS
    for seq, rec in enumerate(records, 1):
        rec = dict(rec, seq=seq, id=f"E{seq:04d}", prev=prev)
        rec["hash"] = hashlib.sha256(canon(rec).encode()).hexdigest()
        lines.append(canon(rec))
        prev = rec["hash"]
    return lines


def record(n, verdict, question, base, cand, metric="decode_tok_s"):
    ratio = round(sorted(cand)[len(cand) // 2] / sorted(base)[len(base) // 2], 3)
    return {
        "kind": "run",
        "time": f"2026-12-0{n}T10:00:00Z",
        "spec_path": f"experiments/specs/e{n}.toml",
        "spec": {"question": question, "hypothesis": f"hypothesis {n}", "level": "engine", "repeats": len(base)},
        "command": f"ouro lab run experiments/specs/e{n}.toml",
        "revisions": {"baseline": {"revision": "HEAD", "commit": "a" * 40, "dirty": False, "build": [], "args": []},
                      "candidate": {"revision": "worktree", "commit": "a" * 40, "dirty": True, "build": ["-DX=1"],
                                    "args": ["-t", "2"]}},
        "samples": {"baseline": {metric: base, "prefill_tok_s": [500.0, 510.5, 505.25]},
                    "candidate": {metric: cand, "prefill_tok_s": [520.0, 515.5, 525.0]}},
        "stats": {metric: {"baseline_median": sorted(base)[len(base) // 2],
                           "candidate_median": sorted(cand)[len(cand) // 2], "ratio": ratio,
                           "ci": [round(ratio - 0.05, 3), round(ratio + 0.05, 3)], "p_value": 0.004,
                           "change": "higher", "higher_is_better": True}},
        "headline": metric,
        "correctness": {"top1_agreement": 1.0, "max_abs_logit_diff": 0.0, "greedy_match": 1.0},
        "criteria": [{"expr": f"candidate.{metric} >= 0.95 * baseline.{metric}", "verdict": "pass",
                      "detail": "ratio within bounds", "source": "inline"}],
        "attribution": [{"name": "swiglu", "baseline_ms": 1.0, "candidate_ms": 2.0, "delta_ms": 1.0,
                         "delta_pct": 100.0}],
        "verdict": verdict,
        "reasons": [f"reason for {verdict}"],
        "note": f"note {n}",
    }


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "experiments" / "ledger.jsonl"
    path.parent.mkdir()
    recs = [record(1, "accept", "Is decode faster with 2 threads?", [100.0, 101.5, 99.5], [110.0, 111.0, 109.5]),
            record(2, "reject", QUESTION_2, [100.0, 102.0, 98.0], [90.5, 91.0, 92.0]),
            record(3, "inconclusive", "Does prefetching help?", [100.0, 101.0, 99.0], [100.5, 99.5, 101.5])]
    path.write_text("".join(line + "\n" for line in chain(recs)), encoding="utf-8")
    return path


def ouro(ouro_bin, *args, check=True):
    return run_ouro(ouro_bin, "lab", *args, check=check, timeout=60)


def test_verify_accepts_python_chain(ouro_bin, ledger):
    out = ouro(ouro_bin, "verify", "--ledger", ledger).stdout
    assert out.strip() == "ledger OK: 3 records"
    j = json.loads(ouro(ouro_bin, "verify", "--ledger", ledger, "--json").stdout)
    assert j["ok"] is True and j["records"] == 3 and j["problems"] == []


def test_log(ouro_bin, ledger):
    lines = ouro(ouro_bin, "log", "--ledger", ledger).stdout.splitlines()
    assert len(lines) == 4, lines  # header + 3
    assert [l.split()[0] for l in lines[1:]] == ["E0003", "E0002", "E0001"]  # newest first
    assert "2026-12-01" in lines[3] and "accept" in lines[3] and "decode_tok_s x1.100 [1.050, 1.150]" in lines[3]
    rej = ouro(ouro_bin, "log", "--ledger", ledger, "--verdict", "reject").stdout.splitlines()
    assert [l.split()[0] for l in rej[1:]] == ["E0002"]
    assert [r["id"] for r in json.loads(ouro(ouro_bin, "log", "--ledger", ledger, "--json").stdout)] == \
        ["E0003", "E0002", "E0001"]
    assert len(ouro(ouro_bin, "log", "--ledger", ledger, "-n", "1").stdout.splitlines()) == 2
    grep = ouro(ouro_bin, "log", "--ledger", ledger, "--grep", "PREFETCHING").stdout.splitlines()
    assert [l.split()[0] for l in grep[1:]] == ["E0003"]
    assert "no record matches" in ouro(ouro_bin, "log", "--ledger", ledger, "--metric", "ns_per_op").stdout
    bad = ouro(ouro_bin, "log", "--ledger", ledger, "--verdict", "maybe", check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("ouro: ") and "--verdict" in bad.stderr
    assert ouro(ouro_bin, "log", "--ledger", ledger, "--bogus", check=False).returncode == 2
    assert "no experiments recorded yet" in ouro(ouro_bin, "log", "--ledger", ledger.parent / "none.jsonl").stdout


def test_show(ouro_bin, ledger):
    out = ouro(ouro_bin, "show", "E0002", "--ledger", ledger).stdout
    for want in (QUESTION_2, "hypothesis 2", "decode_tok_s *", "reject", "reason for reject", "swiglu",
                 "candidate.decode_tok_s >= 0.95 * baseline.decode_tok_s", "note 2", "(dirty)", "top1_agreement"):
        assert want in out, want
    second_hash = json.loads(ledger.read_text(encoding="utf-8").splitlines()[1])["hash"]
    for ref in ("2", "e0002", second_hash[:8]):
        assert json.loads(ouro(ouro_bin, "show", ref, "--ledger", ledger, "--json").stdout)["id"] == "E0002"
    missing = ouro(ouro_bin, "show", "E0099", "--ledger", ledger, check=False)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "E0099" in missing.stderr
    assert ouro(ouro_bin, "show", "--ledger", ledger, check=False).returncode == 2
    nofile = ouro(ouro_bin, "show", "E0001", "--ledger", ledger.parent / "none.jsonl", check=False)
    assert nofile.returncode == 1 and "no ledger" in nofile.stderr


def test_verify_names_the_edited_line(ouro_bin, ledger):
    lines = ledger.read_text(encoding="utf-8").splitlines()
    assert '"candidate_median":91.0' in lines[1]
    lines[1] = lines[1].replace('"candidate_median":91.0', '"candidate_median":92.0')  # one character
    ledger.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    proc = ouro(ouro_bin, "verify", "--ledger", ledger, check=False)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [f"{ledger}: line 2 (E0002): content edited: hash mismatch"]
    assert "fails verification" in proc.stderr
    # Readers still work, with a warning.
    log = ouro(ouro_bin, "log", "--ledger", ledger)
    assert "warning" in log.stderr and len(log.stdout.splitlines()) == 4


# ---- the HTML report in headless Chromium -------------------------------------------------------

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def chromium_dump(tmp_path, url):
    """(dumped DOM, console lines) of `url` in headless Chromium with a throwaway profile."""
    if not CHROMIUM:
        pytest.skip("chromium is not installed (Debian package 'chromium')")
    home = tmp_path / "chromium-home"
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"))
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           f"--user-data-dir={home / 'profile'}", "--dump-dom", url],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [l for l in proc.stderr.splitlines() if ":CONSOLE" in l]


class Dom(HTMLParser):
    """Start tags of the dumped DOM, and which of them sit inside table#verdicts."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.in_verdicts, self.shown = [], False, None
        self._shown_open = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id") == "verdicts":
            self.in_verdicts = True
        self.tags.append((tag, a, self.in_verdicts))
        self._shown_open = a.get("id") == "shown"

    def handle_endtag(self, tag):
        if tag == "table":
            self.in_verdicts = False
        self._shown_open = False

    def handle_data(self, data):
        if self._shown_open:
            self.shown = data

    def rows(self):
        return [a for t, a, inside in self.tags if t == "tr" and "exp" in a.get("class", "").split() and inside]


def test_console_check_can_fail(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('deliberate'); undefinedFn();</script>")
    _, console = chromium_dump(tmp_path, page.as_uri())
    assert any("deliberate" in l for l in console), console
    assert any("Uncaught ReferenceError" in l for l in console), console


def test_report_in_chromium(ouro_bin, ledger, tmp_path):
    out = tmp_path / "tmp" / "report.html"
    proc = ouro(ouro_bin, "report", "--ledger", ledger, "-o", out, "--title", "Lab <test>")
    assert str(out) in proc.stdout and out.exists()
    html = out.read_text(encoding="utf-8")
    assert not re.search(r"(?:src|href)=\"(?!#)", html), "the page must not reference any external resource"
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html

    dom_text, console = chromium_dump(tmp_path, out.as_uri())
    assert console == [], console
    dom = Dom(dom_text)
    rows = dom.rows()
    assert [r["data-verdict"] for r in rows] == ["inconclusive", "reject", "accept"]
    charts = [a for t, a, _ in dom.tags if t == "svg" and "chart" in a.get("class", "").split()]
    assert len(charts) == 6  # decode_tok_s and prefill_tok_s for each of 3 records
    assert any(t == "div" and a.get("id") == "trends" for t, a, _ in dom.tags)
    assert dom.shown == "3 shown", "the inline script did not run (CSP hash wrong?)"

    # The verdict filter, driven by the URL fragment.
    dom_text, console = chromium_dump(tmp_path, out.as_uri() + "#verdict=reject")
    assert console == [], console
    dom = Dom(dom_text)
    hidden = [r["data-verdict"] for r in dom.rows() if "display: none" in r.get("style", "")]
    assert sorted(hidden) == ["accept", "inconclusive"] and dom.shown == "1 shown"


def test_injected_script_is_refused(ouro_bin, ledger, tmp_path):
    """Even a script that slipped past escaping would not run: the CSP allows only the page's own."""
    out = tmp_path / "report.html"
    ouro(ouro_bin, "report", "--ledger", ledger, "-o", out)
    page = out.read_text(encoding="utf-8").replace("</h1>", "</h1><script>document.title='pwned'</script>", 1)
    out.write_text(page, encoding="utf-8")
    dom_text, console = chromium_dump(tmp_path, out.as_uri())
    assert "pwned" not in dom_text.split("</title>", 1)[0]
    assert any("Content Security Policy" in l for l in console), console


def measured(n, cand, workload, metric="decode_tok_s", isa="avx512", ci_level=0.99):
    """An accepted record of `metric` measured on `workload` (the fields the report groups by)."""
    rec = record(n, "accept", f"Experiment {n}?", [c / 1.1 for c in cand], cand, metric=metric)
    rec["spec"]["workload"] = workload
    rec["machine"] = {"isa": isa}
    if ci_level is not None:
        rec["stats"][metric]["ci_level"] = ci_level
    return rec


def test_report_trends_join_only_comparable_figures(ouro_bin, tmp_path):
    """Two specs at different depths give two separate trends (the issue's 221 -> 10 tok/s 'collapse'
    was decode at a few hundred tokens joined with decode at 8k); a kernel measured once is a single
    point with its ratio; no axis goes below zero; the headline names the interval the verdict used."""
    shallow = {"prompt_len": 128, "gen_len": 128, "threads": 2, "model": "/m/SmolLM2.gguf"}
    deep = dict(shallow, prompt_len=1, depth=8000)
    kernel = {"kernel": "matmul", "kernel_args": ["--rows", "1536"], "threads": 2}
    recs = [measured(1, [220.0, 221.0, 222.0], shallow), measured(2, [10.0, 10.1, 10.2], deep),
            measured(3, [230.0, 231.0, 229.0], shallow), measured(4, [10.5, 10.4, 10.6], deep),
            measured(5, [52000.0, 51000.0, 53000.0], kernel, metric="ns_per_op"),
            measured(6, [240.0, 241.0, 239.0], shallow, ci_level=None)]
    path = tmp_path / "experiments" / "ledger.jsonl"
    path.parent.mkdir()
    path.write_text("".join(line + "\n" for line in chain(recs)), encoding="utf-8")
    out = tmp_path / "report.html"
    ouro(ouro_bin, "report", "--ledger", path, "-o", out)
    dom_text, console = chromium_dump(tmp_path, out.as_uri())
    assert console == [], console
    dom = Dom(dom_text)
    trends = [a for t, a, _ in dom.tags if t == "svg" and "trend" in a.get("class", "").split()]
    keys = sorted(a["data-key"] for a in trends)
    # decode at depth 0 (E0001, E0003, E0006) and decode at depth 8000 (E0002, E0004); the kernel is no line
    assert len(keys) == 2 and any("depth 8000," in k for k in keys) and any("depth 0," in k for k in keys), keys
    assert all(k.startswith("decode_tok_s (tok/s)") and "2 threads" in k and "ISA avx512" in k for k in keys), keys
    assert all(float(a["data-ymin"]) == 0.0 for a in trends), [a["data-ymin"] for a in trends]
    html = out.read_text(encoding="utf-8")
    for svg in re.findall(r'<svg class="trend".*?</svg>', html, re.S):
        ids = re.findall(r"<title>(E\d{4}):", svg)
        assert ids in (["E0001", "E0003", "E0006"], ["E0002", "E0004"]), ids
    # The kernel figure: one row of the single-points table, with its ratio, on no line.
    single = re.search(r'<table class="small" id="single-points">.*?</table>', html, re.S).group(0)
    assert "E0005" in single and "ns_per_op (ns)" in single and "matmul --rows 1536" in single and "&times;" in single
    assert "E0001" not in single
    # The headline column names the interval each verdict used.
    assert "the interval the verdict used" in html
    assert "99% trimmed-mean t" in html and "95% bootstrap" in html  # E0006 predates ci_level
