"""Oracle tests for `ouro tokenize` / `ouro detokenize` (docs/cli.md).

The oracle is a Hugging Face `tokenizers` Tokenizer built here from the GGUF's own vocabulary, merges
and token types (no network, no tokenizer.json). `transformers.AutoTokenizer.from_pretrained(...,
gguf_file=...)` is not used: it imports torch to read the GGUF, and even with torch its GGUF converter
has no entry for the "smollm" pre-tokenizer, so it would fall back to plain GPT-2 splitting and miss
SmolLM2's one-digit-per-pre-token rule.

What the oracle reproduces (the pipeline of SmolLM2's own tokenizer.json, which llama.cpp's "smollm"
pre-type mirrors with the regexes `\\p{N}` then the GPT-2 pattern):
  * added tokens: every token whose tokenizer.ggml.token_type is CONTROL (3) is a special token and
    USER_DEFINED (4) an added plain token; both are matched whole in the text before anything else
    (special-token text is parsed into special ids, as `ouro tokenize` does without --no-special);
  * pre-tokenizer: Sequence[Digits(individual_digits=True),
    ByteLevel(add_prefix_space=False, use_regex=True)] -- each \\p{N} code point stands alone, then
    `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+` on the rest
    (contractions are case-sensitive: "'S" is not one);
  * model: byte-level BPE with the GGUF merges in rank order, no unk token, no byte fallback;
  * no BOS (tokenizer.ggml.add_bos_token is false; if a model sets it, BOS is prepended).

Decisions this file makes where docs/cli.md is silent (change them here if the contract changes):
  * Decoding special ids gives their text: `ouro detokenize` of the ids of "<|im_start|>user" prints
    "<|im_start|>user", so text with special tokens round-trips too (tested separately from plain text).
  * `ouro detokenize` may end its output with one extra "\\n"; anything else must match byte for byte.
  * SmolLM2's vocabulary lacks 21 of the 256 byte symbols (0x04 0x06 0x13 0x14 0x16 0x1d 0xc0 0xc1
    0xf1 0xf2 0xf5..0xff): no token sequence can spell them. Both HF tokenizers and llama.cpp silently
    drop such bytes, and so must ouro: "a\\x04b" tokenizes as "a" "b". For invalid UTF-8 input the
    round trip is therefore "decoded bytes == input bytes minus the unrepresentable bytes" (for most
    invalid inputs here that is the whole input).
  * Invalid UTF-8 is tokenized as raw bytes (round trip above). llama.cpp instead replaces every
    invalid byte by U+FFFD before tokenizing, so the llama.cpp peer is only compared on the inputs
    where its own output round-trips.
"""
import codecs
import functools
import importlib.util
import json
import os
import random
import subprocess
import sys
import textwrap
import unicodedata
import warnings

import pytest

from ouro_testlib import run_ouro

gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

CONTROL, USER_DEFINED = 3, 4
codecs.register_error("fffd_per_byte", lambda e: ("\ufffd" * (e.end - e.start), e.end))

