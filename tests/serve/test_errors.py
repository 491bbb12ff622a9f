"""`ouro serve`: every error of the contract, through raw HTTP (http.client / sockets) and through the
official `openai` client's exceptions, plus a seeded fuzz pass of malformed requests.

Every error response must be `{"error": {"message": str, "type": str, "param": str|null, "code": str|null}}`
(400s with type "invalid_request_error"). Choices where the contract is silent (OpenAI behaviour):
  * `stop` with more than 4 strings, `n` other than 1, a completions `prompt` list of two strings,
    top_logprobs > 20, a message without content, and a value of the wrong JSON type anywhere
    (also a float for an integer field) are 400;
  * 405 carries an `Allow` header (RFC 9110 says it must); 429 carries `Retry-After` in seconds;
  * a Content-Length over --max-body is refused with 413 before the body is read;
  * during shutdown a request on an already open keep-alive connection gets 503; a new connection is
    refused or gets 503 (both are "stops accepting").
"""
import http.client
import json
import random
import re
import socket
import subprocess
import threading
import time

import openai
import pytest

import servelib
from servelib import MODEL_ID, check_error_shape, chat_body, get, post, request

CHAT = "/v1/chat/completions"
COMPL = "/v1/completions"
LONG_PROMPT = "hello " * 5000  # > 4096 tokens (the default context)


def msgs(content="Hi"):
    return [{"role": "user", "content": content}]


