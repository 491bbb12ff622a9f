"""`ouro serve` under concurrency, cancellation, memory pressure, long runs and shutdown.

  * greedy outputs do not depend on what else is in the batch (nor on preemption under a tiny KV pool);
  * 64 concurrent streams all complete;
  * a client that goes away releases its sequence and KV blocks within ~2 s;
  * prefix caching hits on a shared system prompt without changing outputs;
  * a 1000-request soak: no 5xx, KV back to 0, RSS flat after warm-up;
  * SIGTERM/SIGINT: in-flight streams end, exit code 0.

Oracles: the server's own single-request outputs (sent alone, one after another), `ouro generate
--system` for the prefix-cache prompts, /metrics through prometheus_client, /proc/PID/status.
"""
import concurrent.futures as cf
import random
import signal
import threading
import time

import pytest

import servelib
from servelib import Stream, chat_body, get, post

CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"

LONG_TEXT = ("The river wound through the valley, past farms and mills, under old stone bridges and "
             "beside villages whose names had changed many times over the centuries. ") * 12  # ~300 tokens

# (path, body) pairs: chat and completions, short and long prompts, different lengths of output.
BATCH_REQUESTS = [
    (CHAT, chat_body("Name three colors.", 24)),
    (CHAT, chat_body("What is the capital of France?", 20)),
    (CHAT, chat_body("Write a short poem about the sea.", 32)),
    (CHAT, chat_body("Explain photosynthesis in one sentence.", 28)),
    (CHAT, chat_body("Give me a recipe for pancakes.", 32)),
    (CHAT, chat_body("Summarize this text: " + LONG_TEXT, 24)),
    (CHAT, chat_body("What is 12 times 7?", 16)),
    (CHAT, chat_body("List four planets.", 24)),
    (COMPL, {"prompt": "The history of Rome", "max_tokens": 24, "temperature": 0}),
    (COMPL, {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 32, "temperature": 0}),
    (COMPL, {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}),
    (COMPL, {"prompt": LONG_TEXT + "In the end,", "max_tokens": 24, "temperature": 0}),
    (COMPL, {"prompt": "def fibonacci(n):", "max_tokens": 28, "temperature": 0}),
    (COMPL, {"prompt": "Dear Sir or Madam,", "max_tokens": 16, "temperature": 0}),
    (CHAT, chat_body("Translate 'good morning' to French.", 12)),
    (CHAT, chat_body("Why is the sky blue?", 32)),
]


def text_of(path, j):
    c = j["choices"][0]
    return (c["message"]["content"] if path == CHAT else c["text"]), c["finish_reason"]


def run_one(url, path, body, timeout=600):
    r = post(url, path, body, timeout=timeout)
    assert r.status == 200, (path, body, r)
    return text_of(path, r.json())


def run_concurrently(url, reqs, poll_running=True):
    """Sends all requests at once (a barrier releases the threads together); returns the outputs and
    the largest ouro_requests_running seen meanwhile."""
    barrier = threading.Barrier(len(reqs))
    seen = [0]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                seen[0] = max(seen[0], servelib.metrics(url)["ouro_requests_running"])
            except Exception:  # noqa: BLE001 - polling only
                pass
            time.sleep(0.05)

    def one(req):
        barrier.wait(60)
        return run_one(url, *req)

    poller = threading.Thread(target=poll, daemon=True)
    if poll_running:
        poller.start()
    try:
        with cf.ThreadPoolExecutor(len(reqs)) as ex:
            outs = list(ex.map(one, reqs))
    finally:
        stop.set()
    return outs, seen[0]


def check_batch_independence(server_url):
    alone = [run_one(server_url, *req) for req in BATCH_REQUESTS]
    together, max_running = run_concurrently(server_url, BATCH_REQUESTS)
    diffs = [(req[1].get("messages", req[1].get("prompt")), a, t)
             for req, a, t in zip(BATCH_REQUESTS, alone, together) if a != t]
    assert not diffs, f"{len(diffs)} of {len(BATCH_REQUESTS)} outputs changed in a batch:\n" + \
        "\n".join(f"  {str(p)[:80]!r}\n    alone:    {a!r}\n    batched:  {t!r}" for p, a, t in diffs)
    assert max_running > 1, "the requests never ran together (ouro_requests_running stayed <= 1)"
    servelib.wait_idle(server_url)


def test_outputs_do_not_depend_on_the_batch(server_url):
    check_batch_independence(server_url)


def test_outputs_do_not_depend_on_the_batch_w8a8(serve_factory):
    """The throughput mode (docs/serve.md): its int8 kernels group tokens by 4 and reduce a quad's
    sums together, so a row's result must still not depend on how many rows share the step."""
    srv = serve_factory("--weights", "w8a8", "--w8a8-ops", "qkv,o,gate_up,down,head")
    check_batch_independence(srv.url)


