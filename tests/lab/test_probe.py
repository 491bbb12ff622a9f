"""`ouro probe`: the machine-ceiling probe and its cache.

Memory bandwidth on a shared machine swings by a third within minutes, so these tests check that
figures are sane, not that runs agree. Every run uses its own XDG_CACHE_HOME (never ~/.cache) and
at most 2 threads; the whole file takes a few probe runs of 1-2 s each.

Decision (documented in `ouro probe --help` and docs/cli.md): an unreadable or invalid cache file
is not an error. The probe says so in one "ouro: " line on stderr naming the file and what is
wrong, measures again, replaces the file, and exits 0: the cache is derived data, and measuring
takes seconds.
"""
import json
import re
import subprocess
import time

import pytest

from ouro_testlib import isolated_cache_env

THREADS = "2"


def probe(ouro_bin, cache, *args, timeout=120):
    env = isolated_cache_env(cache)
    t0 = time.monotonic()
    proc = subprocess.run([str(ouro_bin), "probe", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)
    proc.elapsed = time.monotonic() - t0
    return proc


def describe(proc):
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def cache_files(cache):
    return sorted((cache / "ouro").glob("probe-*.json"))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="module")
def measured(ouro_bin, cache_dir):
    """One fresh measurement with 2 threads: (process, parsed JSON)."""
    proc = probe(ouro_bin, cache_dir, "--json", "--refresh", "--threads", THREADS)
    assert proc.returncode == 0, describe(proc)
    return proc, json.loads(proc.stdout)


def test_refresh_gives_sane_figures(measured):
    proc, r = measured
    assert r["max_threads"] == 2
    assert r["version"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["measured_at"])
    assert r["buffer_mib"] >= 200  # well beyond the caches of the machines we run on
    for key in ("read_gb_s", "triad_gb_s"):
        assert set(r[key]) == {"1", "2"}, key
        for t, v in r[key].items():
            assert 1 <= v <= 1000, f"{key}[{t}] = {v} GB/s"
    for t, v in r["fp32_gflops"].items():
        assert 1 <= v <= 100000, f"fp32_gflops[{t}] = {v}"
    for t, v in r["int8_gops"].items():
        assert 1 <= v <= 1000000, f"int8_gops[{t}] = {v}"
    features = r["cpu_features"].split()
    if "avx512vnni" in features:
        # vpdpbusd does 4x the lane-ops of an FP32 FMA per instruction: INT8 is at least FP32 even
        # when another process takes a share of the measurement.
        assert max(r["int8_gops"].values()) >= max(r["fp32_gflops"].values()), r
    if "avx512bf16" in features:
        assert set(r["bf16_gflops"]) == {"1", "2"}
        assert r["bf16_kernel"]
    else:
        assert r["bf16_gflops"] == {} and r["bf16_kernel"] == ""
    assert proc.elapsed < 20, f"a probe took {proc.elapsed:.1f} s"


def test_json_round_trips_through_the_cache(ouro_bin, cache_dir, measured):
    first, _ = measured
    files = cache_files(cache_dir)
    assert len(files) == 1, files
    assert re.fullmatch(r"probe-[A-Za-z0-9._-]+\.json", files[0].name), files[0].name
    assert files[0].read_text().strip() == first.stdout.strip()
    again = probe(ouro_bin, cache_dir, "--json", "--threads", THREADS)
    assert again.returncode == 0, describe(again)
    assert again.stdout == first.stdout  # byte for byte: the cached result, not a new measurement
    assert again.stderr == ""
    assert again.elapsed < 1.5, f"a cached probe took {again.elapsed:.2f} s"


def test_plain_output_is_a_table(ouro_bin, cache_dir, measured):
    proc = probe(ouro_bin, cache_dir, "--threads", THREADS)
    assert proc.returncode == 0, describe(proc)
    out = proc.stdout
    assert "threads" in out and "read GB/s" in out and "triad GB/s" in out and "fp32 GFLOP/s" in out
    assert "cached: " + str(cache_files(cache_dir)[0]) in out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s+\d", line)]
    assert [row[0] for row in rows] == ["1", "2"], out


@pytest.mark.parametrize("content", [
    b"\x00\xffnot json at all",
    b'{"version": 1, "cpu_model": "x"',
    "valid-json-bad-field",
])
def test_corrupt_cache_is_reported_and_measured_again(ouro_bin, cache_dir, measured, tmp_path, content):
    _, good = measured
    (tmp_path / "ouro").mkdir()
    # The file name depends only on the CPU model: the same as in the measured run's cache.
    path = tmp_path / "ouro" / cache_files(cache_dir)[0].name
    if content == "valid-json-bad-field":
        bad = dict(good, read_gb_s={"1": "fast"})
        path.write_text(json.dumps(bad))
        reason = "read_gb_s"
    else:
        path.write_bytes(content)
        reason = "malformed JSON"
    proc = probe(ouro_bin, tmp_path, "--json", "--threads", "1")
    assert proc.returncode == 0, describe(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, describe(proc)
    assert lines[0].startswith("ouro: ignoring the probe cache: " + str(path)), describe(proc)
    assert reason in lines[0] and "measuring again" in lines[0], describe(proc)
    r = json.loads(proc.stdout)
    assert r["max_threads"] == 1 and set(r["read_gb_s"]) == {"1"}
    assert path.read_text().strip() == proc.stdout.strip()  # replaced by the new measurement


def test_unwritable_cache_still_prints_the_result(ouro_bin, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    proc = probe(ouro_bin, not_a_dir, "--json", "--threads", "1")
    assert proc.returncode == 0, describe(proc)
    assert json.loads(proc.stdout)["max_threads"] == 1
    assert proc.stderr.startswith("ouro: warning: the result was not cached: "), describe(proc)


@pytest.mark.parametrize("args", [
    ["--threads", "0"], ["--threads", "x"], ["--threads", "2000"], ["--threads"], ["-t", "-1"],
    ["--bogus"], ["extra"], ["--json=1"], ["--refresh=yes"],
])
def test_bad_flags_exit_2(ouro_bin, tmp_path, args):
    proc = probe(ouro_bin, tmp_path, *args, timeout=30)
    assert proc.returncode == 2, describe(proc)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ouro: "), describe(proc)
    assert not (tmp_path / "ouro").exists()  # nothing measured or cached


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(ouro_bin, tmp_path, flag):
    proc = probe(ouro_bin, tmp_path, flag, "--bogus", timeout=30)
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.startswith("usage: ouro probe"), describe(proc)
    assert proc.stderr == ""
