"""`ouro mcp`: the lab as a Model Context Protocol server on stdio (docs/agents.md).

One conversation with one server process exercises the handshake era (initialize, the
initialized notification, tools/list, ping), the stateless era (server/discover, a tools/call
without initialize in a second process), every tool with real results, the criteria rule
(refusals), a real experiment through lab_submit -> lab_status -> lab_result, its de-duplication
(an identical resubmission returns the stored record, force=true measures again and says so), and
malformed input (JSON-RPC errors while the server keeps answering). Every structuredContent is
validated against the tool's outputSchema, and every line on stdout must be a JSON-RPC message.

The server gets its own XDG_CACHE_HOME (jobs, traces), `--bin` (so experiments never build), and
`--ledger` pointing at a temporary copy of the repository's ledger: the repository's ledger and
criteria files are checked to be byte-identical afterwards.
"""
import hashlib
import json
import os
import queue
import random
import shutil
import subprocess
import threading
import time

import jsonschema
import pytest

from ouro_testlib import ROOT, isolated_cache_env

CRITERIA_DIR = ROOT / "experiments" / "criteria"
REPO_LEDGER = ROOT / "experiments" / "ledger.jsonl"

# A cheap kernel-level experiment judged by a criteria file people wrote (kernel-speedup): two
# identical configurations, so the verdict may be anything; what matters is how it travels.
KERNEL_SPEC = """
question = "MCP test: is rmsnorm as fast in two identical configurations?"
hypothesis = "Identical binaries differ only by noise."
level = "kernel"
repeats = 3
max_repeats = 3
criteria_file = "kernel-speedup"
[baseline]
revision = "worktree"
[candidate]
revision = "worktree"
[workload]
kernel = "rmsnorm"
kernel_args = ["--cols", "2048", "--tokens", "16"]
min_time_ms = 30
seeds = [1]
"""

TOOLS = {"probe", "bench", "trace_summarize", "trace_overlap", "trace_diff", "lab_plan", "lab_submit", "lab_status",
         "lab_result", "lab_log", "lab_show", "correctness_check"}