BAD_400 = [
    # (id, path, raw body or JSON-able, expected code or None)
    ("non_json", CHAT, b"hello there", None),
    ("truncated_json", CHAT, b'{"messages": [{"role": "user", "content": "Hi"}', None),
    ("empty_body", CHAT, b"", None),
    ("json_array", CHAT, b'[{"role": "user", "content": "Hi"}]', None),
    ("json_string", CHAT, b'"hi"', None),
    ("json_number", CHAT, b"42", None),
    ("json_null", CHAT, b"null", None),
    ("max_tokens_str", CHAT, {"messages": msgs(), "max_tokens": "ten"}, None),
    ("max_tokens_float", CHAT, {"messages": msgs(), "max_tokens": 1.5}, None),
    ("max_tokens_neg", CHAT, {"messages": msgs(), "max_tokens": -1}, None),
    ("max_tokens_huge", CHAT, {"messages": msgs(), "max_tokens": 10**9}, None),
    ("max_tokens_2_64", CHAT, {"messages": msgs(), "max_tokens": 2**64}, None),
    ("max_completion_tokens_neg", CHAT, {"messages": msgs(), "max_completion_tokens": -5}, None),
    ("messages_str", CHAT, {"messages": "Hi", "max_tokens": 4}, None),
    ("messages_obj", CHAT, {"messages": {"role": "user", "content": "Hi"}, "max_tokens": 4}, None),
    ("message_not_obj", CHAT, {"messages": ["Hi"], "max_tokens": 4}, None),
    ("message_no_content", CHAT, {"messages": [{"role": "user"}], "max_tokens": 4}, None),
    ("message_content_int", CHAT, {"messages": [{"role": "user", "content": 5}], "max_tokens": 4}, None),
    ("message_no_role", CHAT, {"messages": [{"content": "Hi"}], "max_tokens": 4}, None),
    ("unknown_role", CHAT, {"messages": [{"role": "wizard", "content": "Hi"}], "max_tokens": 4}, None),
    ("empty_messages", CHAT, {"messages": [], "max_tokens": 4}, None),
    ("missing_messages", CHAT, {"max_tokens": 4}, None),
    ("temperature_str", CHAT, {"messages": msgs(), "temperature": "hot"}, None),
    ("temperature_neg", CHAT, {"messages": msgs(), "temperature": -1}, None),
    ("temperature_big", CHAT, {"messages": msgs(), "temperature": 2.5}, None),
    ("top_p_big", CHAT, {"messages": msgs(), "top_p": 1.5}, None),
    ("top_p_zero", CHAT, {"messages": msgs(), "top_p": 0}, None),
    ("top_p_str", CHAT, {"messages": msgs(), "top_p": "all"}, None),
    ("stream_str", CHAT, {"messages": msgs(), "stream": "yes"}, None),
    ("stop_int", CHAT, {"messages": msgs(), "stop": 5}, None),
    ("stop_five", CHAT, {"messages": msgs(), "stop": ["a", "b", "c", "d", "e"]}, None),
    ("seed_str", CHAT, {"messages": msgs(), "seed": "abc"}, None),
    ("n_2", CHAT, {"messages": msgs(), "n": 2, "max_tokens": 4}, None),
    ("top_logprobs_21", CHAT, {"messages": msgs(), "logprobs": True, "top_logprobs": 21}, None),
    ("unknown_model", CHAT, {"model": "gpt-nonexistent", "messages": msgs(), "max_tokens": 4}, "model_not_found"),
    ("context_exceeded", CHAT, {"messages": msgs(LONG_PROMPT), "max_tokens": 4}, "context_length_exceeded"),
    ("c_non_json", COMPL, b"{not json", None),
    ("c_json_array", COMPL, b'["Hello"]', None),
    ("c_missing_prompt", COMPL, {"max_tokens": 4}, None),
    ("c_prompt_int", COMPL, {"prompt": 5, "max_tokens": 4}, None),
    ("c_prompt_two", COMPL, {"prompt": ["a", "b"], "max_tokens": 4}, None),
    ("c_max_tokens_str", COMPL, {"prompt": "Hi", "max_tokens": "ten"}, None),
    ("c_max_tokens_neg", COMPL, {"prompt": "Hi", "max_tokens": -1}, None),
    ("c_max_tokens_huge", COMPL, {"prompt": "Hi", "max_tokens": 10**9}, None),
    ("c_top_p_big", COMPL, {"prompt": "Hi", "top_p": 1.5}, None),
    ("c_temperature_neg", COMPL, {"prompt": "Hi", "temperature": -1}, None),
    ("c_logprobs_21", COMPL, {"prompt": "Hi", "logprobs": 21, "max_tokens": 2}, None),
    ("c_n_2", COMPL, {"prompt": "Hi", "n": 2, "max_tokens": 4}, None),
    ("c_unknown_model", COMPL, {"model": "nope", "prompt": "Hi", "max_tokens": 4}, "model_not_found"),
    ("c_context_exceeded", COMPL, {"prompt": LONG_PROMPT, "max_tokens": 4}, "context_length_exceeded"),
]


@pytest.mark.parametrize("case", BAD_400, ids=[c[0] for c in BAD_400])
def test_400(server_url, case):
    _, path, body, code = case
    r = post(server_url, path, body, timeout=120)
    assert r.status == 400, (body if isinstance(body, bytes) else json.dumps(body)[:200], r)
    assert (r.header("Content-Type") or "").startswith("application/json"), r.headers
    e = check_error_shape(r.body)
    assert e["type"] == "invalid_request_error", e
    if code is not None:
        assert e["code"] == code, e
    # the same body as a streaming request is refused the same way, before any SSE starts
    if isinstance(body, dict) and "stream" not in body:
        r = post(server_url, path, dict(body, stream=True), timeout=120)
        assert r.status == 400, ("stream", r)
        check_error_shape(r.body)


@pytest.mark.parametrize("method,path", [("GET", "/v1/nothing"), ("POST", "/v1/nothing"), ("GET", "/"),
                                         ("GET", "/v1/chat"), ("GET", "/healthz"), ("GET", "/v2/models")])
def test_404_unknown_path(server_url, method, path):
    r = request(server_url, method, path, b"{}" if method == "POST" else None)
    assert r.status == 404, r
    check_error_shape(r.body)


