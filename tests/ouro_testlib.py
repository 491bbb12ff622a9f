"""Where the ouro binary and the default model are, and how tests run the binary. Imported by
tests/conftest.py (the fixtures) and by test modules (`from ouro_testlib import run_ouro`)."""
import functools
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURO_BIN = pathlib.Path(os.environ.get("OURO_BIN", ROOT / "build" / "ouro"))
MODEL = pathlib.Path(os.environ.get("OURO_TEST_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def ouro_bin_path():
    if not OURO_BIN.exists():
        pytest.fail(f"ouro binary not found at {OURO_BIN}; build first (make build)")
    return OURO_BIN


def model_file():
    if not MODEL.exists():
        pytest.fail(f"model not found at {MODEL}; run scripts/fetch_model.sh")
    return MODEL


@functools.cache
def _machine_ccache_dir():
    """ccache's cache directory as this environment has it, read before a test moves XDG_CACHE_HOME
    (ccache keeps its cache under XDG_CACHE_HOME when that is set)."""
    try:
        p = subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (p.stdout.strip() or None) if p.returncode == 0 else None


def isolated_cache_env(cache_home):
    """os.environ with XDG_CACHE_HOME moved to `cache_home` (the lab's run folders, worktrees, probe
    cache and jobs start empty) but the compiler cache kept: a lab build of a revision in a test is
    then as fast as on the machine, not a cold compile of every file (108 s of a CI run)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    if "CCACHE_DIR" not in os.environ and _machine_ccache_dir():
        env["CCACHE_DIR"] = _machine_ccache_dir()
    return env


def run_ouro(ouro_bin, *args, check=True, input=None, timeout=300):
    """Runs the ouro binary with args; returns CompletedProcess (text mode)."""
    proc = subprocess.run([str(ouro_bin), *map(str, args)], capture_output=True, text=True,
                          input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"ouro {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
    return proc


_ISA_ORDER = ("scalar", "avx2", "avx512")
_ISA_FLAGS = {"scalar": (), "avx2": ("avx2", "fma", "f16c"),
              "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")}


def engine_allows(isa):
    """Whether ouro may run kernel family `isa` in this environment: the CPU has it (as src/core/cpu.cpp
    decides) and the launch setting OURO_ISA, which CI uses to run the suite as an AVX2-only or
    scalar host would, does not cap it below."""
    cap = os.environ.get("OURO_ISA", "auto") or "auto"
    if cap != "auto" and _ISA_ORDER.index(isa) > _ISA_ORDER.index(cap):
        return False
    flags = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return all(f in flags for f in _ISA_FLAGS[isa])


def write_first_layers(src, dst, n_layer):
    """Writes `src` (a GGUF) to `dst` with only its first n_layer blocks: the same tokenizer, the
    same embedding and output weights, the same tensor types, block_count set to n_layer. The lab's
    adversarial set runs on SmolLM2's first 8 layers (docs/testing.md): each of its pairs then costs
    about a third of the whole model's, and every fault it plants (a proportional delay, repeated or
    truncated attention, a skipped last layer, replayed answers) acts on it all the same."""
    import gguf
    from gguf import GGUFValueType as VT
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        value = n_layer if f.name == f"{arch}.block_count" else f.contents()
        if f.types[0] == VT.ARRAY:
            w.add_key_value(f.name, value, VT.ARRAY, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, value, f.types[0])
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_layer:
            continue
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
