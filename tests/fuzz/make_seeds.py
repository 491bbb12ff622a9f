"""Writes seed inputs for fuzz_gguf into a directory: tiny synthetic llama GGUFs (F32 and
quantized weights, two alignments) written by tests/cli/synth.py, and a micro `kimi-linear` file
(per-layer head_count_kv array, 3-D expert tensors) from scripts/make_hybrid_model.py."""
import dataclasses
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cli"))
sys.path.insert(0, str(ROOT / "scripts"))
from synth import QT, tiny_llama_plan, write_tiny_llama  # noqa: E402
import make_hybrid_model as hybrid  # noqa: E402


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # Small shapes keep each seed a few KB, so the fuzzer mutates metadata and infos, not data.
    small = dict(n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=32)
    write_tiny_llama(out / "seed_f32.gguf", **small)
    plan = tiny_llama_plan(**small)
    plan.quantize(QT.Q8_0)
    plan.write(out / "seed_q8.gguf")
    plan = tiny_llama_plan(**small)
    plan.alignment = 64
    plan.write(out / "seed_align64.gguf")
    micro = dataclasses.replace(hybrid.SHAPES["tiny"], name="hybrid-micro", n_embd=32, n_layer=4, n_head=1,
                                head_dim=32, kv_lora_rank=32, qk_nope=16, qk_rope=16, v_head=16, n_ff=32,
                                n_ff_exp=32, n_expert=4, n_expert_used=2)
    hybrid.write_model(micro, "Q8_0", 1, None, out / "seed_hybrid_q8.gguf", vocab=64)


if __name__ == "__main__":
    main(sys.argv[1])