def test_64_concurrent_streams_all_complete(server_url):
    prompts = ["Name a color.", "Name an animal.", "Say hello.", "Count to three."]
    results = [None] * 64
    barrier = threading.Barrier(64)

    def one(i):
        barrier.wait(60)
        s = Stream(server_url, CHAT, chat_body(prompts[i % 4], 8, stream=True), timeout=600)
        try:
            if s.status != 200:
                results[i] = ("status", s.status)
                return
            evs = s.read_all()
            results[i] = ("ok", s.done, servelib.stream_text(evs), servelib.stream_finish(evs))
        finally:
            s.close()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(64)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 900
    for t in threads:
        t.join(max(0, deadline - time.monotonic()))
    stalled = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not stalled, f"{len(stalled)} streams did not finish within 900 s: {stalled}"
    bad = [(i, r) for i, r in enumerate(results) if r is None or r[0] != "ok" or not r[1] or len(r[3]) != 1]
    assert not bad, f"{len(bad)} of 64 streams failed: {bad[:10]}"
    for p in range(4):  # the same greedy request gives the same text in every position of the crowd
        texts = {results[i][2] for i in range(p, 64, 4)}
        assert len(texts) == 1, (prompts[p], texts)
    m = servelib.wait_idle(server_url, 10)
    assert m["ouro_kv_blocks_used"] == 0 and m["ouro_requests_running"] == 0, m.text


@pytest.mark.parametrize("path", [CHAT, COMPL])
def test_client_disconnect_mid_stream_releases_resources(server_url, path):
    body = dict(chat_body("Count from 1 to 1000, one number per line.", 2000) if path == CHAT else
                {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 2000, "temperature": 0}, stream=True)
    s = Stream(server_url, path, body)
    assert s.status == 200
    for _ in range(3):
        assert isinstance(s.next_event(), dict)
    m = servelib.metrics(server_url)
    assert m["ouro_requests_running"] == 1 and m["ouro_kv_blocks_used"] > 0, m.text
    s.close()
    t0 = time.monotonic()
    m = servelib.wait_metric(server_url, lambda m: m["ouro_requests_running"] == 0
                             and m["ouro_kv_blocks_used"] == 0, timeout=2.0, interval=0.02)
    dt = time.monotonic() - t0
    assert m["ouro_requests_running"] == 0 and m["ouro_kv_blocks_used"] == 0, \
        f"after {dt:.1f}s: running={m['ouro_requests_running']} kv_used={m['ouro_kv_blocks_used']}"
    assert post(server_url, CHAT, chat_body("Hi", 2)).status == 200


def test_client_disconnect_while_queued(serve_factory):
    srv = serve_factory("--max-batch", "1")
    long = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 2000, "temperature": 0, "stream": True}
    a = Stream(srv.url, COMPL, long)
    assert a.status == 200 and isinstance(a.next_event(), dict)
    box = {}
    threading.Thread(target=lambda: box.setdefault("b", Stream(srv.url, COMPL, long)), daemon=True).start()
    m = servelib.wait_metric(srv.url, lambda m: m["ouro_requests_waiting"] == 1, 30)
    assert m["ouro_requests_waiting"] == 1, m.text
    # The queued request's response headers may not have been sent yet: close its socket from here.
    deadline = time.monotonic() + 5
    while "b" not in box and time.monotonic() < deadline:
        time.sleep(0.02)
    if "b" in box:
        box["b"].close()
    a.close()
    m = servelib.wait_metric(srv.url, lambda m: m["ouro_requests_running"] == 0 and m["ouro_requests_waiting"] == 0
                             and m["ouro_kv_blocks_used"] == 0, timeout=3.0, interval=0.02)
    assert (m["ouro_requests_running"], m["ouro_requests_waiting"], m["ouro_kv_blocks_used"]) == (0, 0, 0), m.text


# ------------------------------------------------------------------------------------ preemption

PREEMPT_PROMPTS = ["Write a long story about a dragon.", "Describe the city of Paris in detail.",
                   "Explain how computers work.", "Write a letter to a friend about your holiday.",
                   "Describe the ocean.", "Tell me about the history of music.",
                   "Explain the rules of chess.", "Write an essay about trees."]


