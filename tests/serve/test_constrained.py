"""Constrained decoding (`response_format`) through the real server and the official `openai` client.

The oracle is independent of our schema code: Python's `json` parses every output and the
`jsonschema` package validates it against the schema that was sent. The schemas are random
(seeded), with nested objects, enums, arrays, integers, numbers, booleans, nulls, optional
properties, unions with null and $refs, sampled at several temperatures: a matcher that lets one
wrong byte through, or lets the model run out of tokens inside a string, fails here.
"""
import concurrent.futures
import json
import random

import jsonschema
import openai
import pytest

import servelib

WORDS = ["name", "id", "kind", "size", "tags", "owner", "level", "score", "items", "note", "color", "ok", "rate",
         "steps", "meta", "unit", "path", "mode", "count", "label"]


def random_scalar(rng):
    r = rng.random()
    if r < 0.2:
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["maxLength"] = rng.randint(1, 24)
        if rng.random() < 0.3:
            s["minLength"] = rng.randint(0, min(3, s.get("maxLength", 3)))
        return s
    if r < 0.35:
        return {"type": "integer"}
    if r < 0.5:
        return {"type": "number"}
    if r < 0.6:
        return {"type": "boolean"}
    if r < 0.65:
        return {"type": "null"}
    if r < 0.85:
        pool = ["red", "green", "blue", "a b", "ü", 1, 12, -3, 2.5, True, None, "x\"y"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    return {"const": rng.choice(["fixed", 7, False])}


def random_schema(rng, depth=0):
    r = rng.random()
    if depth >= 3 or r < 0.35:
        s = random_scalar(rng)
    elif r < 0.55:
        s = {"type": "array", "items": random_schema(rng, depth + 1)}
        if rng.random() < 0.6:
            s["maxItems"] = rng.randint(1, 4)
        if rng.random() < 0.4:
            s["minItems"] = rng.randint(0, min(2, s.get("maxItems", 2)))
    else:
        names = rng.sample(WORDS, rng.randint(1, 4))
        props = {n: random_schema(rng, depth + 1) for n in names}
        s = {"type": "object", "properties": props,
             "required": [n for n in names if rng.random() < 0.7]}
        if rng.random() < 0.5:
            s["additionalProperties"] = False
    if depth > 0 and rng.random() < 0.1:
        s = {"anyOf": [s, {"type": "null"}]} if s.get("type") not in ("null", None) else s
    return s


def make_schemas(n, seed=1234):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        s = random_schema(rng)
        if s.get("type") != "object":  # the top level is an object most of the time, as in practice
            s = {"type": "object", "properties": {"value": s}, "required": ["value"]}
        if i % 7 == 3:  # a $ref into $defs
            s = {"$defs": {"inner": s}, "type": "object", "properties": {"data": {"$ref": "#/$defs/inner"},
                                                                          "n": {"type": "integer"}},
                 "required": ["data", "n"]}
        out.append(s)
    return out


@pytest.fixture(scope="module")
def client(server_url):
    return servelib.make_client(server_url)


def model_id(client):
    return client.models.list().data[0].id


def ask(client, schema, temperature, seed, max_tokens=160, chat=True):
    rf = {"type": "json_schema", "json_schema": {"name": "doc", "schema": schema, "strict": True}}
    if chat:
        r = client.chat.completions.create(
            model=model_id(client), messages=[{"role": "user", "content": "Answer with a JSON document."}],
            response_format=rf, temperature=temperature, seed=seed, max_tokens=max_tokens)
        return r.choices[0].message.content, r.choices[0].finish_reason
    r = client.completions.create(model=model_id(client), prompt="Here is the record as JSON:", temperature=temperature,
                                  seed=seed, max_tokens=max_tokens, extra_body={"response_format": rf})
    return r.choices[0].text, r.choices[0].finish_reason


def test_fifty_random_schemas_always_parse_and_validate(client):
    schemas = make_schemas(50)
    temps = [0.0, 0.7, 1.0, 1.4]

    def one(i):
        text, finish = ask(client, schemas[i], temps[i % len(temps)], seed=i, chat=i % 5 != 4)
        return i, text, finish

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(len(schemas))))
    failures = []
    finishes = {}
    for i, text, finish in results:
        finishes[finish] = finishes.get(finish, 0) + 1
        try:
            doc = json.loads(text)
            jsonschema.validate(doc, schemas[i])
        except (ValueError, jsonschema.ValidationError) as e:
            failures.append(f"schema {i} {json.dumps(schemas[i])}\noutput {text!r} ({finish})\n{str(e)[:300]}")
    assert not failures, f"{len(failures)} of 50 outputs invalid:\n" + "\n\n".join(failures[:5])
    assert set(finishes) <= {"stop", "length"}, finishes


