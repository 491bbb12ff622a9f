"""`ouro serve` on the hybrid model (hybrid-tiny.Q8_0, `kimi-linear`): every request's greedy output
equal to the one-stream CLI's (`ouro generate --temp 0 --json`), also when several requests arrive
at once and share the running batch: each sequence has its own recurrent-state slot and its own
latent rows, none sees another's. The startup line names both memories.
"""
import concurrent.futures as cf
from pathlib import Path

import pytest

import servelib
from servelib import get

HYBRID = Path(__file__).resolve().parents[2] / "models" / "hybrid-tiny.Q8_0.gguf"
PROMPTS = ["Name three colors.", "What is the capital of France?", "Count to five.", "Say hello."]


@pytest.fixture(scope="module")
def hybrid_server(ouro_bin):
    if not HYBRID.is_file():
        pytest.fail(f"{HYBRID} is missing: scripts/make_hybrid.sh (run by scripts/setup.sh) makes it")
    srv = servelib.Server(ouro_bin, HYBRID, "--max-batch", "4")
    yield srv
    rc = srv.stop(timeout=30)
    assert rc == 0, f"ouro serve exited {rc} on SIGTERM\nstderr:\n{srv.tail()}"


@pytest.fixture(scope="module")
def model_id(hybrid_server):
    return get(hybrid_server.url, "/v1/models").json()["data"][0]["id"]


def chat(client, model_id, prompt, n, **kw):
    return client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": prompt}],
                                          max_tokens=n, temperature=0, **kw)


def test_startup_names_both_memories(hybrid_server):
    err = hybrid_server.stderr
    assert "recurrent state" in err and "KiB per sequence" in err, err


def test_hybrid_chat_greedy_equals_generate(hybrid_server, model_id, ouro_bin):
    client = hybrid_server.client()
    for prompt in PROMPTS[:2]:
        want = servelib.reference(ouro_bin, HYBRID, prompt, 12)
        r = chat(client, model_id, prompt, 12)
        assert r.choices[0].message.content == want["text"]
        assert r.usage.prompt_tokens == want["prompt_tokens"]
        assert r.usage.completion_tokens == want["completion_tokens"]


def test_hybrid_concurrent_requests_do_not_mix(hybrid_server, model_id, ouro_bin):
    want = {p: servelib.reference(ouro_bin, HYBRID, p, 16) for p in PROMPTS}
    client = hybrid_server.client()

    def one(prompt, stream):
        if stream:
            chunks = list(chat(client, model_id, prompt, 16, stream=True))
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return chat(client, model_id, prompt, 16).choices[0].message.content

    jobs = [(p, i % 2 == 1) for i, p in enumerate(PROMPTS * 2)]
    with cf.ThreadPoolExecutor(len(jobs)) as ex:
        got = list(ex.map(lambda j: one(*j), jobs))
    for (prompt, stream), text in zip(jobs, got):
        assert text == want[prompt]["text"], (prompt, stream)


def test_hybrid_completions_and_bad_request(hybrid_server, model_id, ouro_bin):
    want = servelib.reference(ouro_bin, HYBRID, "The history of Rome", 10, chat=False)
    client = hybrid_server.client()
    r = client.completions.create(model=model_id, prompt="The history of Rome", max_tokens=10, temperature=0)
    assert r.choices[0].text == want["text"]
    bad = servelib.post(hybrid_server.url, "/v1/completions", {"model": model_id, "prompt": [49152], "max_tokens": 2})
    assert bad.status == 400, bad
    servelib.check_error_shape(bad.json(), 400)
    assert hybrid_server.alive()
