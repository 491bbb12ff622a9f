"""Quantization flags: bad values get one clear `ouro: ` line naming the flag and exit 2 (never a
crash); W8A8 without AVX-512 VNNI falls back and says so once; quantized KV works through the
server's paged cache with the same greedy output as `ouro generate` with the same flags."""
import subprocess
import sys

import pytest

from ouro_testlib import ROOT, engine_allows

sys.path.insert(0, str(ROOT / "tests" / "serve"))
import servelib  # noqa: E402

CRASH_MARKERS = ("Segmentation", "terminate called", "Aborted", "core dumped", "std::")

BAD = [
    (["--kv", "fp16"], ["--kv", "fp16", "f32, bf16, fp8, int8"]),
    (["--kv", "k=bf16,k=fp8"], ["--kv", "twice"]),
    (["--kv", "q=int8"], ["--kv", "q=int8"]),
    (["--kv", ""], ["--kv", "needs a value"]),
    (["--kv-layers", "0-3:bf16,3-5:fp8"], ["--kv-layers", "overlaps", "layer 3"]),
    (["--kv-layers", "0-40:fp8"], ["--kv-layers", "0-40", "30 layers"]),
    (["--kv-layers", "5-2:fp8"], ["--kv-layers", "5-2"]),
    (["--kv-layers", "a-b:fp8"], ["--kv-layers", "a-b"]),
    (["--kv-layers", "0-3"], ["--kv-layers", "RANGE:TYPE"]),
    (["--kv-layers", "0-3:fp4"], ["--kv-layers", "fp4"]),
    (["--weights", "w4a16"], ["--weights", "w4a16", "native, w8a8"]),
    (["--weights", "w8a8", "--w8a8-ops", "qkv,lm"], ["--w8a8-ops", "'lm'"]),
    (["--weights", "w8a8", "--w8a8-ops", "qkv,qkv"], ["--w8a8-ops", "twice"]),
    (["--weights", "w8a8", "--w8a8-layers", "0-99"], ["--w8a8-layers", "0-99"]),
    (["--w8a8-ops", "qkv"], ["--w8a8-ops", "--weights w8a8"]),
    (["--w8a8-smooth", "0.5"], ["--w8a8-smooth", "--weights w8a8"]),
    (["--weights", "w8a8", "--w8a8-smooth", "1.5"], ["--w8a8-smooth"]),
    (["--weights", "w8a8", "--w8a8-smooth", "0.5", "--w8a8-calib", "/nonexistent/c.txt"],
     ["--w8a8-calib", "/nonexistent/c.txt"]),
    (["--weights", "w8a8", "--w8a8-calib", "x.txt"], ["--w8a8-calib", "--w8a8-smooth"]),
]


@pytest.mark.parametrize("flags,words", BAD, ids=[" ".join(b[0]) or "empty" for b in BAD])
@pytest.mark.parametrize("cmd", [["generate", "-p", "hi", "-n", "2", "--temp", "0"], ["quality", "--chunks", "1"],
                                 ["bench", "--prompt-len", "4", "--gen-len", "2", "--repeats", "1"]],
                         ids=["generate", "quality", "bench"])
def test_bad_quantization_flag(ouro_bin, model_path, cmd, flags, words):
    p = subprocess.run([str(ouro_bin), *cmd, "-m", str(model_path), "-t", "1", *flags], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ouro: "), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not any(m in p.stderr for m in CRASH_MARKERS)


def test_w8a8_without_vnni_falls_back_and_says_so_once(ouro_bin, model_path):
    common = ["-m", str(model_path), "-t", "1", "-p", "The capital of France is", "-n", "8", "--temp", "0",
              "--weights", "w8a8", "--json"]
    avx2 = subprocess.run([str(ouro_bin), "generate", "--isa", "avx2", *common], capture_output=True, text=True,
                          timeout=120)
    assert avx2.returncode == 0, avx2.stderr
    notes = [l for l in avx2.stderr.splitlines() if "W8A8" in l]
    assert len(notes) == 1 and "avx2" in notes[0], avx2.stderr
    # The fallback computes the same integer products: same greedy tokens as the VNNI kernel, or
    # (on a CPU without AVX-512) as the scalar reference kernel.
    other = "avx512" if engine_allows("avx512") else "scalar"
    ref = subprocess.run([str(ouro_bin), "generate", "--isa", other, *common], capture_output=True, text=True,
                         timeout=300)
    assert ref.returncode == 0, ref.stderr
    import json
    assert json.loads(avx2.stdout)["tokens"] == json.loads(ref.stdout)["tokens"]


@pytest.mark.parametrize("flags", [["--kv", "int8"], ["--kv", "k=bf16,v=fp8", "--kv-layers", "0-1:f32"],
                                   ["--weights", "w8a8", "--kv", "fp8"]], ids=["int8", "mixed", "w8a8-fp8"])
def test_quantized_kv_through_the_server(ouro_bin, model_path, flags):
    import json
    prompt = "Write one sentence about the sea."
    gen = subprocess.run([str(ouro_bin), "generate", "-m", str(model_path), "-t", "2", "-p", prompt, "-n", "24",
                          "--temp", "0", "--json", *flags], capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    want = json.loads(gen.stdout)["text"]
    srv = servelib.Server(ouro_bin, model_path, "--kv-blocks", "64", *flags)
    try:
        c = srv.client()
        r = c.completions.create(model=servelib.MODEL_ID, prompt=prompt, max_tokens=24, temperature=0)
        assert r.choices[0].text == want
        # Several at once through the paged cache: each equals its output alone.
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda _: c.completions.create(model=servelib.MODEL_ID, prompt=prompt, max_tokens=24,
                                                               temperature=0).choices[0].text, range(4)))
        assert outs == [want] * 4
    finally:
        srv.stop()