# ----------------------------------------------------------------------------------------------
# The oracle
# ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def gpt2_bytes_to_unicode():
    """GPT-2's byte -> printable code point map used to spell byte-level BPE tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Oracle:
    """Byte-level BPE reference built from a GGUF's tokenizer metadata with HF `tokenizers`."""

    def __init__(self, model_path):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        reader = gguf.GGUFReader(str(model_path))

        def field(name, default=None):
            f = reader.fields.get(name)
            return f.contents() if f is not None else default

        self.model_kind = field("tokenizer.ggml.model")
        self.pre = field("tokenizer.ggml.pre")
        if self.model_kind != "gpt2" or self.pre != "smollm":
            raise NotImplementedError(f"oracle knows gpt2/smollm only, model has {self.model_kind}/{self.pre}")
        self.tokens = list(field("tokenizer.ggml.tokens"))
        self.types = list(field("tokenizer.ggml.token_type"))
        merges = list(field("tokenizer.ggml.merges"))
        self.add_bos = bool(field("tokenizer.ggml.add_bos_token", False))
        self.bos_id = field("tokenizer.ggml.bos_token_id")
        self.n_vocab = len(self.tokens)

        self.control_ids = [i for i, t in enumerate(self.types) if t == CONTROL]
        self.user_defined_ids = [i for i, t in enumerate(self.types) if t == USER_DEFINED]
        self.special_ids = set(self.control_ids) | set(self.user_defined_ids)
        self.special_texts = [self.tokens[i] for i in sorted(self.special_ids)]

        vocab = {t: i for i, t in enumerate(self.tokens)}
        assert len(vocab) == self.n_vocab, "duplicate token texts in the GGUF vocabulary"
        pairs = []
        for m in merges:
            left, sep, right = m.partition(" ")
            assert sep and left and right and " " not in right, f"odd merge {m!r}"
            pairs.append((left, right))

        def build(parse_special):
            tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=None, fuse_unk=False,
                                       byte_fallback=False, ignore_merges=False))
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ])
            tok.decoder = decoders.ByteLevel()
            tok.add_special_tokens([AddedToken(self.tokens[i], special=True, normalized=False)
                                    for i in self.control_ids])
            if self.user_defined_ids:
                tok.add_tokens([AddedToken(self.tokens[i], special=False, normalized=False)
                                for i in self.user_defined_ids])
            tok.encode_special_tokens = not parse_special
            return tok

        self.hf = build(parse_special=True)
        self.hf_no_special = build(parse_special=False)
        for i in self.special_ids:  # added tokens must keep their GGUF ids
            assert self.hf.token_to_id(self.tokens[i]) == i, self.tokens[i]

        b2u = gpt2_bytes_to_unicode()
        self.u2b = {u: b for b, u in b2u.items()}
        self.unrepresentable = frozenset(b for b, u in b2u.items() if u not in vocab)

    def encode(self, text: str, parse_special=True) -> list[int]:
        tok = self.hf if parse_special else self.hf_no_special
        ids = tok.encode(text, add_special_tokens=False).ids
        if self.add_bos:
            ids = [self.bos_id] + ids
        return ids

    def encode_batch(self, texts, parse_special=True):
        tok = self.hf if parse_special else self.hf_no_special
        out = [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]
        if self.add_bos:
            out = [[self.bos_id] + ids for ids in out]
        return out

    def piece_bytes(self, token_id: int) -> bytes:
        text = self.tokens[token_id]
        if token_id in self.special_ids:
            return text.encode("utf-8")
        return bytes(self.u2b[c] for c in text)

    def decode_bytes(self, ids) -> bytes:
        return b"".join(self.piece_bytes(i) for i in ids)

    def strip_unrepresentable(self, data: bytes) -> bytes:
        return bytes(b for b in data if b not in self.unrepresentable)


@pytest.fixture(scope="module")
def oracle(model_path):
    return Oracle(model_path)


# ----------------------------------------------------------------------------------------------
# The corpus (deterministic)
# ----------------------------------------------------------------------------------------------

WHITESPACE_ATOMS = [" ", "  ", "   ", "    ", " " * 9, "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r",
                    " \n", "\n ", " \t ", "\t \n", "\n\t\t", "\r\n\r\n", "  \n  \n", "\x0b", "\x0c",
                    "\u00a0", "\u3000", "\u2003", "\u2009 ", "\u0085", "\u2028", "\u1680"]

CODE_SNIPPETS = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, x: int = 0) -> None:\n        self._x = x  # comment\n",
    "import numpy as np\nx = np.arange(10)[::-1] ** 2\nprint(f\"{x.sum():.3f}\")\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto it = std::find(v.begin(), v.end(), 2);\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c[i]; }",
    "const add = (a, b) => a + b;\nlet s = `${add(1, 2)} items`;\nconsole.log(s ?? 'none');\n",
    "function f() { return x !== undefined && y === null || z >= 10; }",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "impl<'a> Iterator for Foo<'a> { type Item = &'a str; }",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;",
    "<!DOCTYPE html>\n<html lang=\"en\">\n<body><div class=\"a b\">&amp; &lt;tag&gt;</div></body>\n</html>",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | wc -c; done 2>&1 >/dev/null\n",
    "all: build\n\nbuild:\n\t$(CC) -O2 -o $@ $^ $(LDFLAGS)\n",
    "(defun square (x) (* x x))\n(mapcar #'square '(1 2 3))",
    "key: value\nlist:\n  - a\n  - b: [1, 2]\n# comment\n",
    "$ git log --oneline -n 3 && git diff HEAD~1 -- src/",
    "x = {'a': 1, \"b\": [1.5e-3, -2, None], 'c': (True,)}",
    "    indented with spaces\n\tindented with tab\n        deeper\n",
    "if x:\n\n\n    pass\n\n\n\nelse:\n    pass",
    "a=b+c;d=e-f;g=h*i;j=k/l;m=n%o;p=q^r;s=t|u;v=w&x;y=~z;",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x} dx = 1 \\end{equation}",
    "// TODO(user): fix this\n/* multi\n * line\n */",
    "@decorator(arg=1)\nasync def handler(req):\n    await asyncio.sleep(0.1)\n",
]

