"""Structured output through the official openai client: response_format
json_schema on every schema in tests/schemas (streamed and not, SmolLM2 and
Gemma 3), json_object, llama-server's grammar/json_schema fields, retries and
their failure, max_tokens cuts, refused fields, and `spindle run
--grammar/--json-schema`.  Every output must parse with json.loads and pass
the Python jsonschema validator.

Time: the schemas go through one server per model, eight requests at once,
with small bounded outputs (every schema bounds its strings and arrays)."""
import concurrent.futures
import glob
import json
import os

import jsonschema
import openai
import pytest

from server_util import Server, assert_openai_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMAS = sorted(glob.glob(os.path.join(ROOT, "tests", "schemas", "*.json")))
PROMPT = "Reply with a realistic example as JSON."


def load(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def smollm2(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "8", "--ctx", "1024", "--max-retries", "8")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


@pytest.fixture(scope="module")
def gemma3(spindle_bin, gemma3_path):
    s = Server(spindle_bin, gemma3_path, "--parallel", "8", "--ctx", "1024", "--max-retries", "8")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


# Small models nest recursive schemas without end; a logit bias on the
# token that closes the recursion (a real API feature) makes them stop.
# Open-ended maps get the same nudge.  Each text that is one token of the
# model is biased.
CLOSERS = {"20-tree-recursive.json": ["[]", "]"], "21-linked-list.json": ["null"],
           "32-string-map.json": ["}"]}


def closing_bias(server, path):
    bias = {}
    for text in CLOSERS.get(os.path.basename(path), []):
        toks = server.post("/tokenize", {"content": text, "add_special": False}).json()["tokens"]
        if len(toks) == 1:
            bias[str(toks[0])] = 8
    assert bias or os.path.basename(path) not in CLOSERS, path
    return bias or None


def ask(server, schema, stream, seed, bias=None, max_tokens=300):
    """One json_schema request; returns (text, finish_reason, extra fields of the choice)."""
    client = server.openai()
    kw = dict(model=server.model_id, messages=[{"role": "user", "content": PROMPT}],
              response_format={"type": "json_schema",
                               "json_schema": {"name": "answer", "schema": schema, "strict": True}},
              max_tokens=max_tokens, temperature=0.8, seed=seed, extra_body={"max_retries": 8})
    if bias:  # the nudged open-ended schemas also get a penalty on repeats, so a key cannot loop
        kw["logit_bias"] = bias
        kw["frequency_penalty"] = 1.0
    if not stream:
        r = client.chat.completions.create(**kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.choices[0].model_extra
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish, {}


def check_all(server, cases):
    """cases: (schema path, stream); every answer must be complete, parse and validate."""
    def one(case):
        path, stream = case
        schema = load(path)
        # the seed comes from the file name, so it is the same wherever the checkout lies
        text, finish, extra = ask(server, schema, stream, seed=len(os.path.basename(path)) * 7 + stream,
                                  bias=closing_bias(server, path))
        return path, stream, schema, text, finish, extra
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, cases))
    problems = []
    for path, stream, schema, text, finish, extra in results:
        name = "%s (%s)" % (os.path.basename(path), "stream" if stream else "whole")
        try:
            assert finish == "stop", (finish, text)
            value = json.loads(text)
            jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator,
                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            if not stream:
                assert extra.get("valid") is True and 1 <= extra.get("attempts") <= 9, extra
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            problems.append("%s: %s" % (name, str(e)[:300]))
    assert not problems, "\n".join(problems)


def test_schemas_smollm2(smollm2):
    assert len(SCHEMAS) >= 30
    check_all(smollm2, [(p, s) for p in SCHEMAS for s in (False, True)])


def test_schemas_gemma3(gemma3):
    # each schema once, streamed and whole alternating: both modes, every schema
    check_all(gemma3, [(p, i % 2 == 1) for i, p in enumerate(SCHEMAS)])


def test_json_object_and_llama_fields(smollm2):
    client = smollm2.openai()
    r = client.chat.completions.create(model=smollm2.model_id, max_tokens=300, seed=3, temperature=0.5,
                                       messages=[{"role": "user", "content": 'Reply with a JSON object with '
                                                  'one key, like {"cat": "Tom"}.'}],
                                       response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    # llama-server's fields on both endpoints
    r = smollm2.post("/v1/completions", {"prompt": "Answer:", "max_tokens": 20, "seed": 1,
                                         "grammar": 'root ::= ("yes" | "no") "."'})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("yes.", "no.")
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}},
              "required": ["n"], "additionalProperties": False}
    r = smollm2.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "A number"}],
                                              "max_tokens": 30, "json_schema": schema})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), schema)


