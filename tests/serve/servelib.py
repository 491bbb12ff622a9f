"""Helpers for the `ouro serve` tests: start/stop a server process, raw HTTP, SSE, Prometheus metrics,
and the one-stream CLI reference (`ouro generate --temp 0 --json`).

Nothing here uses the server's code: requests go through http.client / sockets / curl / the
official `openai` package, metrics are parsed by `prometheus_client`'s parser (plus a strict
line-by-line check of the exposition format), and greedy references come from `ouro generate`.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import openai
from prometheus_client.parser import text_string_to_metric_families

from ouro_testlib import run_ouro

LISTEN_RE = re.compile(r"^ouro serve: listening on (http://(\S+):(\d+))\s*$")
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
THREADS = 2


class ServerError(AssertionError):
    pass


class Server:
    """One `ouro serve --port 0` process. stderr is collected by a reader thread (so the pipe never
    fills); the base URL is parsed from the `listening on` line."""

    def __init__(self, ouro_bin, model_path, *flags, start_timeout=120, threads=THREADS):
        self.argv = [str(ouro_bin), "serve", "--model", str(model_path), "--port", "0", "-t", str(threads),
                     *map(str, flags)]
        env = {k: v for k, v in os.environ.items() if k != "OURO_API_KEY"}  # only --api-key sets a key
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self._lines = []
        self._out = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.url = None
        self.host = None
        self.port = None
        self.returncode = None
        self._t_err = threading.Thread(target=self._read_stderr, daemon=True)
        self._t_out = threading.Thread(target=self._read_stdout, daemon=True)
        self._t_err.start()
        self._t_out.start()
        deadline = time.monotonic() + start_timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._t_err.join(5)
                raise ServerError(f"ouro serve exited {self.proc.returncode} before listening: {self.argv}\n"
                                  f"stderr:\n{self.stderr}")
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(f"ouro serve printed no 'listening on' line within {start_timeout}s: "
                                  f"{self.argv}\nstderr:\n{self.stderr}")

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lock:
                self._lines.append(line)
            m = LISTEN_RE.match(line)
            if m and not self._ready.is_set():
                self.url, self.host, self.port = m.group(1), m.group(2), int(m.group(3))
                self._ready.set()

    def _read_stdout(self):
        for raw in self.proc.stdout:
            with self._lock:
                self._out.append(raw.decode("utf-8", "replace"))

    @property
    def stderr(self):
        with self._lock:
            return "\n".join(self._lines)

    @property
    def stderr_lines(self):
        with self._lock:
            return list(self._lines)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def send_signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=30, sig=signal.SIGTERM):
        """SIGTERM, wait up to `timeout` s; returns the exit code (kills and raises on a hang)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise ServerError(f"ouro serve did not exit within {timeout}s of {signal.Signals(sig).name}\n"
                                  f"stderr:\n{self.tail()}")
        self._t_err.join(5)
        self.returncode = self.proc.returncode
        return self.returncode

    def wait(self, timeout=30):
        """Waits for an exit already asked for (no signal sent); returns the exit code."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ServerError(f"ouro serve did not exit within {timeout}s\nstderr:\n{self.tail()}")
        self._t_err.join(5)
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def tail(self, n=40):
        return "\n".join(self.stderr_lines[-n:])

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise ServerError("no VmRSS")

    def client(self, **kw):
        return make_client(self.url, **kw)


def make_client(url, api_key="unused", timeout=300, **kw):
    return openai.OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0, timeout=timeout, **kw)


# ---------------------------------------------------------------------------------------------- HTTP

class Response:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.reason} {self.body[:400]!r}>"


def _hostport(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port


def request(url, method, path, body=None, headers=None, timeout=300):
    """One request on a fresh connection. `body`: bytes, str, or a JSON-able object."""
    host, port = _hostport(url)
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    hdrs.update(headers or {})
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.reason, r.getheaders(), data)
    finally:
        conn.close()


def post(url, path, body, headers=None, timeout=300):
    return request(url, "POST", path, body, headers, timeout)


def get(url, path, headers=None, timeout=60):
    return request(url, "GET", path, None, headers, timeout)


def chat_body(content, max_tokens=16, **kw):
    b = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}
    b.update(kw)
    return b


def raw_exchange(host, port, data, timeout=60, half_close=False):
    """Sends raw bytes on a fresh socket and reads until the server closes or a complete response
    (headers + Content-Length body) has arrived. Returns the raw bytes received."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        try:
            if data:
                s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (and closed) before reading everything: read what it sent
        buf = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
            if _complete_response(buf):
                break
        return buf
    finally:
        s.close()


def _complete_response(buf):
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    head = buf[:end].decode("latin-1")
    m = re.search(r"(?im)^content-length:\s*(\d+)\s*$", head)
    if m:
        return len(buf) - end - 4 >= int(m.group(1))
    if re.search(r"(?im)^transfer-encoding:.*chunked", head):
        return buf.endswith(b"0\r\n\r\n")
    return False  # close-delimited: wait for EOF


STATUS_LINE_RE = re.compile(rb"^HTTP/1\.[01] (\d{3}) [^\r\n]*\r\n")


def parse_status(buf):
    m = STATUS_LINE_RE.match(buf)
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------------------------- SSE