def test_preemption_under_a_tiny_kv_pool_keeps_outputs(server_url, serve_factory):
    reqs = [(CHAT, chat_body(p, 64)) for p in PREEMPT_PROMPTS]
    alone = [run_one(server_url, *req) for req in reqs]  # no memory pressure on the session server
    # ~40 prompt + 64 generated tokens = 7 blocks of 16 per request: 14 blocks hold two of them.
    srv = serve_factory("--kv-blocks", "14", "--block-size", "16", "--max-batch", "8")
    m0 = servelib.metrics(srv.url)
    assert m0["ouro_kv_blocks_total"] == 14, m0.text
    together, _ = run_concurrently(srv.url, reqs, poll_running=False)
    m = servelib.wait_idle(srv.url, 10)
    diffs = [(p, a, t) for p, a, t in zip(PREEMPT_PROMPTS, alone, together) if a != t]
    assert not diffs, f"{len(diffs)} of 8 outputs changed under KV pressure:\n" + \
        "\n".join(f"  {p!r}\n    alone:    {a!r}\n    pressed:  {t!r}" for p, a, t in diffs)
    assert m["ouro_preemptions_total"] > 0, "no preemption happened; the test did not test it:\n" + m.text
    assert m["ouro_kv_blocks_used"] == 0 and m["ouro_requests_running"] == 0, m.text
    assert m.total_requests(200) >= 8


# -------------------------------------------------------------------------------- prefix caching