@pytest.mark.parametrize("method,path,allowed", [
    ("GET", CHAT, "POST"), ("GET", COMPL, "POST"), ("PUT", CHAT, "POST"), ("DELETE", COMPL, "POST"),
    ("POST", "/v1/models", "GET"), ("POST", "/health", "GET"), ("POST", "/metrics", "GET")])
def test_405_wrong_method(server_url, method, path, allowed):
    r = request(server_url, method, path, b"{}" if method in ("POST", "PUT") else None)
    assert r.status == 405, r
    check_error_shape(r.body)
    allow = r.header("Allow")
    assert allow is not None and allowed in [a.strip() for a in allow.split(",")], r.headers


def test_server_still_works_after_errors(server_url):
    r = post(server_url, CHAT, chat_body("Hi", 3))
    assert r.status == 200, r
    assert r.json()["usage"]["completion_tokens"] <= 3


# -------------------------------------------------------------------------------- the openai client

def test_openai_client_exceptions(server):
    c = server.client()
    m = msgs()
    cases = [
        (openai.BadRequestError, None, lambda: c.chat.completions.create(model=MODEL_ID, messages=m, max_tokens=-1)),
        (openai.BadRequestError, None, lambda: c.chat.completions.create(model=MODEL_ID, messages=m, top_p=1.5)),
        (openai.BadRequestError, None, lambda: c.chat.completions.create(model=MODEL_ID, messages=m, temperature=-1)),
        (openai.BadRequestError, None, lambda: c.chat.completions.create(model=MODEL_ID, messages=m, n=2)),
        (openai.BadRequestError, None, lambda: c.chat.completions.create(model=MODEL_ID, messages=[])),
        (openai.BadRequestError, None, lambda: c.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "wizard", "content": "x"}])),
        (openai.BadRequestError, "model_not_found", lambda: c.chat.completions.create(model="nope", messages=m)),
        (openai.BadRequestError, "context_length_exceeded",
         lambda: c.chat.completions.create(model=MODEL_ID, messages=msgs(LONG_PROMPT), max_tokens=2)),
        (openai.BadRequestError, "context_length_exceeded",
         lambda: c.completions.create(model=MODEL_ID, prompt=LONG_PROMPT, max_tokens=2)),
        (openai.BadRequestError, None, lambda: c.completions.create(model=MODEL_ID, prompt="x", max_tokens=10**9)),
        (openai.BadRequestError, None,  # the same error on a streaming request
         lambda: list(c.chat.completions.create(model=MODEL_ID, messages=m, max_tokens=-1, stream=True))),
        (openai.NotFoundError, None, lambda: c.get("/nothing/here", cast_to=object)),
    ]
    for exc, code, call in cases:
        with pytest.raises(exc) as ei:
            call()
        e = ei.value
        assert isinstance(e.body, dict) and isinstance(e.body.get("message"), str), e.body
        assert e.type, e.body
        if exc is openai.BadRequestError:
            assert e.type == "invalid_request_error", e.body
        if code:
            assert e.code == code, e.body


# ----------------------------------------------------------------------------------------------- 413