class Stream:
    """A streaming request read event by event (raw http.client; the SSE framing is checked here)."""

    def __init__(self, url, path, body, headers=None, timeout=300):
        host, port = _hostport(url)
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        self.conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
        self.sock = self.conn.sock  # http.client drops it from conn once a Connection: close response arrives
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.done = False
        self.events = []

    def next_event(self):
        """Returns the next `data:` payload (parsed JSON), the string "[DONE]", or None at EOF."""
        lines = []
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode("utf-8")
            if line in ("\n", "\r\n"):
                if lines:
                    break
                continue
            lines.append(line.rstrip("\r\n"))
        data = [ln[len("data:"):].lstrip(" ") for ln in lines if ln.startswith("data:")]
        assert data, f"SSE event without data: {lines}"
        payload = "\n".join(data)
        if payload == "[DONE]":
            self.done = True
            self.events.append(payload)
            return payload
        ev = json.loads(payload)
        self.events.append(ev)
        return ev

    def read_all(self):
        while True:
            ev = self.next_event()
            if ev is None or ev == "[DONE]":
                return self.events

    def close(self):
        """Really closes the connection (the response's file object keeps the fd open otherwise)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.resp.close()
        self.conn.close()
        self.sock.close()


def stream_text(events):
    out = []
    for ev in events:
        if isinstance(ev, dict):
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                if d.get("content"):
                    out.append(d["content"])
                if ch.get("text"):
                    out.append(ch["text"])
    return "".join(out)


def stream_finish(events):
    fins = [ch.get("finish_reason") for ev in events if isinstance(ev, dict)
            for ch in ev.get("choices") or [] if ch.get("finish_reason")]
    return fins


# ------------------------------------------------------------------------------------------- metrics

_SAMPLE_RE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(\{(?:\s*[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"\s*,?)*\s*\})?'
    r' +([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|inf|NaN|Nan|nan))( +-?[0-9]+)?$')


def parse_metrics(text):
    """Parses Prometheus text exposition. Returns (types: {family: type}, samples: {(name, labels): value}).
    Every line must be a comment or a well-formed sample (checked with a regex), and the whole text
    must parse with prometheus_client's parser (the independent oracle)."""
    for i, line in enumerate(text.split("\n")):
        if not line or line.startswith("#"):
            continue
        assert _SAMPLE_RE.match(line), f"/metrics line {i + 1} is not a Prometheus sample: {line!r}"
    types = {}
    samples = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
    return types, samples


class Metrics:
    def __init__(self, text):
        self.text = text
        self.types, self.samples = parse_metrics(text)

    def get(self, name, default=None, **labels):
        return self.samples.get((name, tuple(sorted(labels.items()))), default)

    def __getitem__(self, name):
        v = self.get(name)
        if v is None:
            raise KeyError(f"metric {name} not in /metrics:\n{self.text}")
        return v

    def total_requests(self, status):
        return self.get("ouro_requests_total", 0.0, status=str(status))

    def names(self):
        return {n for n, _ in self.samples}


def metrics(url):
    r = get(url, "/metrics")
    assert r.status == 200, r
    return Metrics(r.body.decode())


def wait_metric(url, pred, timeout=10, interval=0.05):
    """Polls /metrics until pred(Metrics) is true; returns the last Metrics (the caller asserts)."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(url)
        if pred(m) or time.monotonic() > deadline:
            return m
        time.sleep(interval)


def wait_idle(url, timeout=10):
    m = wait_metric(url, lambda m: m["ouro_requests_running"] == 0 and m["ouro_requests_waiting"] == 0
                    and m["ouro_kv_blocks_used"] == 0, timeout)
    return m


# ----------------------------------------------------------------------------------------- reference

_ref_cache = {}
_ref_lock = threading.Lock()


def reference(ouro_bin, model_path, prompt, n, chat=True, system=None):
    """Greedy output of the one-stream CLI: `ouro generate [--chat] -p PROMPT --temp 0 -n N --json`."""
    key = (str(model_path), prompt, n, chat, system)
    with _ref_lock:
        if key in _ref_cache:
            return _ref_cache[key]
    args = ["generate", "-m", model_path, "-p", prompt, "--temp", "0", "-n", n, "--json", "-t", THREADS]
    if chat:
        args.append("--chat")
    if system is not None:
        args += ["--system", system]
    r = json.loads(run_ouro(ouro_bin, *args).stdout)
    with _ref_lock:
        _ref_cache[key] = r
    return r


def tokenize(ouro_bin, model_path, text):
    return json.loads(run_ouro(ouro_bin, "tokenize", "-m", model_path, text, "--json").stdout)["ids"]


def check_error_shape(body, status=None):
    """The contract's error object: {"error": {"message": str, "type": str, "param": str|null, "code": str|null}}."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError:
            raise AssertionError(f"error body is not JSON: {body[:300]!r}")
    assert isinstance(body, dict) and set(body) == {"error"}, f"not an error object: {body}"
    e = body["error"]
    assert isinstance(e, dict), body
    assert isinstance(e.get("message"), str) and e["message"], body
    assert isinstance(e.get("type"), str) and e["type"], body
    assert "param" in e and (e["param"] is None or isinstance(e["param"], str)), body
    assert "code" in e and (e["code"] is None or isinstance(e["code"], str)), body
    return e


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