PROSE = [
    "Hello world",
    "hello",
    " hello",
    "  hello",
    "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity.",
    "Once upon a time,\nthere was a little model.\n\nIt tokenized text.",
    "What is the capital of France? The capital of France is Paris.",
    "e.g. i.e. etc. vs. Mr. Mrs. Dr. U.S.A.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "CamelCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_SNAKE",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "A",
    "a",
    "I",
    "ab",
    "x" * 300,
    "ha" * 150,
    "the " * 80,
    "tokenization tokenizer tokenized tokens token",
]

NUMBERS = [
    "0", "7", "12", "123", "1234", "1234567890", "0000", "007", "3.14159", "-42", "+1", "1,000,000",
    "1 000 000", "2024-01-15", "12:30:45", "0x1F", "0b1010", "1e-9", "6.022e23", "v1.2.3", "$100",
    "€5,99", "100%", " 42", "  42", "abc123def", "x1 y22 z333", "1st 2nd 3rd 4th", "(555) 123-4567",
    "192.168.0.1", "3/4", "1/2 + 1/3", "x²", "x² + y² = z²", " ²", "³√8", "½", " ½", "¼ cup",
    "Ⅻ", "Chapter Ⅳ", "①②③", " ①", "١٢٣", " ٣", "०१२३", "a१२", "１２３", "𝟏𝟐𝟑", "٠.٥",
    "3" * 60, "9" * 17 + "." + "1" * 5,
]

EMOJI = [
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🏴‍☠️", "🇺🇸", "🇺🇸🇯🇵🇩🇪", "❤️", "❤", "🧑🏿‍💻",
    "1️⃣", "#️⃣", "👋 hello", "hello 👋", "I ❤️ NY", "🚀🚀🚀 launch!", "🤖: beep", "☃ ☂ ☀", "✓ ✗ ✔",
    "👩🏻‍🤝‍👨🏾", "🫠🫡", "x🙂y", " 🙂",
]

SCRIPTS = [
    "你好，世界！", "这是一个测试。", "我爱自然语言处理", "日本語のテキスト", "カタカナとひらがな", "東京都",
    "한국어 텍스트입니다", "안녕하세요", "مرحبا بالعالم", "السلام عليكم", "שלום עולם",
    "नमस्ते दुनिया", "हिन्दी भाषा", "ภาษาไทย", "Привет, мир!", "Україна", "Ελληνικά γράμματα",
    "Γειά σου Κόσμε", "Tiếng Việt có dấu", "Türkçe ğüşıöç İı", "Ελλάδα 2024", "ქართული", "Հայերեն",
    "አማርኛ", "தமிழ்", "বাংলা", "中文English混合mixed", "日本語 and English", "ﾊﾝｶｸ ｶﾀｶﾅ", "ＡＢＣ",
]

ACCENTS = [
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "résumé", "Ångström", "A\u030angstro\u0308m",
    "façade", "Ærøskøbing", "Straße", "ﬁne ﬂow", "e\u0301\u0302\u0303\u0304", "Z\u0324\u0354\u0367a\u0308l\u036eg\u030co",
    "Zalgo: ẗ̴̡̛̛̼͉̪̤̼̳͓̰̥̥́̈́͊͒̍͛̏̀͆̿͝e̸̺̻̘͓̹̔͆̒̒̿͑͘ẍ̵̱̩͇̳̞̣̠̝̂̓̈́͝ẗ̶̨̢̛͎̙̩̗͔̬̅͐̾́̄̚",
    "\u0301 leading combining", "ÀÉÎÕÜ àéîõü", "ĳ Ŀ ŉ", "ǅ ǈ ǋ", "Å Å", "한 한",
]

PUNCT = [
    "!!!", "?!?!", "...", "…", "---", "***", "@#$%^&*()", "<<>>", "''", '""', "``", "—–-", "«»", "„“”",
    "‘’", " ,.", "a.b,c;d:e", "=>", "->", "!=", "::", "/*", "*/", "//", "#", "##", "###", "~~~", "|||",
    "[]{}()", "<>", "a--b", "end.", "end.\n", " .", ". . .", "!?", "¿Qué?", "¡Hola!", "§1 ¶2 †‡",
    "™®©", "°C ±1", "→←↑↓", "∀x∈ℝ: x²≥0", "≠≤≥", "\\n\\t", "%%", "&&", "__init__", "--flag=value",
]

CONTRACTIONS = [
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "it's", "IT'S", "It'S", "don't", "DON'T",
    "they're", "THEY'RE", "we've", "WE'VE", "I'm", "I'M", "you'll", "YOU'LL", "he'd", "HE'D",
    "rock 'n' roll", "it’s", "don’t", "''s", "'sss", "'llama", "'dog", "x's'", "O'Neil", "'", "' s",
    "can't won't shan't", "y'all'd've", "'re're", " 's", "\n'll", "'12", "'é",
]