class Server:
    """An `ouro mcp` process spoken to line by line."""

    def __init__(self, ouro_bin, tmp_path, name="server"):
        self.env = isolated_cache_env(tmp_path / "cache")
        self.env.pop("OURO_FAULT", None)
        self.stderr = open(tmp_path / f"{name}.stderr", "w")
        self.proc = subprocess.Popen(
            [str(ouro_bin), "mcp", "--bin", str(ouro_bin), "--ledger", str(tmp_path / "ledger.jsonl"),
             "--quiet-wait", "1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=ROOT, env=self.env)
        self.lines = queue.Queue()
        self.stdout_lines = []
        self.next_id = 0
        self.schemas = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            self.stdout_lines.append(raw)
            self.lines.put(raw)
        self.lines.put(None)

    def send_raw(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg):
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def recv(self, timeout=150):
        raw = self.lines.get(timeout=timeout)
        assert raw is not None, "the server closed stdout"
        return json.loads(raw)

    def request(self, method, params=None, timeout=150):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        reply = self.recv(timeout)
        assert reply.get("id") == self.next_id, reply
        assert reply["jsonrpc"] == "2.0"
        return reply

    def call(self, name, arguments=None, expect_error=False, meta=None):
        params = {"name": name, "arguments": arguments if arguments is not None else {}}
        if meta:
            params["_meta"] = meta
        reply = self.request("tools/call", params)
        assert "result" in reply, reply
        res = reply["result"]
        assert res["content"] and res["content"][0]["type"] == "text" and res["content"][0]["text"]
        assert res["isError"] is expect_error, res["content"][0]["text"]
        if not expect_error:
            jsonschema.validate(res["structuredContent"], self.schemas[name])
        return res

    def rpc_error(self, raw_line: bytes, code, expect_id=None):
        self.send_raw(raw_line + b"\n")
        reply = self.recv()
        assert "error" in reply and reply["error"]["code"] == code, reply
        assert reply["id"] == expect_id
        return reply

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=30)
        self.stderr.close()
        return rc


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fresh(tmp_path):
    """The repository's ledger (copied) and criteria, with their hashes to compare afterwards."""
    shutil.copy(REPO_LEDGER, tmp_path / "ledger.jsonl")
    before = {p.name: sha(p) for p in CRITERIA_DIR.iterdir()}
    repo_ledger = sha(REPO_LEDGER)
    yield tmp_path
    assert {p.name: sha(p) for p in CRITERIA_DIR.iterdir()} == before, "a criteria file changed"
    assert sha(REPO_LEDGER) == repo_ledger, "the repository's ledger changed"


def wait_done(srv, job_id, limit=240):
    states = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        st = srv.call("lab_status", {"job_id": job_id})["structuredContent"]
        states.append(st["state"])
        if st["state"] != "running":
            return st, states
        time.sleep(0.5)
    pytest.fail(f"job {job_id} still running after {limit} s: {states[-3:]}")


def test_conversation(ouro_bin, model_path, fresh):
    tmp_path = fresh
    srv = Server(ouro_bin, tmp_path)
    try:
        # -- handshake era --------------------------------------------------------------------
        init = srv.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "pytest", "version": "1"}})["result"]
        assert init["protocolVersion"] == "2025-11-25"
        assert init["capabilities"]["tools"] == {"listChanged": False}
        assert init["serverInfo"]["name"] == "ouro" and init["instructions"]
        srv.send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # no answer: the next reply is ping's
        assert srv.request("ping")["result"] == {}
        older = srv.request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {}})["result"]
        assert older["protocolVersion"] == "2025-03-26"
        future = srv.request("initialize", {"protocolVersion": "2099-01-01", "capabilities": {}})["result"]
        assert future["protocolVersion"] == "2025-11-25"  # the newest we speak

        tools = srv.request("tools/list")["result"]["tools"]
        assert {t["name"] for t in tools} == TOOLS and len(tools) == 12
        for t in tools:
            assert t["description"] and t["title"]
            assert t["inputSchema"]["type"] == "object" and t["outputSchema"]["type"] == "object"
            jsonschema.Draft202012Validator.check_schema(t["inputSchema"])
            jsonschema.Draft202012Validator.check_schema(t["outputSchema"])
            srv.schemas[t["name"]] = t["outputSchema"]

        # -- stateless era: discovery on the same connection ----------------------------------
        disc = srv.request("server/discover", {})["result"]
        assert "2026-07-28" in disc["supportedVersions"] and "2025-11-25" in disc["supportedVersions"]
        assert disc["capabilities"]["tools"] == {"listChanged": False}
        assert disc["serverInfo"]["name"] == "ouro" and disc["resultType"] == "complete"

        # -- every tool --------------------------------------------------------------------------
        probe = srv.call("probe", {"threads": 1})["structuredContent"]
        assert probe["read_gb_s"]["1"] > 0

        bench = srv.call("bench", {"prompt_len": 16, "gen_len": 4, "repeats": 1, "threads": 1, "trace": True})
        trace = bench["structuredContent"]["trace_path"]
        assert os.path.exists(trace) and trace.startswith(str(tmp_path / "cache"))
        assert bench["structuredContent"]["bench"]["decode_tok_s"]["median"] > 0
        bench2 = srv.call("bench", {"prompt_len": 16, "gen_len": 4, "repeats": 1, "threads": 1, "trace": True,
                                    "args": ["--isa", "avx2"]})
        trace2 = bench2["structuredContent"]["trace_path"]
        assert trace2 != trace

        summ = srv.call("trace_summarize", {"path": trace})["structuredContent"]
        assert summ["wall_s"] > 0 and any(r["name"] == "gate_up" for r in summ["ops"])
        over = srv.call("trace_overlap", {"path": trace, "a": "cat:op", "b": "pool.job"})["structuredContent"]
        assert 0 <= over["fraction"] <= 1
        diff = srv.call("trace_diff", {"base": trace, "cand": trace2})["structuredContent"]
        assert diff["by_name"]

        plan = srv.call("lab_plan", {"base_args": "-t 1", "cand_args": "-t 2"})["structuredContent"]
        assert plan["specs"] and "criteria_file" in plan["specs"][0]["toml"]
        assert plan["specs"][0]["path"].startswith(str(tmp_path / "cache"))  # not experiments/specs/planned

        log = srv.call("lab_log", {"n": 5})["structuredContent"]
        assert len(log["records"]) == 5 and log["records"][0]["id"] > log["records"][-1]["id"]
        shown = srv.call("lab_show", {"id": "E0001"})["structuredContent"]
        assert shown["id"] == "E0001" and shown["verdict"] in ("accept", "reject", "inconclusive")
        missing = srv.call("lab_show", {"id": "E9999"}, expect_error=True)
        assert "E9999" in missing["content"][0]["text"]

        check = srv.call("correctness_check", {"spec_toml": KERNEL_SPEC})["structuredContent"]
        assert check["verdict"] == "accept" and check["correctness"]["exact"] == 1.0
        assert any(c["expr"] == "correctness.max_rel_diff <= 1e-3" for c in check["criteria"])
        assert sum(1 for _ in open(tmp_path / "ledger.jsonl")) == sum(1 for _ in open(REPO_LEDGER))  # nothing recorded

        # -- refusals: criteria belong to people; the ledger belongs to the lab ---------------------
        def refused(name, args, needle):
            text = srv.call(name, args, expect_error=True)["content"][0]["text"]
            assert text.startswith("refused:") and needle.lower() in text.lower(), text

        refused("lab_submit", {"spec_toml": KERNEL_SPEC.replace('criteria_file = "kernel-speedup"',
                                                                 'criteria = ["candidate.ns_per_op <= 2 * baseline.ns_per_op"]')},
                "criteria belong to people")
        refused("lab_submit", {"spec_toml": KERNEL_SPEC.replace('criteria_file = "kernel-speedup"\n', "")},
                "names no criteria_file")
        refused("lab_submit", {"spec_toml": KERNEL_SPEC.replace('"kernel-speedup"', '"my-own"')}, "not a file in experiments/criteria")
        refused("correctness_check", {"spec_toml": KERNEL_SPEC.replace('criteria_file = "kernel-speedup"\n', "")},
                "names no criteria_file")
        refused("bench", {"trace": False, "args": ["--trace", "experiments/criteria/kernel-speedup.toml"]},
                "inside experiments/criteria")
        refused("trace_summarize", {"path": str(CRITERIA_DIR / "new.toml")}, "Criteria belong to people")
        refused("bench", {"args": ["--trace=experiments/ledger.jsonl"]}, "names the ledger")
        refused("lab_submit", {"spec_toml": KERNEL_SPEC, "ledger": str(tmp_path / "mine.jsonl")}, "argument 'ledger'")
        refused("lab_submit", {"spec_toml": KERNEL_SPEC, "criteria": ["1 == 1"]}, "criteria belong to people")
        bad = srv.call("lab_submit", {"spec_toml": KERNEL_SPEC.replace("repeats = 3\n", "repeats = -1\n")}, expect_error=True)
        assert "invalid spec" in bad["content"][0]["text"] and "repeats" in bad["content"][0]["text"]

        # -- an experiment: submit returns at once, status while it runs, then the result ---------
        t0 = time.monotonic()
        sub = srv.call("lab_submit", {"spec_toml": KERNEL_SPEC, "note": "mcp test"})["structuredContent"]
        assert time.monotonic() - t0 < 5 and sub["state"] == "running"
        early = srv.call("lab_result", {"job_id": sub["job_id"]}, expect_error=True)
        assert "still running" in early["content"][0]["text"]
        st, states = wait_done(srv, sub["job_id"])
        assert st["state"] == "done", st
        assert states[0] == "running" and st["progress"], st
        res = srv.call("lab_result", {"job_id": sub["job_id"]})["structuredContent"]
        rec = res["record"]
        assert res["verdict"] in ("accept", "reject", "inconclusive") and not res["reused"] and not res["forced"]
        assert rec["criteria_sha256"] == sha(CRITERIA_DIR / "kernel-speedup.toml")
        assert rec["spec"]["criteria_file"] == "kernel-speedup" and rec["note"] == "mcp test"
        assert len(rec["measurement_key"]) == 64
        ledger_lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
        assert json.loads(ledger_lines[-1])["id"] == res["id"]

        # The identical request again: the stored record, not measured again, nothing appended.
        t0 = time.monotonic()
        again = srv.call("lab_submit", {"spec_toml": KERNEL_SPEC, "note": "a different note changes nothing"})
        st2, _ = wait_done(srv, again["structuredContent"]["job_id"])
        res2 = srv.call("lab_result", {"job_id": again["structuredContent"]["job_id"]})["structuredContent"]
        assert time.monotonic() - t0 < 15
        assert res2["reused"] is True and res2["id"] == res["id"] and res2["verdict"] == res["verdict"]
        assert "identical to" in " ".join(st2["progress"])
        assert (tmp_path / "ledger.jsonl").read_text().splitlines() == ledger_lines

        # force=true measures again and the record says so.
        forced = srv.call("lab_submit", {"spec_toml": KERNEL_SPEC, "force": True})["structuredContent"]
        st3, _ = wait_done(srv, forced["job_id"])
        assert st3["state"] == "done", st3
        res3 = srv.call("lab_result", {"job_id": forced["job_id"]})["structuredContent"]
        assert res3["forced"] is True and res3["force_of"] == res["id"] and res3["id"] != res["id"]
        assert res3["record"]["measurement_key"] == rec["measurement_key"]
        assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == len(ledger_lines) + 1
        srv.call("lab_status", {"job_id": "J20260101000000-abcdef"}, expect_error=True)

        # -- malformed input: JSON-RPC errors, and the server keeps answering ------------------------
        srv.rpc_error(b"this is not json", -32700)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', -32700)
        srv.rpc_error(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600)
        srv.rpc_error(b'"just a string"', -32600)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 7}', -32600, expect_id=7)
        srv.rpc_error(b'{"jsonrpc": "1.0", "id": 8, "method": "ping"}', -32600, expect_id=8)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 9, "method": 42}', -32600, expect_id=9)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 10, "method": "no/such/method"}', -32601, expect_id=10)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "nope"}}', -32602, expect_id=11)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "probe", "arguments": [1]}}',
                      -32602, expect_id=12)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "probe", "arguments": {"threads": "two"}}}',
                      -32602, expect_id=13)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": "lab_show", "arguments": {}}}',
                      -32602, expect_id=14)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": {"name": "bench", "arguments": {"args": [1, 2]}}}',
                      -32602, expect_id=15)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": "probe", "arguments": {"color": "red"}}}',
                      -32602, expect_id=16)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": "x"}', -32602, expect_id=17)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": 18, "method": "tools/call", "params": {"name": "probe", '
                      b'"_meta": {"io.modelcontextprotocol/protocolVersion": "1999-01-01"}}}', -32022, expect_id=18)
        srv.rpc_error(b'{"jsonrpc": "2.0", "id": ' + b"x" * (5 << 20) + b"}", -32600)  # over the 4 MiB line limit
        srv.send_raw(b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}\n')
        assert srv.request("ping")["result"] == {}  # still answering, and the notification got no reply
    finally:
        rc = srv.close()
    assert rc == 0
    for raw in srv.stdout_lines:  # nothing but JSON-RPC messages on stdout
        msg = json.loads(raw)
        assert msg["jsonrpc"] == "2.0" and ("result" in msg or "error" in msg)