def test_413_body_over_max_body(serve_factory):
    srv = serve_factory("--max-body", "1024")
    small = chat_body("Hi", 2)
    r = post(srv.url, CHAT, small)
    assert r.status == 200, r
    big = chat_body("Hi " * 600, 2)  # ~1.9 KB of valid JSON
    assert len(json.dumps(big)) > 1024
    r = post(srv.url, CHAT, big)
    assert r.status == 413, r
    check_error_shape(r.body)
    # A declared Content-Length over the limit is refused without waiting for the body.
    t0 = time.monotonic()
    buf = servelib.raw_exchange(srv.host, srv.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{",
                                timeout=20)
    assert servelib.parse_status(buf) == 413, buf[:300]
    assert time.monotonic() - t0 < 10
    assert get(srv.url, "/health").status == 200


# ----------------------------------------------------------------------------------------------- 401

def test_401_api_key(serve_factory):
    srv = serve_factory("--api-key", "sekret-key")
    body = chat_body("Hi", 2)
    for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer "},
                 {"Authorization": "sekret-key"}, {"Authorization": "Basic sekret-key"},
                 {"Authorization": "Bearer sekret-key-and-more"}):
        r = post(srv.url, CHAT, body, headers=hdrs)
        assert r.status == 401, (hdrs, r)
        check_error_shape(r.body)
        r = post(srv.url, COMPL, {"prompt": "Hi", "max_tokens": 2}, headers=hdrs)
        assert r.status == 401, (hdrs, r)
        r = get(srv.url, "/v1/models", headers=hdrs)
        assert r.status == 401, (hdrs, r)
        check_error_shape(r.body)
    ok = {"Authorization": "Bearer sekret-key"}
    assert post(srv.url, CHAT, body, headers=ok).status == 200
    assert get(srv.url, "/v1/models", headers=ok).status == 200
    # /health and /metrics stay open
    assert get(srv.url, "/health").status == 200
    assert get(srv.url, "/metrics").status == 200
    with pytest.raises(openai.AuthenticationError) as ei:
        srv.client(api_key="wrong").chat.completions.create(model=MODEL_ID, messages=msgs(), max_tokens=2)
    assert isinstance(ei.value.body, dict) and ei.value.body.get("message")
    r = srv.client(api_key="sekret-key").chat.completions.create(model=MODEL_ID, messages=msgs(), max_tokens=2)
    assert r.choices[0].message.content is not None


# ----------------------------------------------------------------------------------------------- 429

LONG_GEN = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 2000, "temperature": 0, "stream": True}


def test_429_queue_full_with_retry_after(serve_factory):
    srv = serve_factory("--max-batch", "1", "--max-queue", "1")
    a = servelib.Stream(srv.url, COMPL, LONG_GEN)
    assert a.status == 200
    m = servelib.wait_metric(srv.url, lambda m: m["ouro_requests_running"] == 1, 30)
    assert m["ouro_requests_running"] == 1, m.text
    b_box = {}
    threading.Thread(target=lambda: b_box.setdefault("s", servelib.Stream(srv.url, COMPL, LONG_GEN)),
                     daemon=True).start()
    m = servelib.wait_metric(srv.url, lambda m: m["ouro_requests_waiting"] == 1, 30)
    assert m["ouro_requests_waiting"] == 1 and m["ouro_requests_running"] == 1, m.text
    try:
        r = post(srv.url, COMPL, {"prompt": "Hi", "max_tokens": 2})
        assert r.status == 429, r
        check_error_shape(r.body)
        ra = r.header("Retry-After")
        assert ra is not None and ra.strip().isdigit(), r.headers
        r = post(srv.url, CHAT, dict(chat_body("Hi", 2), stream=True))
        assert r.status == 429, ("streaming request", r)
        with pytest.raises(openai.RateLimitError):
            srv.client().completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
        assert get(srv.url, "/health").status == 200  # the queue does not block /health
        m = servelib.metrics(srv.url)
        assert m.total_requests(429) >= 3, m.text
    finally:
        a.close()
        deadline = time.monotonic() + 30
        while "s" not in b_box and time.monotonic() < deadline:
            time.sleep(0.05)
        if "s" in b_box:
            b_box["s"].close()
    m = servelib.wait_idle(srv.url, 10)
    assert m["ouro_requests_running"] == 0 and m["ouro_requests_waiting"] == 0, m.text
    assert post(srv.url, COMPL, {"prompt": "Hi", "max_tokens": 2}).status == 200


# ----------------------------------------------------------------------------------------------- 503

