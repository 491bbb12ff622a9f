"""Writes seed inputs for fuzz_gguf into a directory: tiny synthetic llama GGUFs (F32 and
quantized weights, two alignments) written by tests/cli/synth.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cli"))
from synth import QT, tiny_llama_plan, write_tiny_llama  # noqa: E402


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


if __name__ == "__main__":
    main(sys.argv[1])
