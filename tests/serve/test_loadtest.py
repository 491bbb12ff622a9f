"""`ouro loadtest` and its HTTP client (src/serve/http_client.*, src/cli/cmd_loadtest.cpp).

The oracle is FakeOpenAI below: an independent streaming server written here with Python's
http.server, whose delays, token counts, framing (chunked or close-delimited), SSE quirks and
failures are known, and which records every request it receives. One test at the end runs
loadtest against the real `ouro serve` (the `server` fixture of tests/serve/conftest.py).

Expectations where the brief leaves room:
  * `requests` == completed + the sum of `errors` (every scheduled request is accounted for);
  * error kinds: http_<status>, connect, timeout, closed (before any response), protocol (bad
    HTTP head), malformed_stream (bad framing, bad JSON, or no `data: [DONE]` after the headers);
  * output tokens: usage.completion_tokens when the stream has it, else the content events;
  * goodput is null without SLO flags.
"""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ouro_testlib import run_ouro

LAT_KEYS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")


# ------------------------------------------------------------------------------------ the fake server

class FakeOpenAI:
    """A fake OpenAI streaming endpoint on 127.0.0.1:<free port>.

    framing:      "chunked" (Transfer-Encoding: chunked) or "close" (Connection: close, no length)
    first_delay:  seconds between the response headers and the first content event
    token_delay:  seconds between content events
    tokens_per_event: tokens the fake claims per content event (usage counts tokens, so the two
                  counts differ when this is > 1)
    usage:        send the usage chunk when the request asks for it
    quirks:       CRLF line endings, `data:` without a space, comments, events split across writes,
                  chunk extensions
    fail:         {arrival index: "500" | "mid_close" | "bad_json" | "no_response" | "hang" | "garbage_head"}
    models:       the /v1/models ids (None: 404)
    """

    def __init__(self, framing="chunked", first_delay=0.0, token_delay=0.0, tokens_per_event=1, usage=True,
                 quirks=False, fail=None, models=("fake-model",), hang_s=3.0):
        self.framing, self.first_delay, self.token_delay = framing, first_delay, token_delay
        self.tokens_per_event, self.usage, self.quirks = tokens_per_event, usage, quirks
        self.fail, self.models, self.hang_s = dict(fail or {}), models, hang_s
        self.lock = threading.Lock()
        self.bodies = []      # JSON bodies in arrival order
        self.paths = []
        self.headers = []
        self.active = 0
        self.max_active = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path == "/v1/models" and fake.models is not None:
                    body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})
                    code = 200
                else:
                    body, code = json.dumps({"error": {"message": "not found"}}), 404
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                fake._post(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- one streamed request
    def _post(self, h):
        raw = h.rfile.read(int(h.headers.get("Content-Length", 0)))
        body = json.loads(raw)
        with self.lock:
            idx = len(self.bodies)
            self.bodies.append(body)
            self.paths.append(h.path)
            self.headers.append(dict(h.headers))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        ended = []

        def end():
            # A request stops counting as active before the fake writes its last event: once the
            # client has read it, it may start the next request (closed loop) before this thread
            # returns, and counting past that point would see one request too many.
            with self.lock:
                if not ended:
                    ended.append(True)
                    self.active -= 1
        try:
            self._respond(h, body, self.fail.get(idx), end)
        finally:
            end()

    def _respond(self, h, body, failure, end):
        chat = h.path.endswith("/chat/completions")
        chunked = self.framing == "chunked"
        if failure == "no_response":
            h.close_connection = True
            return
        if failure == "garbage_head":
            h.wfile.write(b"HTTX/9 hello\r\n\r\n")
            h.close_connection = True
            return
        if failure == "hang":
            time.sleep(self.hang_s)
            h.close_connection = True
            return
        if failure == "500":
            data = json.dumps({"error": {"message": "fake overload", "type": "server_error"}}).encode()
            h.send_response(500)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        if chunked:
            h.send_header("Transfer-Encoding", "chunked")
        else:
            h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True

        def write(data):
            if chunked:
                ext = b";x=1" if self.quirks else b""
                h.wfile.write(b"%x%s\r\n%s\r\n" % (len(data), ext, data))
            else:
                h.wfile.write(data)
            h.wfile.flush()

        nl = "\r\n" if self.quirks else "\n"

        def event(obj):
            payload = obj if isinstance(obj, str) else json.dumps(obj)
            text = (f"data:{payload}" if self.quirks else f"data: {payload}") + nl + nl
            data = text.encode()
            if self.quirks:  # one event in two writes, split inside the JSON
                write(b":keep-alive" + nl.encode() + nl.encode())
                write(data[:len(data) // 2])
                write(data[len(data) // 2:])
            else:
                write(data)

        def chunk(text, finish=None):
            if chat:
                return {"object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
            return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}

        max_tokens = int(body.get("max_tokens", 16))
        n_events = max(1, max_tokens // self.tokens_per_event)
        if chat:  # the role chunk carries no content: it must not count as the first token
            event({"object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        time.sleep(self.first_delay)
        for i in range(n_events):
            if i:
                time.sleep(self.token_delay)
            if failure == "mid_close" and i == n_events // 2:
                return  # connection closes: no last chunk, no [DONE]
            if failure == "bad_json" and i == 1:
                event("{not json")
                continue
            event(chunk(f" tok{i}"))
        end()
        event(chunk("", finish="length"))
        if self.usage and (body.get("stream_options") or {}).get("include_usage"):
            event({"object": "chunk", "choices": [],
                   "usage": {"prompt_tokens": 7, "completion_tokens": max_tokens, "total_tokens": 7 + max_tokens}})
        event("[DONE]")
        if chunked:
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()


@pytest.fixture
def fake_factory():
    fakes = []

    def make(**kw):
        f = FakeOpenAI(**kw)
        fakes.append(f)
        return f

    yield make
    for f in fakes:
        f.close()


# ------------------------------------------------------------------------------------------- helpers

def loadtest(ouro_bin, url, *args, timeout=120):
    """Runs `ouro loadtest --url URL ... --json`; returns the parsed JSON (exit 0 required)."""
    proc = run_ouro(ouro_bin, "loadtest", "--url", url, *args, "--json", check=False, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    r = json.loads(lines[0])
    check_shape(r)
    return r


def check_shape(r):
    for k in ("requests", "completed", "errors", "duration_s", "request_throughput", "output_tok_s",
              "total_tok_s", "goodput_req_s", "slo"):
        assert k in r, (k, r)
    for k in LAT_KEYS:
        assert set(r[k]) >= {"p50", "p90", "p99", "mean"}, (k, r[k])
        d = r[k]
        if d["p50"] is not None:
            assert 0 <= d["p50"] <= d["p90"] <= d["p99"], (k, d)
    assert r["requests"] == r["completed"] + sum(r["errors"].values()), r


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ----------------------------------------------------------------------------- counts and timing

@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_counts_and_ttft_lower_bound(ouro_bin, fake_factory, framing):
    fake = fake_factory(framing=framing, first_delay=0.15, token_delay=0.02)
    r = loadtest(ouro_bin, fake.url, "--concurrency", 2, "--requests", 6, "--prompt-len", 10, "--gen-len", 5)
    assert r["requests"] == 6 and r["completed"] == 6 and r["errors"] == {}, r
    assert len(fake.bodies) == 6
    # usage says 5 completion tokens per request.
    assert r["output_tok_s"] * r["duration_s"] == pytest.approx(30, rel=1e-6)
    assert r["total_tok_s"] * r["duration_s"] == pytest.approx(30 + 6 * 7, rel=1e-6)
    assert r["request_throughput"] * r["duration_s"] == pytest.approx(6, rel=1e-6)
    # TTFT includes the fake's first-token delay; e2e covers it and the four gaps after it.
    assert r["ttft_s"]["p50"] >= 0.15 and min(r["ttft_s"]["p50"], r["ttft_s"]["mean"]) >= 0.15
    assert r["e2e_s"]["p50"] >= 0.15 + 4 * 0.02
    # TPOT = (e2e - ttft) / 4 is at least the token delay (scheduling noise only adds).
    assert r["tpot_s"]["mean"] >= 0.02 * 0.9
    assert r["itl_s"]["mean"] >= 0.02 * 0.8
    assert r["goodput_req_s"] is None and r["slo"] == {"ttft_s": None, "tpot_s": None}


def test_request_bodies(ouro_bin, fake_factory):
    fake = fake_factory()
    loadtest(ouro_bin, fake.url, "--requests", 5, "--prompt-len", 20, "--gen-len", 3, "--seed", 7)
    prompts = []
    for b in fake.bodies:
        assert b["stream"] is True and b["stream_options"] == {"include_usage": True}, b
        assert b["temperature"] == 0 and b["max_tokens"] == 3, b
        assert b["model"] == "fake-model", b  # discovered through GET /v1/models (Content-Length body)
        assert "messages" not in b
        assert len(b["prompt"].split()) == 20, b["prompt"]
        prompts.append(b["prompt"])
    assert all(p == "/v1/completions" for p in fake.paths), fake.paths
    # Different per request, from the first word on (no shared prefix for a cache to hit).
    assert len({p.split()[0] + p.split()[1] + p.split()[2] for p in prompts}) == 5, prompts
    assert fake.headers[0].get("Content-Type") == "application/json"
    # Same seed, same prompts; another seed, other prompts.
    fake2 = fake_factory()
    loadtest(ouro_bin, fake2.url, "--requests", 5, "--prompt-len", 20, "--gen-len", 3, "--seed", 7)
    assert sorted(b["prompt"] for b in fake2.bodies) == sorted(prompts)
    fake3 = fake_factory()
    loadtest(ouro_bin, fake3.url, "--requests", 5, "--prompt-len", 20, "--gen-len", 3, "--seed", 8)
    assert not set(b["prompt"] for b in fake3.bodies) & set(prompts)


def test_chat_endpoint_model_flag_api_key_and_prefix(ouro_bin, fake_factory):
    fake = fake_factory(first_delay=0.1)
    # The URL's prefix already ends in /v1: not doubled.
    r = loadtest(ouro_bin, fake.url + "/v1/", "--endpoint", "chat", "--requests", 3, "--gen-len", 4,
                 "--model", "mine", "--api-key", "sekret")
    assert r["completed"] == 3, r
    assert all(p == "/v1/chat/completions" for p in fake.paths), fake.paths
    for b, hdr in zip(fake.bodies, fake.headers):
        assert b["model"] == "mine"
        assert len(b["messages"]) == 1 and b["messages"][0]["role"] == "user", b
        assert isinstance(b["messages"][0]["content"], str) and "prompt" not in b
        assert hdr.get("Authorization") == "Bearer sekret"
    # The role chunk (empty content) arrives at once: TTFT waits for the first real content.
    assert r["ttft_s"]["p50"] >= 0.1, r


def test_no_models_endpoint_means_no_model_field(ouro_bin, fake_factory):
    fake = fake_factory(models=None)
    r = loadtest(ouro_bin, fake.url, "--requests", 2, "--gen-len", 2)
    assert r["completed"] == 2
    assert all("model" not in b for b in fake.bodies), fake.bodies


@pytest.mark.parametrize("usage", [True, False])
def test_output_tokens_from_usage_else_content_events(ouro_bin, fake_factory, usage):
    # Two tokens per content event: usage says 8 per request, the stream has 4 content events.
    fake = fake_factory(tokens_per_event=2, usage=usage)
    r = loadtest(ouro_bin, fake.url, "--requests", 3, "--gen-len", 8)
    assert r["completed"] == 3, r
    expected = 3 * (8 if usage else 4)
    assert r["output_tok_s"] * r["duration_s"] == pytest.approx(expected, rel=1e-6)
    if not usage:  # no prompt token counts without usage
        assert r["total_tok_s"] == pytest.approx(r["output_tok_s"])


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_sse_and_chunk_quirks(ouro_bin, fake_factory, framing):
    # CRLF lines, `data:` without a space, comments, events split across writes, chunk extensions.
    fake = fake_factory(framing=framing, quirks=True, usage=False, token_delay=0.005)
    r = loadtest(ouro_bin, fake.url, "--requests", 4, "--concurrency", 2, "--gen-len", 6)
    assert r["completed"] == 4 and r["errors"] == {}, r
    assert r["output_tok_s"] * r["duration_s"] == pytest.approx(24, rel=1e-6)


def test_closed_loop_concurrency_is_respected(ouro_bin, fake_factory):
    fake = fake_factory(first_delay=0.3)
    r = loadtest(ouro_bin, fake.url, "--concurrency", 4, "--requests", 8, "--gen-len", 2)
    assert r["completed"] == 8, r
    assert fake.max_active == 4
    assert r["duration_s"] >= 2 * 0.3  # two waves of four
    fake1 = fake_factory(first_delay=0.05)
    loadtest(ouro_bin, fake1.url, "--concurrency", 1, "--requests", 4, "--gen-len", 2)
    assert fake1.max_active == 1


def test_open_loop_does_not_wait_for_responses(ouro_bin, fake_factory):
    # 40 req/s, each 0.5 s long: about 20 in flight at the peak (a closed loop of 1 would have 1).
    fake = fake_factory(first_delay=0.5)
    r = loadtest(ouro_bin, fake.url, "--rate", 40, "--requests", 20, "--gen-len", 2, "--seed", 3)
    assert r["completed"] == 20 and r["errors"] == {}, r
    assert fake.max_active >= 4, fake.max_active
    assert r["rate"] == 40 and r["mode"] == "open"
    # Arrivals span some time: the run is longer than one request but far shorter than 20 in a row.
    assert 0.5 <= r["duration_s"] < 20 * 0.5


def test_goodput_against_slos(ouro_bin, fake_factory):
    fake = fake_factory(first_delay=0.2, token_delay=0.01)
    common = ("--requests", 4, "--concurrency", 4, "--gen-len", 4)
    r = loadtest(ouro_bin, fake.url, *common, "--slo-ttft", 0.05)
    assert r["goodput_req_s"] == 0 and r["slo"]["ttft_s"] == 0.05, r
    r = loadtest(ouro_bin, fake.url, *common, "--slo-ttft", 30, "--slo-tpot", 30)
    assert r["goodput_req_s"] == pytest.approx(r["request_throughput"]) and r["goodput_req_s"] > 0, r
    r = loadtest(ouro_bin, fake.url, *common, "--slo-tpot", 0.001)
    assert r["goodput_req_s"] == 0, r


def test_dataset(ouro_bin, fake_factory, tmp_path):
    ds = tmp_path / "ds.jsonl"
    ds.write_text(json.dumps({"prompt": "first prompt", "max_tokens": 3}) + "\n\n"
                  + json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                                "max_tokens": 5}) + "\n"
                  + json.dumps({"prompt": "third"}) + "\n")
    fake = fake_factory()
    r = loadtest(ouro_bin, fake.url, "--dataset", ds, "--endpoint", "chat", "--gen-len", 2)
    assert r["requests"] == 3 and r["completed"] == 3, r  # default: one request per record
    assert r["output_tok_s"] * r["duration_s"] == pytest.approx(3 + 5 + 2, rel=1e-6)
    b = fake.bodies
    assert b[0]["messages"] == [{"role": "user", "content": "first prompt"}] and b[0]["max_tokens"] == 3
    assert b[1]["messages"][0] == {"role": "system", "content": "s"} and b[1]["max_tokens"] == 5
    assert b[2]["max_tokens"] == 2  # --gen-len is the default
    # --requests larger than the dataset cycles through it.
    fake2 = fake_factory()
    r = loadtest(ouro_bin, fake2.url, "--dataset", ds, "--endpoint", "chat", "--requests", 7)
    assert r["completed"] == 7
    assert [x["max_tokens"] for x in fake2.bodies] == [3, 5, 128, 3, 5, 128, 3]


def test_human_readable_table(ouro_bin, fake_factory):
    fake = fake_factory(fail={1: "500"})
    proc = run_ouro(ouro_bin, "loadtest", "--url", fake.url, "--requests", 3, "--gen-len", 3, "--slo-ttft", 10)
    out = proc.stdout
    for word in ("3 sent, 2 completed, 1 failed", "http_500", "fake overload", "ttft", "tpot", "itl", "e2e",
                 "goodput", "p99"):
        assert word in out, (word, out)


# ----------------------------------------------------------------------------------------- errors

def test_http_errors_are_counted(ouro_bin, fake_factory):
    fake = fake_factory(fail={0: "500", 3: "500", 6: "500"})
    r = loadtest(ouro_bin, fake.url, "--requests", 9, "--gen-len", 3)
    assert r["completed"] == 6 and r["errors"] == {"http_500": 3}, r
    assert "fake overload" in r["error_examples"]["http_500"]
    # Latencies cover the completed requests only; tokens too.
    assert r["output_tok_s"] * r["duration_s"] == pytest.approx(18, rel=1e-6)


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_close_mid_stream(ouro_bin, fake_factory, framing):
    fake = fake_factory(framing=framing, fail={1: "mid_close", 2: "mid_close"})
    r = loadtest(ouro_bin, fake.url, "--requests", 4, "--gen-len", 6)
    assert r["completed"] == 2 and r["errors"] == {"malformed_stream": 2}, r


def test_bad_json_event_and_no_response_and_bad_head(ouro_bin, fake_factory):
    fake = fake_factory(fail={0: "bad_json", 1: "no_response", 2: "garbage_head"})
    r = loadtest(ouro_bin, fake.url, "--requests", 5, "--gen-len", 4)
    assert r["completed"] == 2, r
    assert r["errors"] == {"malformed_stream": 1, "closed": 1, "protocol": 1}, r


def test_timeout(ouro_bin, fake_factory):
    fake = fake_factory(fail={0: "hang"}, hang_s=3)
    t0 = time.monotonic()
    r = loadtest(ouro_bin, fake.url, "--requests", 2, "--gen-len", 2, "--timeout", 0.5)
    assert time.monotonic() - t0 < 2.5
    assert r["completed"] == 1 and r["errors"] == {"timeout": 1}, r
    assert r["e2e_s"]["p50"] < 0.5


class GarbageServer:
    """A raw-socket server whose i-th response is a seeded mutation of a valid streamed response
    (truncated, bytes flipped or inserted, absurd chunk sizes and lengths, oversized headers);
    every fifth response is left intact."""

    def __init__(self, seed=1234):
        self.seed = seed
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.count = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @staticmethod
    def valid(chunked):
        events = b"".join(b"data: %s\n\n" % json.dumps({"choices": [{"index": 0, "text": f" t{i}"}]}).encode()
                          for i in range(4)) + b"data: [DONE]\n\n"
        if chunked:
            body = b"".join(b"%x\r\n%s\r\n" % (len(events[i:i + 50]), events[i:i + 50])
                            for i in range(0, len(events), 50)) + b"0\r\n\r\n"
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + events

    def response(self, i):
        import random
        rng = random.Random(self.seed * 1000 + i)
        data = bytearray(self.valid(chunked=i % 2 == 0))
        if i % 5 == 0:
            return bytes(data)
        op = rng.randrange(8)
        if op == 0:
            return bytes(data[:rng.randrange(len(data))])
        if op == 1:
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            return bytes(data)
        if op == 2:
            pos = rng.randrange(len(data))
            return bytes(data[:pos]) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + bytes(data[pos:])
        if op == 3:
            return bytes(data).replace(b"\r\n\r\n", b"\r\n\r\nffffffffffffffffffff\r\n", 1)
        if op == 4:
            return bytes(data).replace(b"Connection", b"Content-Length: 99999999999999999999999\r\nX", 1)
        if op == 5:
            return b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n"
        if op == 6:
            return bytes(data).replace(b"200 OK", rng.choice([b"2000 OK", b"OK", b"-12 x", b"200"]), 1)
        return bytes(data).replace(b"data: ", b"data: \xff\xfe", 2)

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            i = self.count
            self.count += 1
            try:
                conn.settimeout(5)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                conn.sendall(self.response(i))
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            finally:
                conn.close()

    def close(self):
        self.sock.close()


def test_garbage_responses_never_crash(ouro_bin):
    srv = GarbageServer()
    try:
        proc = run_ouro(ouro_bin, "loadtest", "--url", srv.url, "--requests", 60, "--gen-len", 4, "--model", "m",
                        "--timeout", 10, "--json", check=False, timeout=120)
    finally:
        srv.close()
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    r = json.loads(proc.stdout)
    check_shape(r)
    # 12 responses were intact; most of the others are errors of some kind.
    assert r["completed"] >= 12 and sum(r["errors"].values()) >= 20, r
    assert "timeout" not in r["errors"], r


def test_unreachable_server_exits_1(ouro_bin):
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_ouro(ouro_bin, "loadtest", "--url", url, "--requests", 2, check=False, timeout=60)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.startswith("ouro: ") and "cannot reach" in proc.stderr and url in proc.stderr


@pytest.mark.parametrize("args, names", [
    (["--url", "http://127.0.0.1:9", "--concurrency", "2", "--rate", "3"], ["--concurrency", "--rate"]),
    (["--url", "http://127.0.0.1:9", "--concurrency", "abc"], ["--concurrency"]),
    (["--url", "http://127.0.0.1:9", "--concurrency", "0"], ["--concurrency"]),
    (["--url", "http://127.0.0.1:9", "--rate", "fast"], ["--rate"]),
    (["--url", "http://127.0.0.1:9", "--rate", "0"], ["--rate"]),
    (["--url", "http://127.0.0.1:9", "--requests", "-1"], ["--requests"]),
    (["--url", "http://127.0.0.1:9", "--timeout", "x"], ["--timeout"]),
    (["--url", "http://127.0.0.1:9", "--slo-ttft", "1ms"], ["--slo-ttft"]),
    (["--url", "http://127.0.0.1:9", "--endpoint", "embeddings"], ["--endpoint"]),
    (["--url", "http://127.0.0.1:9", "--dataset", "/nonexistent/ds.jsonl"], ["--dataset"]),
    (["--url", "http://127.0.0.1:9", "--dataset", "x", "--prompt-len", "3"], ["--dataset", "--prompt-len"]),
    (["--url", "http://127.0.0.1:9", "--bogus"], ["--bogus"]),
    (["--concurrency", "2"], ["--url"]),
    (["--url", "https://127.0.0.1:9"], ["--url", "https"]),
    (["--url", "127.0.0.1:9"], ["--url"]),
    (["--url", "http://127.0.0.1:99999"], ["--url", "port"]),
    (["--url", "http://:80"], ["--url", "host"]),
    (["--url", "http://h:8/x?y=1"], ["--url"]),
    (["--url", "http://::1:80"], ["--url"]),
    (["--url"], ["--url"]),
])
def test_usage_errors_exit_2_and_name_the_flag(ouro_bin, args, names):
    proc = run_ouro(ouro_bin, "loadtest", *args, check=False, timeout=30)
    assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ouro: "), proc.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])


def test_bad_dataset_lines(ouro_bin, tmp_path):
    cases = {
        "notjson": ("{\"prompt\": \"a\"}\n{oops\n", "line 2"),
        "noprompt": ("{\"max_tokens\": 3}\n", "line 1"),
        "badmax": ("{\"prompt\": \"a\", \"max_tokens\": -4}\n", "max_tokens"),
        "msgs_on_completions": ("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}]}\n", "chat"),
        "empty": ("\n\n", "no records"),
    }
    for name, (text, word) in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text(text)
        proc = run_ouro(ouro_bin, "loadtest", "--url", "http://127.0.0.1:9", "--dataset", p, check=False)
        assert proc.returncode == 2, (name, proc.stderr)
        assert "--dataset" in proc.stderr and word in proc.stderr, (name, proc.stderr)


def test_help(ouro_bin):
    proc = run_ouro(ouro_bin, "loadtest", "--help")
    assert "--concurrency" in proc.stdout and "--rate" in proc.stdout and "--slo-ttft" in proc.stdout


# ------------------------------------------------------------------------------- the real server

def test_against_ouro_serve(ouro_bin, server_url):
    import servelib
    before = servelib.metrics(server_url)
    r = loadtest(ouro_bin, server_url, "--concurrency", 4, "--requests", 8, "--prompt-len", 32, "--gen-len", 8,
                 timeout=600)
    after = servelib.metrics(server_url)
    assert r["completed"] == 8 and r["errors"] == {}, r
    assert r["model"] == servelib.MODEL_ID  # discovered through GET /v1/models
    # The tokens loadtest counted are the ones the server says it generated (at most 8 each).
    out = round(r["output_tok_s"] * r["duration_s"])
    gen = after["ouro_generation_tokens_total"] - before["ouro_generation_tokens_total"]
    assert 8 <= out <= 64 and out == gen, (out, gen, r)
    # Eight generation requests reached the engine (ouro_requests_total also counts /v1/models, /metrics).
    done = after["ouro_e2e_request_latency_seconds_count"] - before["ouro_e2e_request_latency_seconds_count"]
    assert done == 8, done
    assert 0 < r["ttft_s"]["p50"] <= r["e2e_s"]["p50"]