def test_tight_budget_still_closes_the_document(client):
    """With max_tokens just above the shortest document, the model must close what it opened."""
    schema = {"type": "object", "properties": {"story": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["story", "n"]}
    for seed in range(4):
        text, finish = ask(client, schema, 1.2, seed, max_tokens=24)
        doc = json.loads(text)
        jsonschema.validate(doc, schema)


def test_streaming_and_json_object(client, server_url):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}, "ids": {"type": "array",
              "items": {"type": "integer"}, "maxItems": 3}}, "required": ["color", "ids"]}
    stream = client.chat.completions.create(
        model=model_id(client), messages=[{"role": "user", "content": "JSON please."}], stream=True, max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}, temperature=0.9, seed=3)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)
    r = client.chat.completions.create(model=model_id(client), messages=[{"role": "user", "content": "Give JSON."}],
                                       response_format={"type": "json_object"}, temperature=1.0, seed=9, max_tokens=80)
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    # llama-server's spelling: {"type": "json_object", "schema": {...}}
    resp = servelib.post(server_url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 40, "temperature": 1.0, "seed": 2,
        "response_format": {"type": "json_object", "schema": {"type": "object", "properties": {"k": {"type": "boolean"}},
                                                              "required": ["k"]}}})
    assert resp.status == 200, resp
    assert isinstance(json.loads(resp.json()["choices"][0]["message"]["content"])["k"], bool)


def test_unconstrained_requests_are_unchanged(client, ref):
    """response_format text (or none) leaves greedy output exactly as before."""
    r = client.chat.completions.create(model=model_id(client), messages=[{"role": "user", "content": "Hi there"}],
                                       temperature=0, max_tokens=12, response_format={"type": "text"})
    assert r.choices[0].message.content == ref("Hi there", 12)["text"]


@pytest.mark.parametrize("rf,needle", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}}, "pattern"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 0}}}, "minimum"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}, "objekt"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/missing"}}}, "missing"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "required": ["a"]}}}, "'a'"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "minItems": 3, "maxItems": 1}}}, "minItems"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": False}}, "false"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/a"}}, "required": ["b"]}}, "$ref": "#/$defs/a"}}}, "finite"),
    ({"type": "json_schema"}, "json_schema"),
    ({"type": "yaml"}, "yaml"),
    ("json", "response_format"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "a": {"type": "string", "minLength": 100}}, "required": ["a"]}}}, "max_tokens"),
])
def test_bad_response_format_is_a_400_naming_it(client, rf, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id(client), messages=[{"role": "user", "content": "x"}],
                                       response_format=rf, max_tokens=32)
    body = e.value.body if isinstance(e.value.body, dict) else {}
    msg = body.get("message", "") or str(e.value)
    assert needle in msg, msg
    assert body.get("param", "").split(".")[0] in ("response_format", "max_tokens"), body


def test_fuzzed_schemas_never_crash_the_server(server_url):
    """Random and mutated schema documents: every answer is a 200 or an OpenAI-shaped 400."""
    rng = random.Random(77)
    base = make_schemas(10, seed=5)
    junk = [None, 1, -1, 1e308, "", "x", [], {}, True, {"type": []}, {"type": [1]}, {"$ref": 5}, {"enum": []},
            {"items": "x"}, {"properties": []}, {"required": "a"}, {"anyOf": {}}, {"minLength": -1}, {"maxItems": 1.5}]
    for i in range(60):
        s = json.loads(json.dumps(rng.choice(base)))
        node = s
        for _ in range(rng.randint(0, 3)):  # walk somewhere into the schema and break it
            kids = [v for v in node.values() if isinstance(v, dict)] if isinstance(node, dict) else []
            if not kids:
                break
            node = rng.choice(kids)
        if isinstance(node, dict):
            bad = rng.choice(junk)
            if isinstance(bad, dict) and bad:
                node.update(bad)
            else:
                node[rng.choice(["type", "items", "properties", "enum", "required", "x-unknown"])] = bad
        resp = servelib.post(server_url, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 48, "temperature": 1.0, "seed": i,
            "response_format": {"type": "json_schema", "json_schema": {"name": "f", "schema": s}}})
        assert resp.status in (200, 400), resp
        if resp.status == 400:
            servelib.check_error_shape(resp.json(), 400)
        else:
            json.loads(resp.json()["choices"][0]["message"]["content"])
    assert servelib.get(server_url, "/health").status == 200