def test_shutdown_refuses_new_work(serve_factory):
    srv = serve_factory("--max-batch", "2")
    s = servelib.Stream(srv.url, COMPL, dict(LONG_GEN, max_tokens=300))
    assert s.status == 200 and isinstance(s.next_event(), dict)
    keep = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    keep.request("GET", "/health")
    kr = keep.getresponse()
    kr.read()
    assert kr.status == 200
    kept_open = not kr.will_close
    srv.send_signal()
    time.sleep(0.5)
    assert srv.alive(), "the server exited although a request was in flight"
    responses = []
    if kept_open:  # an already accepted connection is where the contract's 503 must show
        keep.request("POST", COMPL, body=json.dumps({"prompt": "Hi", "max_tokens": 2}),
                     headers={"Content-Type": "application/json"})
        r = keep.getresponse()
        responses.append((r.status, r.read()))
    try:
        r = post(srv.url, CHAT, chat_body("Hi", 2), timeout=30)
        responses.append((r.status, r.body))
    except (ConnectionRefusedError, http.client.RemoteDisconnected, ConnectionResetError):
        pass
    for status, body in responses:
        assert status == 503, (status, body)
        check_error_shape(body)
    # the in-flight stream ends (completed, or cut at the grace) and the server exits 0
    t0 = time.monotonic()
    evs = s.read_all()
    assert time.monotonic() - t0 < 20, "the in-flight stream outlived the 10 s grace"
    s.close()
    assert evs
    rc = srv.wait(timeout=30)
    assert rc == 0, srv.tail()


# ---------------------------------------------------------------------------------------------- fuzz

BASES = [
    (CHAT, {"model": MODEL_ID, "messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "Hi"}],
            "max_tokens": 2, "temperature": 0, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "seed": 1,
            "stop": ["\n"], "stream": False, "logprobs": True, "top_logprobs": 2}),
    (CHAT, {"messages": [{"role": "user", "content": "Hello"}], "max_completion_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True}}),
    (COMPL, {"model": MODEL_ID, "prompt": "Hello", "max_tokens": 2, "temperature": 0.5, "logprobs": 1, "stop": "x"}),
    (COMPL, {"prompt": ["Once"], "max_tokens": 1, "stream": True}),
]
WEIRD = [None, True, False, 0, -1, 1.5, -0.0, 2**31, 2**63, -2**63, 2**64, 10**30, 1e308, -1e308, 1e-320, "",
         "x" * 5000, "\u0000", "\ud83d\ude00", [], {}, [[]], {"a": {}}, [1, 2, 3], ["a", "b"], "NaN", "1"]
SMALL_TOKENS = [None, True, False, 0, -1, 1.5, 2**31, 2**63, 2**64, 10**30, 1e308, "", "3", [], {}, 1, 2, 4]


def deep(depth, kind):
    return ("[" * depth + "]" * depth) if kind == "a" else ('{"a":' * depth + "1" + "}" * depth)


def mutate(rng, path, base):
    body = json.loads(json.dumps(base))
    raw = None
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        keys = list(body)
        if op == 0 and keys:
            k = rng.choice(keys)
            if k not in ("max_tokens", "max_completion_tokens"):  # no unbounded generations
                del body[k]
        elif op == 1 and keys:
            k = rng.choice(keys)
            body[k] = rng.choice(SMALL_TOKENS if "tokens" in k else WEIRD)
        elif op == 2:
            body[rng.choice(["extra", "n", "user", "tools", "logit_bias", "stream_options", "best_of"])] = \
                rng.choice(WEIRD)
        elif op == 3 and "messages" in body and isinstance(body["messages"], list) and body["messages"]:
            msg = rng.choice(body["messages"])
            if isinstance(msg, dict):
                what = rng.randrange(4)
                if what == 0:
                    msg["role"] = rng.choice(["", "tool", "function", "developer", "assistant", "USER", 5, None])
                elif what == 1:
                    msg["content"] = rng.choice(WEIRD + [[{"type": "text", "text": "hi"}],
                                                         [{"type": "image_url", "image_url": {"url": "x"}}]])
                elif what == 2:
                    msg.pop(rng.choice(list(msg) or ["x"]), None)
                else:
                    msg["name"] = rng.choice(WEIRD)
        elif op == 4:
            k = rng.choice(keys or ["x"])
            body[k] = "@@DEEP@@"
        elif op == 5 and "prompt" in body:
            body["prompt"] = rng.choice(WEIRD + ["\u00ff" * 100, "<|im_start|>", "<|im_end|>" * 10])
    text = json.dumps(body)
    if "@@DEEP@@" in text:
        text = text.replace('"@@DEEP@@"', deep(rng.choice([10, 1000, 100000]), rng.choice("ao")), 1)
    raw = text.encode()
    op2 = rng.randrange(6)
    if op2 == 0 and raw.startswith(b"{"):  # duplicate a key
        raw = b'{"max_tokens": 3, "stream": false, ' + raw[1:]
    elif op2 == 1:  # invalid UTF-8 inside a string
        pos = raw.find(b'"', rng.randrange(max(1, len(raw))))
        if pos >= 0:
            raw = raw[:pos + 1] + rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                                              b"\\ud800", b"\\u12", b"\x00"]) + raw[pos + 1:]
    return raw