def test_all_attempts_invalid_is_422(smollm2):
    # the grammar cannot enforce uniqueItems; two values, three unique items: never valid
    schema = {"type": "array", "items": {"enum": [1, 2]}, "minItems": 3, "maxItems": 3, "uniqueItems": True}
    body = {"messages": [{"role": "user", "content": "Numbers"}], "max_tokens": 30, "max_retries": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    r = smollm2.post("/v1/chat/completions", body)
    err = assert_openai_error(r, 422)
    assert "uniqueItems" in err["message"] and "attempt 3 of 3" in err["message"], err
    # streamed: the error arrives as an error event, and the client raises it
    client = smollm2.openai()
    with pytest.raises(openai.APIError) as e:
        for _ in client.chat.completions.create(model=smollm2.model_id, stream=True, max_tokens=30,
                                                messages=body["messages"], response_format=body["response_format"],
                                                extra_body={"max_retries": 1}):
            pass
    assert "uniqueItems" in str(e.value)
    # max_retries above the server's cap
    body["max_retries"] = 9
    assert_openai_error(smollm2.post("/v1/chat/completions", body), 400, "max_retries")


def test_cut_by_max_tokens_is_incomplete(smollm2):
    schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 200}},
              "required": ["text"], "additionalProperties": False}
    client = smollm2.openai()
    r = client.chat.completions.create(model=smollm2.model_id, max_tokens=8,
                                       messages=[{"role": "user", "content": "Write."}],
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "t", "schema": schema}})
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].model_extra["valid"] is False
    with pytest.raises(ValueError):
        json.loads(r.choices[0].message.content)


@pytest.mark.parametrize("body,param,needle", [
    ({"grammar": "root ::= \"a\"\nx ::= (\"b\""}, "grammar", "line 2, column"),
    ({"grammar": "root ::= undefined-rule"}, "grammar", "line 1, column 10"),
    ({"json_schema": {"type": "object", "properties": {"a": {"not": {}}}, "required": ["a"]}}, "json_schema",
     "required property 'a' can have no value"),
    ({"json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "not": {}}}, "json_schema",
     "'not' of a schema every value satisfies"),
    ({"json_schema": {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}}, "json_schema",
     "not in this schema"),
    ({"json_schema": {"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 1}}}},
     "json_schema", "at $.properties.a"),
    ({"json_schema": {"enum": []}}, "json_schema", "empty enum"),
    ({"json_schema": {"type": "string", "pattern": "(a"}}, "json_schema", "not a valid regular expression"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                                     "minLength": -1}}}},
     "response_format.json_schema.schema", "non-negative integer"),
    ({"response_format": {"type": "json_object", "whitespace": "wide"}}, "response_format.whitespace", "flexible"),
    ({"response_format": {"type": "text", "whitespace": "flexible"}}, "response_format.whitespace", "not text"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "xml"),
    ({"grammar": "root ::= \"a\"", "json_schema": {}}, None, "at most one"),
    ({"tools": []}, "tools", "1 to 128"),
    ({"audio": {}}, "audio", "not supported"),
    ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument"),
])
def test_refusals(smollm2, body, param, needle):
    full = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    full.update(body)
    err = assert_openai_error(smollm2.post("/v1/chat/completions", full), 400, param)
    assert needle in err["message"], err


def test_labels_accepted(smollm2):
    r = smollm2.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                                              "user": "u1", "metadata": {"k": "v"}, "store": False})
    assert r.status_code == 200, r.text


def test_n_and_logprobs_with_schema(smollm2):
    schema = load(os.path.join(ROOT, "tests", "schemas", "04-color-enum.json"))
    client = smollm2.openai()
    r = client.chat.completions.create(model=smollm2.model_id, n=3, max_tokens=30, seed=9, logprobs=True,
                                       top_logprobs=3, messages=[{"role": "user", "content": "A color"}],
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "c", "schema": schema}})
    assert len(r.choices) == 3
    for ch in r.choices:
        jsonschema.validate(json.loads(ch.message.content), schema)
        # logprobs are over the allowed tokens: each sampled token is finite and listed first or below
        assert all(t.logprob > -1e9 for t in ch.logprobs.content)


def test_run_cli(run_spindle, smollm2_path, tmp_path):
    schema_file = tmp_path / "s.json"
    schema = load(os.path.join(ROOT, "tests", "schemas", "19-defs-ref.json"))
    schema_file.write_text(json.dumps(schema))
    r = run_spindle("run", "-m", smollm2_path, "--chat", "-p", "Two points as JSON.", "-n", "80",
                    "--json-schema", schema_file, "--seed", "4", "--json")
    assert r.returncode == 0, r.stderr
    out = r.json()
    assert out["valid"] is True and out["attempts"] >= 1
    jsonschema.validate(json.loads(out["text"]), schema)
    # beams under a grammar
    g = tmp_path / "g.gbnf"
    g.write_text('root ::= "The answer is " [0-9] [0-9]? "."\n')
    r = run_spindle("run", "-m", smollm2_path, "-p", "2 + 2 =", "--grammar", g, "--beams", "3", "-n", "10", "--json")
    assert r.returncode == 0, r.stderr
    import re
    assert re.fullmatch(r"The answer is [0-9][0-9]?\.", r.json()["text"]), r.stdout
    # a grammar error: one line on stderr with the position, exit status 2
    g.write_text('root ::= "a" |\n  ( "b"\n')
    r = run_spindle("run", "-m", smollm2_path, "-p", "x", "--grammar", g)
    assert r.returncode == 2 and "line 3, column 1" in r.stderr, r.stderr