def test_stateless_call_without_initialize(ouro_bin, fresh):
    """A 2026-07-28 client never sends initialize: its first message is a tool call."""
    srv = Server(ouro_bin, fresh, name="stateless")
    try:
        srv.schemas["lab_log"] = None
        reply = srv.request("tools/call", {"name": "lab_log", "arguments": {"n": 2},
                                           "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                                     "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "1"}}})
        res = reply["result"]
        assert res["isError"] is False and res["resultType"] == "complete"
        assert len(res["structuredContent"]["records"]) == 2
        disc = srv.request("server/discover")["result"]
        assert disc["supportedVersions"][0] == "2026-07-28"
    finally:
        assert srv.close() == 0


def test_fuzzed_messages_never_crash_or_corrupt_stdout(ouro_bin, fresh):
    """400 random and mutated JSON-RPC lines (byte flips, truncations, junk values, missing and
    unknown keys, on cheap methods and read-only tools): after each, a ping must still be answered,
    and every line the server writes is one JSON-RPC 2.0 object with a result or an error."""
    rng = random.Random(2026)
    base = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "f", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "server/discover"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "lab_log", "arguments": {"n": 2}}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "lab_show", "arguments": {"id": "E0001"}}},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "lab_status", "arguments": {"job_id": "nope"}}},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "lab_result", "arguments": {"job_id": "../x"}}},
    ]
    junk = [None, True, 0, -1, 2 ** 70, 1e308, "", "x" * 5000, [], {}, [1, [2]], {"a": {"b": None}}, "\u0000", "é"]

    def mutate_value(msg):
        m = json.loads(json.dumps(msg))
        node = m
        path = []
        while isinstance(node, dict) and node and rng.random() < 0.7:
            k = rng.choice(list(node))
            path.append(k)
            if not isinstance(node[k], dict):
                break
            node = node[k]
        parent = m
        for k in path[:-1]:
            parent = parent[k]
        r = rng.random()
        if path and r < 0.4:
            parent[path[-1]] = rng.choice(junk)
        elif path and r < 0.6:
            del parent[path[-1]]
        else:
            (parent if isinstance(parent, dict) else m)["x" + str(rng.randint(0, 9))] = rng.choice(junk)
        return json.dumps(m).encode()

    def mutate_bytes(msg):
        b = bytearray(json.dumps(msg).encode())
        for _ in range(rng.randint(1, 4)):
            op, i = rng.random(), rng.randrange(len(b))
            if op < 0.4:
                b[i] = rng.randrange(256)
            elif op < 0.7:
                del b[i:i + rng.randint(1, 8)]
            else:
                b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        return bytes(b).replace(b"\n", b" ")

    srv = Server(ouro_bin, fresh, name="fuzz")
    try:
        for i in range(400):
            msg = rng.choice(base)
            line = mutate_value(msg) if rng.random() < 0.5 else mutate_bytes(msg)
            srv.send_raw(line + b"\n")
            ping_id = f"ping-{i}"
            srv.send({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
            while True:
                reply = srv.recv(timeout=60)
                assert isinstance(reply, dict) and reply.get("jsonrpc") == "2.0", (line[:200], reply)
                assert ("result" in reply) != ("error" in reply), (line[:200], reply)
                if reply.get("id") == ping_id:
                    assert reply["result"] == {}, reply
                    break
        assert srv.proc.poll() is None, "the server exited"
        for raw in srv.stdout_lines:
            json.loads(raw)
    finally:
        assert srv.close() == 0