def http_request(path, body, rng):
    """A raw request, sometimes with broken framing or headers. Returns (bytes, may_wait, ok5xx): may_wait when
    the server may legitimately wait for more bytes (we half-close) or close without an answer; ok5xx a 5xx
    status that is the right answer (501: a transfer coding it does not implement, 505: HTTP/9.9), else False."""
    kind = rng.randrange(14)
    cl = len(body)
    may_wait = False
    hdrs = [b"Host: 127.0.0.1", b"Content-Type: application/json", b"Connection: close"]
    head = b"POST " + path.encode() + b" HTTP/1.1\r\n"
    if kind == 0:  # truncated body, Content-Length promises more
        cut = rng.randrange(len(body)) if body else 0
        return head + b"\r\n".join(hdrs) + b"\r\nContent-Length: %d\r\n\r\n" % cl + body[:cut], True, False
    if kind == 1:  # truncated body with a matching Content-Length
        body = body[:rng.randrange(len(body) + 1)]
        cl = len(body)
    elif kind == 2:
        junk = bytes(rng.randrange(256) for _ in range(40)).replace(b"\r", b"").replace(b"\n", b"")
        hdrs.append(b"X-Garbage " + junk)
    elif kind == 3:
        size = rng.choice([1000, 70000])
        may_wait = size > 8192  # the server may answer 431 and close before reading it all
        hdrs.append(b"X-Big: " + b"a" * size)
    elif kind == 4:
        return rng.choice([
            (b"GARBAGE\r\n\r\n", False, False), (b"\r\n\r\n", True, False), (b"GET\r\n\r\n", False, False),
            (b"GET /health\r\n\r\n", False, False), (b"GET / HTTP/9.9\r\n\r\n", False, 505),
            (b"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n", False, False),
            (b"POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n", False, False),
            (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", False, False),
            (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}", True, False),
            (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", False, 501),
            (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", False, 501),
            (b"\x00\x01\x02\x03\r\n\r\n", False, False),
            (b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n", True, False),
            (b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 2000 + b"\r\n", True, False),
            (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", False, False),
            (b"G\xffT /health HTTP/1.1\r\n\r\n", False, False),
            (b"post /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", False, False),
            (b"POST /v1/completions?x=%zz HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", False, False),
            (b"POST /v1/../v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", False, False),
            (b"POST /v1/completions HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", False, False),
            (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}GARBAGE AFTER\r\n\r\n", False, False),
            (b"GET /health HTTP/1.1\r\nHost x\r\n\r\n", False, False),
            (bytes(rng.randrange(256) for _ in range(200)) + b"\r\n\r\n", True, False),
        ])
    elif kind == 5:
        hdrs = [h for h in hdrs if not h.startswith(b"Content-Type")]
        hdrs.append(rng.choice([b"Content-Type: text/plain", b"Content-Type: application/json; charset=latin-1",
                                b"Content-Type: \xff"]))
    elif kind == 6:  # no Content-Length on a POST with a body
        return head + b"\r\n".join(hdrs) + b"\r\n\r\n" + body, True, False
    elif kind == 7:  # random bytes as the body
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        cl = len(body)
    elif kind == 8:  # lowercase / odd spacing in headers
        hdrs = [b"host:127.0.0.1", b"content-type:   application/json  ", b"connection: close"]
    return head + b"\r\n".join(hdrs) + b"\r\nContent-Length: %d\r\n\r\n" % cl + body, may_wait, False


def test_fuzz_malformed_requests(serve_factory):
    srv = serve_factory("--ctx", "256")
    rng = random.Random(20240611)
    failures = []
    n_cases = 300
    for i in range(n_cases):
        path, base = rng.choice(BASES)
        body = mutate(rng, path, base) if rng.random() < 0.9 else json.dumps(base).encode()
        data, may_close, ok5xx = http_request(path, body, rng)
        try:
            buf = servelib.raw_exchange(srv.host, srv.port, data, timeout=60, half_close=may_close)
        except (ConnectionError, socket.timeout, OSError) as e:
            buf = None
            if not srv.alive():
                failures.append((i, data[:300], f"server died: {e}"))
                break
            if not may_close:
                failures.append((i, data[:300], f"socket error {e!r}"))
            continue
        if not srv.alive():
            failures.append((i, data[:300], "server died"))
            break
        status = servelib.parse_status(buf)
        if status is None:
            if not (may_close and buf == b""):
                failures.append((i, data[:300], f"no valid HTTP response: {buf[:200]!r}"))
            continue
        if not (200 <= status < 500 or status == ok5xx):
            failures.append((i, data[:300], f"status {status}: {buf[:300]!r}"))
            continue
        if status >= 400:
            head, _, payload = buf.partition(b"\r\n\r\n")
            m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
            if m:  # a pipelined second request may have been answered too
                payload = payload[:int(m.group(1))]
            if b"application/json" in head.lower():
                try:
                    check_error_shape(payload)
                except AssertionError as e:
                    failures.append((i, data[:300], f"bad error shape: {e}"))
    assert srv.alive(), f"server died; stderr:\n{srv.tail()}"
    assert get(srv.url, "/health").status == 200
    r = post(srv.url, CHAT, chat_body("Hi", 3))
    assert r.status == 200, r
    m = servelib.wait_idle(srv.url, 10)
    assert m["ouro_kv_blocks_used"] == 0 and m["ouro_requests_running"] == 0, m.text
    assert not failures, f"{len(failures)} of {n_cases} fuzz cases failed:\n" + \
        "\n".join(f"#{i}: {why}\n   request: {d!r}" for i, d, why in failures[:20])


@pytest.mark.parametrize("flags,needle", [
    (["--port", "70000"], "--port"),
    (["--max-batch", "0"], "--max-batch"),
    (["--kv-blocks", "8", "--kv-mem", "64"], "exclude each other"),
    (["--kv-blocks", "10000000"], "KV pool"),
    (["--kv-mem", "abc"], "--kv-mem"),
    (["--block-size", "-1"], "--block-size"),
    (["--frobnicate"], "--frobnicate"),
])
def test_bad_serve_flags_exit_2_with_a_message(ouro_bin, model_path, flags, needle):
    """Bad launch flags end `ouro serve` at once with exit 2 and one message naming the problem
    (a KV pool larger than the machine's memory is refused before it is touched)."""
    p = subprocess.run([str(ouro_bin), "serve", "--model", str(model_path), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (flags, p.returncode, p.stderr)
    assert needle in p.stderr and p.stderr.startswith("ouro: "), (flags, p.stderr)