def test_prefix_cache_hits_on_shared_system_prompt(server_url, ref, ouro_bin, model_path):
    nonce = f"{random.Random().getrandbits(48):012x}"
    system = (f"Session {nonce}. You are a careful assistant for a library. " + LONG_TEXT)[:1200]
    n_sys = len(servelib.tokenize(ouro_bin, model_path, "<|im_start|>system\n" + system + "<|im_end|>\n"))
    users = ["What is 2+2?", "Name a fruit."]

    def ask(user):
        before = servelib.wait_idle(server_url)
        r = post(server_url, CHAT, {"messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}],
                                    "max_tokens": 16, "temperature": 0})
        assert r.status == 200, r
        after = servelib.wait_idle(server_url)
        hit = after["ouro_prefix_cache_hit_tokens_total"] - before["ouro_prefix_cache_hit_tokens_total"]
        query = after["ouro_prefix_cache_query_tokens_total"] - before["ouro_prefix_cache_query_tokens_total"]
        j = r.json()
        return j["choices"][0]["message"]["content"], j["usage"]["prompt_tokens"], hit, query, after

    text_a, pt_a, hit_a, q_a, _ = ask(users[0])
    text_b, pt_b, hit_b, q_b, m = ask(users[1])
    text_a2, pt_a2, hit_a2, q_a2, _ = ask(users[0])
    assert q_a == pt_a and q_b == pt_b, (q_a, pt_a, q_b, pt_b)
    assert hit_b >= (n_sys // 16) * 16 - 16, f"second request hit {hit_b} of ~{n_sys} shared prompt tokens"
    assert hit_b <= pt_b
    assert hit_a2 >= (pt_a // 16) * 16 - 16, f"the same request again hit {hit_a2} of {pt_a} tokens"
    assert hit_a2 < pt_a2, "every prompt token was a hit: at least one must be computed to get logits"
    assert m["ouro_kv_blocks_cached"] > 0, m.text
    for user, text in ((users[0], text_a), (users[1], text_b), (users[0], text_a2)):
        assert text == ref(user, 16, system=system)["text"], user


# ------------------------------------------------------------------------------------------- soak

WORDS = ("apple river stone music light garden window paper cloud green quiet mountain story number bread "
         "summer winter friend city ocean forest yellow table chair dream").split()


def soak_request(rng):
    n = rng.randint(1, 16)
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
    if rng.random() < 0.3:
        prompt = "Tell me about " + prompt  # shared prefixes
    temp = rng.choice([0, 0, 0.7, 1.0])
    stream = rng.random() < 0.5
    cancel = stream and rng.random() < 0.2  # ~10% of all requests
    if rng.random() < 0.5:
        body = chat_body(prompt, n, temperature=temp, seed=rng.randrange(1000), stream=stream)
        path = CHAT
        if rng.random() < 0.1:
            body.update(logprobs=True, top_logprobs=2)
    else:
        body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "seed": rng.randrange(1000), "stream": stream}
        path = COMPL
    if rng.random() < 0.1:
        body["stop"] = [rng.choice(WORDS), "\n"]
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    return path, body, cancel


def do_soak_request(url, path, body, cancel, rng_seed):
    if not body.get("stream"):
        r = post(url, path, body, timeout=600)
        if r.status != 200:
            return ("status", r.status, r.body[:200])
        j = r.json()
        return ("ok",) if j["usage"]["completion_tokens"] <= body["max_tokens"] else ("usage", j["usage"])
    s = Stream(url, path, body, timeout=600)
    try:
        if s.status != 200:
            return ("status", s.status, s.resp.read()[:200])
        if cancel:
            for _ in range(random.Random(rng_seed).randint(0, 2)):
                if s.next_event() in (None, "[DONE]"):
                    break
            return ("cancelled",)
        s.read_all()
        return ("ok",) if s.done else ("no [DONE]", s.events[-3:])
    finally:
        s.close()


def run_soak(url, n, seed, concurrency=16):
    rng = random.Random(seed)
    reqs = [soak_request(rng) for _ in range(n)]
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = [ex.submit(do_soak_request, url, p, b, c, seed * 100000 + i) for i, (p, b, c) in enumerate(reqs)]
        outs = []
        for f in futs:
            try:
                outs.append(f.result(timeout=900))
            except Exception as e:  # noqa: BLE001 - report every failure
                outs.append(("exception", repr(e)))
    return reqs, outs


def test_soak_1000_mixed_requests(serve_factory):
    srv = serve_factory()
    _, warm = run_soak(srv.url, 50, seed=1)
    assert all(o[0] in ("ok", "cancelled") for o in warm), [o for o in warm if o[0] not in ("ok", "cancelled")]
    m_warm = servelib.wait_idle(srv.url, 10)
    rss_warm = srv.rss_kib()
    before = m_warm
    t0 = time.monotonic()
    reqs, outs = run_soak(srv.url, 1000, seed=2)
    dt = time.monotonic() - t0
    bad = [(r, o) for r, o in zip(reqs, outs) if o[0] not in ("ok", "cancelled")]
    fivexx = [(r, o) for r, o in bad if o[0] == "status" and o[1] >= 500]
    assert not fivexx, f"{len(fivexx)} 5xx answers: {fivexx[:5]}"
    assert not bad, f"{len(bad)} of 1000 requests failed: {bad[:5]}"
    assert srv.alive()
    m = servelib.wait_idle(srv.url, 10)
    assert m["ouro_kv_blocks_used"] == 0, m.text
    assert m["ouro_requests_running"] == 0 and m["ouro_requests_waiting"] == 0, m.text
    n_cancel = sum(o[0] == "cancelled" for o in outs)
    assert m.total_requests(200) - before.total_requests(200) >= 1000 - n_cancel
    assert sum(v for (n, lb), v in m.samples.items() if n == "ouro_requests_total" and int(dict(lb)["status"]) >= 500) == 0
    rss_end = srv.rss_kib()
    assert rss_end <= rss_warm * 1.10, (
        f"RSS grew from {rss_warm} KiB after the warm-up to {rss_end} KiB after 1000 requests ({dt:.0f} s); "
        f"kv_blocks_cached {m_warm['ouro_kv_blocks_cached']} -> {m['ouro_kv_blocks_cached']}")
    assert get(srv.url, "/health").status == 200


# --------------------------------------------------------------------------------------- shutdown

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_with_streams_in_flight(serve_factory, sig):
    srv = serve_factory()
    results = {}

    def one(i):
        s = Stream(srv.url, COMPL, {"prompt": f"{i}, {i + 1}, {i + 2},", "max_tokens": 150, "temperature": 0,
                                    "stream": True}, timeout=60)
        try:
            evs = []
            while True:
                try:
                    ev = s.next_event()
                except Exception as e:  # noqa: BLE001 - a reset connection counts as closed
                    results[i] = ("closed", repr(e))
                    return
                if ev is None:
                    results[i] = ("closed", len(evs))
                    return
                if ev == "[DONE]":
                    results[i] = ("done", servelib.stream_finish(evs))
                    return
                evs.append(ev)
                if len(evs) == 1:
                    started[i].set()
        finally:
            s.close()

    started = [threading.Event() for _ in range(4)]
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(120), "a stream did not start"
    t0 = time.monotonic()
    srv.send_signal(sig)
    rc = srv.wait(timeout=30)
    assert rc == 0, f"exit {rc} after {signal.Signals(sig).name}\n{srv.tail()}"
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a stream was left hanging after the server exited"
    assert time.monotonic() - t0 < 30
    assert len(results) == 4, results
    for i, r in results.items():
        assert r[0] in ("done", "closed"), r
        if r[0] == "done":
            assert r[1] in (["length"], ["stop"]), r


def test_signal_when_idle_exits_zero(serve_factory):
    for sig in (signal.SIGTERM, signal.SIGINT):
        srv = serve_factory()
        assert post(srv.url, CHAT, chat_body("Hi", 2)).status == 200
        t0 = time.monotonic()
        assert srv.stop(timeout=30, sig=sig) == 0, srv.tail()
        assert time.monotonic() - t0 < 5, "an idle server took over 5 s to exit"