CONTROL_CHARS = [
    "a\x00b", "\x00", "a\x01b", "a\x04b", "\x04", "x\x06y", "\x13\x14\x16", "x\x1dy", "\x7f", "a\x1cb",
    "a\x1fb", "\x1b[31mred\x1b[0m", "bell\x07", "back\x08space", "zero\u200bwidth", "\ufeffBOM",
    "soft\u00adhyphen", "rtl \u202eevil\u202c text", "joiner\u200d\u200c", "\ue000 private",
]

URLS_JSON = [
    "http://localhost:8080/api/v1/items?id=42&sort=desc#top",
    "https://127.0.0.1:8443/a_b-c/d.html?q=%20space%2F",
    "ftp://192.168.0.1/pub/file-1.2.3.tar.gz",
    "file:///usr/share/doc/README.md",
    "mailto:user.name+tag@localhost",
    "https://[::1]:443/path/to/resource;param?x=1",
    "See <http://localhost/> or (http://localhost:3000/x).",
    '{"a": 1, "b": [true, false, null], "c": "x\\ny"}',
    '{"name":"ouro","version":"0.1.0","deps":{"numpy":">=1.0"}}',
    json.dumps({"k": [1, 2, {"n": None, "s": "é\u00e9😀"}], "e": {}}, indent=2),
    json.dumps({"list": list(range(12)), "nested": {"deep": {"deeper": ["a", "b"]}}}, indent=4),
    '[{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."}]',
    '{"escaped": "\\u00e9\\t\\"quoted\\""}',
]


def _stable_random_chars(rng, n, pools):
    """n random code points from `pools`, keeping only assigned ones whose general category is the
    same in Unicode 3.2 and in Python's table (avoids disagreements between Unicode versions)."""
    out = []
    while len(out) < n:
        lo, hi = rng.choice(pools)
        c = chr(rng.randint(lo, hi))
        cat = unicodedata.category(c)
        if cat in ("Cn", "Cs") or unicodedata.ucd_3_2_0.category(c) != cat:
            continue
        out.append(c)
    return "".join(out)


RANDOM_POOLS = [
    (0x20, 0x7E), (0x20, 0x7E), (0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF),
    (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1E00, 0x1EFF), (0x2000, 0x206F),
    (0x2070, 0x209F), (0x20A0, 0x20CF), (0x2100, 0x218F), (0x2190, 0x22FF), (0x2460, 0x24FF),
    (0x2500, 0x27BF), (0x3000, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xE000, 0xF8FF),
    (0xFB00, 0xFB4F), (0xFF00, 0xFFEF), (0x0300, 0x036F), (0x1D400, 0x1D7FF), (0x20000, 0x2A6D6),
    (0x10000, 0x1FFFF), (0x0, 0x10FFFF),
]

FRAGMENTS = ["the", " cat", "  ", " ", "\n", "\t", "123", "4", " 5", "'s", "'LL", "!", "?!", ".", ",",
             "é", "日本", "🙂", "👍🏽", "٣", "²", "\u00a0", "\r\n", "x", "Hello", "WORLD", "_", "-", "—",
             "(", ")", "{", "}", "\"", "'", "`", "$", "#", "@", "/", "\\", "<", ">", "|", "ü", "ß", "\u0301"]


