"""The house's rules (docs/design.md, "The model interface"): the rest of the code sees a model
through src/model/model.h only, the lab does not include the agent's seat, long files say why, and
an architecture the registry does not know is one clear error naming it and the known ones."""
import pathlib
import re

from ouro_testlib import run_ouro

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
# The interface and what it is made of; every other header in src/model/ is an architecture's.
MODEL_PUBLIC = {"model.h", "memory.h", "gguf.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".cpp", ".h", ".inc"))


def includes(path):
    return INCLUDE.findall(path.read_text(errors="replace"))


def test_only_src_model_includes_an_architecture():
    arch_headers = {f"model/{p.name}" for p in (SRC / "model").glob("*.h") if p.name not in MODEL_PUBLIC}
    assert "model/llama.h" in arch_headers
    bad = [f"{p.relative_to(ROOT)} includes {h}" for p in sources() if p.parent.name != "model"
           for h in includes(p) if h in arch_headers]
    assert not bad, bad


def test_the_lab_does_not_include_the_agent():
    assert (SRC / "agent" / "agent.h").is_file() and (SRC / "agent" / "mcp.h").is_file()
    assert not list((SRC / "lab").glob("agent*")) and not list((SRC / "lab").glob("mcp*"))
    bad = [f"{p.relative_to(ROOT)} includes {h}" for p in (SRC / "lab").rglob("*")
           if p.is_file() for h in includes(p) if h.startswith("agent/")]
    assert not bad, bad


def test_long_files_say_why():
    long = []
    for p in sources():
        lines = p.read_text(errors="replace").splitlines()
        if len(lines) > 650 and p.suffix != ".inc" and "over 600 lines" not in "\n".join(lines[:12]):
            long.append(f"{p.relative_to(ROOT)}: {len(lines)} lines")
    assert not long, long


def test_unknown_architecture_names_the_known_ones(ouro_bin, tmp_path):
    import gguf
    path = tmp_path / "other.gguf"
    w = gguf.GGUFWriter(str(path), "mamba2")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run_ouro(ouro_bin, "generate", "-p", "hi", "-n", 1, "--model", path, check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == f"ouro: {path}: unsupported architecture 'mamba2' (supported: llama, kimi-linear)"


def test_memory_reported_for_each_kind(ouro_bin, model_path):
    """Attention bytes per position and recurrent bytes per sequence, from the model's own shape
    (read here with gguf-py): SmolLM2 has K and V rows of n_head_kv * head_dim in every layer and no
    recurrent state."""
    import json

    import gguf
    r = gguf.GGUFReader(str(model_path))
    f = {k: v.contents() for k, v in r.fields.items() if k.startswith("llama.")}
    n_layer, n_kv = f["llama.block_count"], f["llama.attention.head_count_kv"]
    head_dim = f["llama.embedding_length"] // f["llama.attention.head_count"]
    for kv, row in (("f32", 4 * n_kv * head_dim), ("int8", n_kv * head_dim + 4 * n_kv)):
        out = run_ouro(ouro_bin, "bench", "--prompt-len", 4, "--gen-len", 2, "--repeats", 1, "--warmup", 0,
                       "--kv", kv, "--json", "--model", model_path).stdout
        j = json.loads(out)
        assert j["kv_bytes_per_token"] == 2 * n_layer * row, (kv, j["kv_bytes_per_token"])
        assert j["state_bytes"] == 0