def build_corpus(specials):
    rng = random.Random(20240515)
    corpus = []
    corpus += PROSE + NUMBERS + EMOJI + SCRIPTS + ACCENTS + PUNCT + CONTRACTIONS + CONTROL_CHARS
    corpus += CODE_SNIPPETS + URLS_JSON
    # whitespace runs in every position
    for w in WHITESPACE_ATOMS:
        corpus += [w, f"x{w}", f"{w}x", f"x{w}y", f"{w}x{w}"]
    corpus += ["  leading", "trailing  ", "  both  ", "a  b   c    d", "line1\nline2\n", "\n\nstart",
               "end\n\n", "mixed \t\n \t\n", " \n\n hello \n\n ", "tabs\tand\nnewlines\r\nmixed", "\t\t\tx",
               "x" + " " * 33 + "y", "a\n\n\n\n\n\n\n\nb", "word\u00a0word", "1 2  3   4", " 1", "1 ", "a 1b"]
    # numbers: long random digit strings, numbers glued to letters and spaces
    for _ in range(12):
        n = "".join(rng.choice("0123456789") for _ in range(rng.randint(5, 40)))
        corpus += [n, f"x{n}y", f" {n} "]
    # special tokens embedded in text
    for s in specials:
        corpus += [s, f"x{s}", f"{s}x", f" {s} ", f"{s}{s}", f"\n{s}\n", f"1{s}2", f"hello{s} world", f"{s[:-1]}"]
    corpus += [
        "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n2+2 = 4.<|im_end|>\n",
        "<|im_start|><|im_end|>", "<|im_start|", "im_start|>", "<|IM_START|>", "<<|im_end|>>", "<|im_end|>>",
        "<|<|im_start|>|>", "< |im_start| >", "<|im_start |>", "<|endoftext|><|endoftext|><|endoftext|>",
        "text<|endoftext|>", "<|endoftext|> ", " <|endoftext|>", "<filename>main.py\n<file_sep>",
        "<reponame>repo_name<repo_name>", "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
    ]
    # random unicode strings from a seeded RNG
    for _ in range(80):
        corpus.append(_stable_random_chars(rng, rng.randint(1, 40), RANDOM_POOLS))
    # random ASCII strings
    for _ in range(30):
        corpus.append("".join(chr(rng.randint(0x20, 0x7E)) if rng.random() < 0.9 else rng.choice("\t\n\r")
                              for _ in range(rng.randint(1, 60))))
    # random mixtures of fragments (incl. specials)
    frags = FRAGMENTS + list(specials)
    for _ in range(60):
        corpus.append("".join(rng.choice(frags) for _ in range(rng.randint(2, 25))))
    # one long document
    corpus.append("\n\n".join(PROSE[:10] + CODE_SNIPPETS[:5] + SCRIPTS[:8] + EMOJI[:8]) * 3)
    seen, unique = set(), []
    for t in corpus:
        if t and t not in seen:
            seen.add(t)
            unique.append(t)
    return unique


@pytest.fixture(scope="module")
def corpus(oracle):
    texts = build_corpus(oracle.special_texts)
    assert len(texts) >= 300
    return texts


def has_special(text, oracle):
    return any(s in text for s in oracle.special_texts)


INVALID_UTF8 = [
    b"\xff\xfe", b"\xfe\xff", b"\xff", b"\x80", b"\x80\x81\x82\xbf", b"abc\x80def", b"\xbf",
    b"\xe4\xbd", b"abc\xe4\xbd", b"\xe4\xbd\xa0\xe5\xa5", b"\xe4\xbdx", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xc3",
    b"hello \xc3 world", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xc0\x80",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"a\xed\xa0\x80b", b" \xed\xa0\x80", b"\xed\xa0\xbd\xed\xb8\x80",
    b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xef\xbb\xbfBOM",
    b"caf\xe9", b"na\xefve r\xe9sum\xe9", b"\x80hello", b"123\x80456", b"\xe2\x82", b"\xe2\x82\xac\xe2\x82",
    b"<|im_start|>\xff<|im_end|>", b"<|im_start|>user\n\xe4\xbd<|im_end|>", b"\xe4<|endoftext|>\xbd",
    b"\n\x80\n", b"\t\xa0\t", b" \xa0 ", b"'s\x80'll",
]


def random_byte_strings():
    rng = random.Random(77)
    return [bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 24))) for _ in range(40)]


# ----------------------------------------------------------------------------------------------
# Running ouro
# ----------------------------------------------------------------------------------------------


def ouro_tokenize_batch(ouro_bin, model_path, inputs, tmp_dir, *extra):
    """One `ouro tokenize --batch` call over byte strings; returns one id list per input."""
    path = tmp_dir / f"batch_{len(inputs)}_{'_'.join(e.strip('-') for e in extra) or 'special'}.hex"
    path.write_text("".join(b.hex() + "\n" for b in inputs))
    proc = run_ouro(ouro_bin, "tokenize", "--batch", path, "--model", model_path, *extra)
    lines = [ln for ln in proc.stdout.split("\n") if ln.strip()]
    assert len(lines) == len(inputs), (
        f"ouro tokenize --batch gave {len(lines)} output lines for {len(inputs)} input lines; "
        f"first lines: {lines[:3]!r}\nstderr: {proc.stderr[-2000:]}")
    out = []
    for i, ln in enumerate(lines):
        ids = json.loads(ln)
        assert isinstance(ids, list) and all(isinstance(x, int) for x in ids), f"line {i}: {ln[:200]!r}"
        out.append(ids)
    return out


def ouro_detokenize(ouro_bin, model_path, ids) -> bytes:
    proc = subprocess.run([str(ouro_bin), "detokenize", "--model", str(model_path), *map(str, ids)],
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, (f"ouro detokenize ({len(ids)} ids) exited {proc.returncode}:\n"
                                  f"{proc.stderr.decode('utf-8', 'replace')[-2000:]}")
    return proc.stdout


def strip_one_newline(out: bytes, expected: bytes) -> bytes:
    """docs/cli.md does not say whether detokenize ends with a newline: allow exactly one extra."""
    if out != expected and out == expected + b"\n":
        return expected
    return out


def report_mismatches(rows, limit=8):
    """rows: (input, expected ids, got ids, oracle); returns a readable failure message."""
    lines = [f"{len(rows)} input(s) tokenize differently from the oracle; first {min(limit, len(rows))}:"]
    for text, want, got, orc in rows[:limit]:
        lines.append(f"  input   {text!r}")
        lines.append(f"  oracle  {want}  {[orc.piece_bytes(i) for i in want]}")
        lines.append(f"  ouro    {got}  {[orc.piece_bytes(i) if 0 <= i < orc.n_vocab else '<bad id>' for i in got]}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def ouro_corpus_ids(ouro_bin, model_path, corpus, tmp_path_factory):
    return ouro_tokenize_batch(ouro_bin, model_path, [t.encode("utf-8") for t in corpus],
                               tmp_path_factory.mktemp("tok"))


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


def test_oracle_sanity(oracle):
    """The oracle itself (needs no ouro binary): known SmolLM2 tokenizations."""
    enc = oracle.encode
    assert enc("<|im_start|>") == [1] and enc("<|im_end|>") == [2] and enc("<|endoftext|>") == [0]
    assert len(enc(" hello")) == 1 and len(enc("hello")) == 1
    assert enc(" hello") != enc("hello")
    digits = enc("1234567890")
    assert len(digits) == 10 and [oracle.tokens[i] for i in digits] == list("1234567890")
    assert [oracle.tokens[i] for i in enc(" 42")] == ["Ġ", "4", "2"]
    assert oracle.decode_bytes(enc("x² + ½")) == "x² + ½".encode()
    # contractions are case-sensitive; specials parse inside text
    assert [oracle.tokens[i] for i in enc("it's")][-1] == "'s"
    ids = enc("<|im_start|>user\nHi<|im_end|>\n")
    assert ids[0] == 1 and 2 in ids and oracle.decode_bytes(ids) == b"<|im_start|>user\nHi<|im_end|>\n"
    assert 1 not in oracle.encode("<|im_start|>", parse_special=False)
    # unrepresentable bytes are dropped
    assert oracle.unrepresentable == frozenset([0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2,
                                                *range(0xF5, 0x100)])
    assert oracle.decode_bytes(enc("a\x04b")) == b"ab"
    assert oracle.add_bos is False


def test_oracle_round_trips_corpus(oracle, corpus):
    """Sanity: oracle ids decode back to every corpus text (minus unrepresentable bytes)."""
    bad = []
    for text, ids in zip(corpus, oracle.encode_batch(corpus)):
        want = oracle.strip_unrepresentable(text.encode("utf-8"))
        if oracle.decode_bytes(ids) != want:
            bad.append(text)
    assert not bad, bad[:5]


def test_tokenize_batch_matches_oracle(oracle, corpus, ouro_corpus_ids):
    """All corpus strings through one `ouro tokenize --batch` call, ids compared exactly."""
    want_all = oracle.encode_batch(corpus)
    bad = [(t, w, g, oracle) for t, w, g in zip(corpus, want_all, ouro_corpus_ids) if w != g]
    assert not bad, report_mismatches(bad)


def test_tokenize_batch_no_special(ouro_bin, model_path, oracle, corpus, tmp_path):
    """--no-special: special-token text is tokenized as plain text."""
    texts = [t for t in corpus if has_special(t, oracle)] + ["plain text", "<|im_start", "12 <b>"]
    got = ouro_tokenize_batch(ouro_bin, model_path, [t.encode() for t in texts], tmp_path, "--no-special")
    want = oracle.encode_batch(texts, parse_special=False)
    assert all(not (set(w) & oracle.special_ids) for w in want)
    bad = [(t, w, g, oracle) for t, w, g in zip(texts, want, got) if w != g]
    assert not bad, report_mismatches(bad)


def test_tokenize_batch_empty_line(ouro_bin, model_path, oracle, tmp_path):
    """An empty line is an empty input (output []), not skipped."""
    texts = ["a", "", "b", "", ""]
    got = ouro_tokenize_batch(ouro_bin, model_path, [t.encode() for t in texts], tmp_path)
    assert got == [oracle.encode(t) for t in texts]


def test_tokenize_single_text_modes(ouro_bin, model_path, oracle):
    """`ouro tokenize TEXT` (plain: ids separated by spaces) and `--json` {"ids", "pieces"}."""
    for text in ["Hello world 2024!", "<|im_start|>user\nnaïve 😀<|im_end|>", "日本語\tx  y"]:
        want = oracle.encode(text)
        plain = run_ouro(ouro_bin, "tokenize", "--model", model_path, text).stdout
        assert [int(x) for x in plain.split()] == want, (text, plain)
        obj = json.loads(run_ouro(ouro_bin, "tokenize", "--model", model_path, "--json", text).stdout)
        assert obj["ids"] == want, (text, obj)
        # U+FFFD per maximal invalid subpart (Python, WHATWG) or per invalid byte: either is accepted
        for i, got in zip(want, obj["pieces"]):
            raw = oracle.piece_bytes(i)
            ok = (raw.decode("utf-8", "replace"), raw.decode("utf-8", "fffd_per_byte"))
            assert got in ok, (text, i, got, ok)
        assert len(obj["pieces"]) == len(want), (text, obj["pieces"])


def _detok_groups(texts, oracle, n_calls):
    """Splits texts into at most n_calls groups; each group is decoded by one detokenize call whose
    ids are the concatenation of the texts' oracle ids separated by a marker's ids."""
    marker = "\n@@ouro-split@@\n"
    marker_ids = oracle.encode(marker)
    size = max(1, -(-len(texts) // n_calls))
    for start in range(0, len(texts), size):
        group = texts[start:start + size]
        ids, expected = [], []
        for k, t in enumerate(group):
            if k:
                ids += marker_ids
            t_ids = oracle.encode(t)
            ids += t_ids
            expected.append(oracle.decode_bytes(t_ids))
        yield group, ids, marker.encode(), expected


def _check_detok(ouro_bin, model_path, texts, oracle, n_calls):
    bad = []
    for group, ids, marker, expected in _detok_groups(texts, oracle, n_calls):
        want = marker.join(expected)
        out = strip_one_newline(ouro_detokenize(ouro_bin, model_path, ids), want)
        if out != want:
            parts = out.split(marker)
            if len(parts) != len(group):
                bad.append(("<group>", want[:300], out[:300]))
                continue
            bad += [(t, e, p) for t, e, p in zip(group, expected, parts) if e != p]
    assert not bad, "detokenize round trip failed:\n" + "\n".join(
        f"  text {t!r}\n  want {w!r}\n  got  {g!r}" for t, w, g in bad[:8])


def test_detokenize_round_trip_plain(ouro_bin, model_path, oracle, corpus):
    """Texts without special tokens: detokenize(ids) == text (minus unrepresentable bytes).
    At most 6 process launches: ids of ~20 texts per call, separated by a marker."""
    plain = [t for t in corpus if not has_special(t, oracle)][::3]
    for t in plain:  # the oracle side of the round trip must hold first
        assert oracle.decode_bytes(oracle.encode(t)) == oracle.strip_unrepresentable(t.encode())
    _check_detok(ouro_bin, model_path, plain, oracle, n_calls=6)


def test_detokenize_round_trip_with_specials(ouro_bin, model_path, oracle, corpus):
    """Texts with special tokens: special ids decode to their text, so these round-trip too."""
    special = [t for t in corpus if has_special(t, oracle)]
    _check_detok(ouro_bin, model_path, special, oracle, n_calls=2)


@pytest.fixture(scope="module")
def invalid_inputs():
    return INVALID_UTF8 + random_byte_strings()


@pytest.fixture(scope="module")
def ouro_invalid_ids(ouro_bin, model_path, invalid_inputs, tmp_path_factory):
    return ouro_tokenize_batch(ouro_bin, model_path, invalid_inputs, tmp_path_factory.mktemp("inv"))


def test_invalid_utf8_round_trips(oracle, invalid_inputs, ouro_invalid_ids, ouro_bin, model_path):
    """Invalid UTF-8 does not crash ouro; ids decode back to the input bytes exactly (less the bytes
    SmolLM2 has no token for); special-token text inside stays parsed."""
    bad = []
    for data, ids in zip(invalid_inputs, ouro_invalid_ids):
        if not all(0 <= i < oracle.n_vocab for i in ids):
            bad.append((data, ids, "id out of range"))
            continue
        want = oracle.strip_unrepresentable(data)
        got = oracle.decode_bytes(ids)
        if got != want:
            bad.append((data, ids, f"decodes to {got!r}, want {want!r}"))
        n_special_text = sum(data.count(s.encode()) for s in oracle.special_texts)
        if sum(i in oracle.special_ids for i in ids) != n_special_text:
            bad.append((data, ids, f"{n_special_text} special token text(s) but ids {ids}"))
    assert not bad, "\n".join(f"  {d!r}: {why} (ids {ids})" for d, ids, why in bad[:10])
    # detokenize must not crash on them either (output: raw bytes, or U+FFFD-replaced text)
    all_ids = [i for ids in ouro_invalid_ids for i in ids]
    raw = oracle.decode_bytes(all_ids)
    lossy = raw.decode("utf-8", "replace").encode("utf-8")
    out = ouro_detokenize(ouro_bin, model_path, all_ids)
    assert out in (raw, raw + b"\n", lossy, lossy + b"\n"), out[:300]


# ----------------------------------------------------------------------------------------------
# llama.cpp peer (llama-cpp-python), in a child process: a C++ exception inside llama.cpp's
# tokenizer must not take the test run down with it
# ----------------------------------------------------------------------------------------------

_LLAMA_CHILD = textwrap.dedent("""
    import sys, json, llama_cpp
    llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
    print("READY", flush=True)
    for line in sys.stdin:
        data = bytes.fromhex(line.strip())
        print(json.dumps(llm.tokenize(data, add_bos=False, special=True)), flush=True)
""")


def llama_cpp_tokenize(model_path, inputs):
    """Tokenizes byte strings with llama.cpp; an input that kills the child gets None."""
    results, pos = [], 0
    while pos < len(inputs):
        todo = inputs[pos:]
        proc = subprocess.run([sys.executable, "-c", _LLAMA_CHILD, str(model_path)],
                              input="".join(b.hex() + "\n" for b in todo), capture_output=True, text=True,
                              timeout=600, env={**os.environ, "GGML_NO_BACKTRACE": "1"})
        lines = proc.stdout.splitlines()
        if not lines or lines[0] != "READY":
            raise RuntimeError(f"llama_cpp child did not start (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
        done = []
        for ln in lines[1:1 + len(todo)]:
            if not ln.startswith("["):  # whatever a dying llama.cpp printed
                break
            done.append(json.loads(ln))
        results += done
        pos += len(done)
        if len(done) < len(todo):
            results.append(None)  # this input crashed llama.cpp
            pos += 1
    return results


@functools.lru_cache(maxsize=None)
def _llama_cached(model_path, inputs):
    return tuple(llama_cpp_tokenize(model_path, list(inputs)))


def _need_llama_cpp():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp (llama-cpp-python) is not installed; peer comparison skipped")


def test_llama_cpp_agrees_with_oracle(model_path, oracle, corpus):
    """Cross-checks the oracle itself (needs no ouro binary): llama.cpp (vocab_only, special=True, no
    BOS) gives the same ids as the HF oracle on every corpus string."""
    _need_llama_cpp()
    llama = _llama_cached(str(model_path), tuple(t.encode() for t in corpus))
    want = oracle.encode_batch(corpus)
    bad = [(t, w, l, oracle) for t, w, l in zip(corpus, want, llama) if w != l]
    assert not bad, "(llama.cpp shown as 'ouro')\n" + report_mismatches(bad)


def test_llama_cpp_agrees_on_invalid_utf8(model_path, oracle, invalid_inputs, request):
    """Invalid UTF-8 vs llama.cpp. llama.cpp replaces each invalid byte by U+FFFD before tokenizing
    (and decodes overlong forms, e.g. c0 af -> "/"), so it does not round-trip those, and it aborts
    (uncaught std::invalid_argument) on code points above U+10FFFF such as f4 90 80 80. ouro must
    equal llama.cpp wherever llama.cpp's ids do decode back to the input (e.g. UTF-8-encoded
    surrogates); the other inputs are listed in a warning, not failed."""
    _need_llama_cpp()
    ouro_ids = request.getfixturevalue("ouro_invalid_ids")
    llama = _llama_cached(str(model_path), tuple(invalid_inputs))
    comparable, skipped = [], []
    for data, l_ids, g_ids in zip(invalid_inputs, llama, ouro_ids):
        if l_ids is not None and oracle.decode_bytes(l_ids) == oracle.strip_unrepresentable(data):
            comparable.append((data, l_ids, g_ids, oracle))
        else:
            skipped.append((data, "aborted llama.cpp" if l_ids is None else "llama.cpp substituted"))
    assert comparable, "no invalid input was comparable with llama.cpp"
    if skipped:
        warnings.warn(f"{len(skipped)} invalid-UTF-8 input(s) not compared with llama.cpp, e.g. "
                      + "; ".join(f"{d!r} ({why})" for d, why in skipped[:6]))
    bad = [(d, l_ids, g_ids, o) for d, l_ids, g_ids, o in comparable if l_ids != g_ids]
    assert not bad, "(oracle column = llama.cpp)\n" + report_mismatches(bad)
