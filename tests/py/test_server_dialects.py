"""Every client, unchanged: the real `anthropic`, `ollama` and `openai`
(Responses) Python clients against `spindle serve` on SmolLM2-135M, each
API surface streamed and not, structured output, a full tool round trip,
and errors (bad field, bad key, context overflow) in each API's own shape;
and an agent loop of the OpenAI Agents SDK (`openai-agents`) over Responses.
Each dialect is a translation into the one internal request, so its greedy
answer equals the Chat Completions answer to the same conversation."""
import asyncio
import json

import agents
import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from server_util import Server

KEY = "dialect-key"
Q = "What is the capital of France?"
SYSTEM = "Be terse."
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "4", "--ctx", "1024", "--alias", "smol", api_key=KEY)
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def chat_text(server, messages, max_tokens, **kw):
    """The Chat Completions greedy answer: what every dialect must reproduce."""
    c = server.openai().chat.completions.create(model="smol", messages=messages, max_tokens=max_tokens,
                                                temperature=0, **kw)
    return c.choices[0].message.content, c


# ---- Anthropic Messages ------------------------------------------------------

def claude(server, key=KEY):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


GREEDY = {"temperature": 0}  # the SDK no longer has sampling arguments: sent as extra fields


def test_anthropic_messages_and_stream(server):
    c = claude(server)
    msgs = [{"role": "user", "content": Q}]
    m = c.messages.create(model="smol", max_tokens=24, system=SYSTEM, messages=msgs, extra_body=GREEDY)
    want, ref = chat_text(server, [{"role": "system", "content": SYSTEM}] + msgs, 24)
    assert m.type == "message" and m.role == "assistant" and m.model == "smol" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == want
    assert m.stop_reason == ("end_turn" if ref.choices[0].finish_reason == "stop" else "max_tokens")
    assert m.usage.output_tokens == ref.usage.completion_tokens
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == ref.usage.prompt_tokens
    n = c.messages.count_tokens(model="smol", system=SYSTEM, messages=msgs)
    assert n.input_tokens == ref.usage.prompt_tokens
    # system as text blocks and content as blocks: the same prompt
    blocks = c.messages.create(model="smol", max_tokens=24, system=[{"type": "text", "text": SYSTEM}],
                               messages=[{"role": "user", "content": [{"type": "text", "text": Q}]}],
                               extra_body=GREEDY)
    assert blocks.content[0].text == want
    with c.messages.stream(model="smol", max_tokens=24, system=SYSTEM, messages=msgs, extra_body=GREEDY) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    assert "".join(pieces) == want and len(pieces) > 1
    assert final.content[0].text == want and final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens


def test_anthropic_raw_stream_events(server):
    body = {"model": "smol", "max_tokens": 4, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.stream("POST", server.url + "/v1/messages", json=body, headers={"x-api-key": KEY},
                      timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    names = [ln[7:] for ln in lines if ln.startswith("event: ")]
    datas = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: ")]
    assert names == [d["type"] for d in datas]
    assert names[0] == "message_start" and names[1] == "content_block_start"
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    assert datas[-2]["delta"]["stop_reason"] == "max_tokens" and datas[-2]["usage"]["output_tokens"] == 4


def test_anthropic_stop_sequence(server):
    c = claude(server)
    msgs = [{"role": "user", "content": Q + " Answer with one word."}]
    full, _ = chat_text(server, msgs, 30)
    assert "Paris" in full
    m = c.messages.create(model="smol", max_tokens=30, stop_sequences=["Paris"], messages=msgs, extra_body=GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "Paris"
    assert m.content[0].text == full[:full.index("Paris")]
    with c.messages.stream(model="smol", max_tokens=30, stop_sequences=["Paris"], messages=msgs,
                           extra_body=GREEDY) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "Paris"


def test_anthropic_structured_output(server):
    m = claude(server).messages.create(model="smol", max_tokens=60, messages=[{"role": "user", "content": "A person."}],
                                       output_config={"format": {"type": "json_schema", "schema": PERSON}},
                                       extra_body=GREEDY)
    jsonschema.validate(json.loads(m.content[0].text), PERSON)


def test_anthropic_tool_round_trip(server):
    c = claude(server)
    tools = [{"name": "get_weather", "description": "Get the weather", "input_schema": WEATHER}]
    q = [{"role": "user", "content": "What's the weather in Paris?"}]
    m = c.messages.create(model="smol", max_tokens=60, tools=tools, tool_choice={"type": "tool", "name": "get_weather"},
                          messages=q, extra_body=GREEDY)
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and isinstance(uses[0].input.get("city"), str)
    with c.messages.stream(model="smol", max_tokens=60, tools=tools, messages=q, extra_body=GREEDY,
                           tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["tool_use"] and final.content[0].input == uses[0].input
    # the result goes back; the answer is the model's continuation of that conversation
    convo = q + [{"role": "assistant", "content": m.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                               "content": "Sunny, 22 C"},
                                              {"type": "text", "text": "So, is it warm?"}]}]
    r = c.messages.create(model="smol", max_tokens=24, tools=tools, tool_choice={"type": "none"}, messages=convo,
                          extra_body=GREEDY)
    oai_tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                                   "parameters": WEATHER}}]
    want, _ = chat_text(server, [
        q[0], {"role": "assistant", "content": None, "tool_calls": [
            {"id": uses[0].id, "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(uses[0].input, separators=(",", ":"))}}]},
        {"role": "tool", "tool_call_id": uses[0].id, "content": "Sunny, 22 C"},
        {"role": "user", "content": "So, is it warm?"}], 24, tools=oai_tools, tool_choice="none")
    assert r.content[0].type == "text" and r.content[0].text == want
    without = c.messages.count_tokens(model="smol", messages=convo[:2] + [{"role": "user", "content": "So, is it warm?"}],
                                      tools=tools)
    with_result = c.messages.count_tokens(model="smol", messages=convo, tools=tools)
    assert with_result.input_tokens > without.input_tokens  # the result reached the prompt


def test_anthropic_errors(server):
    c = claude(server)
    ok = {"model": "smol", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(**ok, extra_body={"bogus": 1})
    assert e.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "Unrecognized request argument supplied: bogus"}}
    with pytest.raises(anthropic.AuthenticationError) as e:
        claude(server, key="wrong").messages.create(**ok)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model="smol", max_tokens=4, messages=[{"role": "user", "content": "word " * 1100}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "context" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(**dict(ok, model="claude-opus-9"))
    assert e.value.body["error"]["type"] == "not_found_error"
    r = httpx.post(server.url + "/v1/messages", headers={"x-api-key": KEY}, timeout=30,
                   json={"model": "smol", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 400 and r.json()["error"]["message"] == "max_tokens: Field required"
    for bad in ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]},
                {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                {"container": "c1"},
                {"temperature": 1.5}):
        r = httpx.post(server.url + "/v1/messages", headers={"x-api-key": KEY}, json=dict(ok, **bad), timeout=30)
        assert r.status_code == 400 and r.json()["type"] == "error", (bad, r.text)
    assert httpx.get(server.url + "/v1/messages/nope", headers={"x-api-key": KEY}).json()["type"] == "error"


# ---- Ollama ------------------------------------------------------------------

def olla(server, key=KEY):
    return ollama.Client(host=server.url, headers={"Authorization": "Bearer " + key})


OPTS = {"temperature": 0, "num_predict": 24}


def test_ollama_chat_and_stream(server):
    c = olla(server)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": Q}]
    want, ref = chat_text(server, msgs, 24)
    r = c.chat(model="smol:latest", messages=msgs, options=OPTS, stream=False)
    assert r.message.role == "assistant" and r.message.content == want and r.done
    assert r.done_reason == ref.choices[0].finish_reason
    assert r.prompt_eval_count == ref.usage.prompt_tokens and r.eval_count == ref.usage.completion_tokens
    parts = list(c.chat(model="smol", messages=msgs, options=OPTS, stream=True))
    assert "".join(p.message.content for p in parts) == want and len(parts) > 2
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == r.done_reason
    # raw NDJSON: stream is Ollama's default
    with httpx.stream("POST", server.url + "/api/chat", headers=server.headers(), timeout=60,
                      json={"model": "smol", "messages": msgs, "options": OPTS}) as h:
        assert h.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(ln) for ln in h.iter_lines() if ln]
    assert "".join(ln["message"]["content"] for ln in lines) == want and lines[-1]["done"]


def test_ollama_generate(server):
    c = olla(server)
    want, _ = chat_text(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": Q}], 24)
    g = c.generate(model="smol", prompt=Q, system=SYSTEM, options=OPTS, stream=False)
    assert g.response == want and g.done
    assert "".join(p.response for p in c.generate(model="smol", prompt=Q, system=SYSTEM, options=OPTS,
                                                  stream=True)) == want
    raw = c.generate(model="smol", prompt="The sky is", raw=True, options={"temperature": 0, "num_predict": 6},
                     stream=False)
    ref = server.openai().completions.create(model="smol", prompt="The sky is", max_tokens=6, temperature=0)
    assert raw.response == ref.choices[0].text and raw.eval_count == 6 and raw.done_reason == "length"


def test_ollama_structured_output(server):
    c = olla(server)
    r = c.chat(model="smol", messages=[{"role": "user", "content": "A person."}], format=PERSON,
               options={"temperature": 0, "num_predict": 60}, stream=False)
    jsonschema.validate(json.loads(r.message.content), PERSON)
    r = c.generate(model="smol", prompt="Reply with a JSON object with a key greeting.", format="json",
                   options={"temperature": 0, "num_predict": 100}, stream=False)
    assert r.done_reason == "stop" and isinstance(json.loads(r.response), dict)


def test_ollama_tool_round_trip(server):
    c = olla(server)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                               "parameters": WEATHER}}]
    q = [{"role": "user", "content": "Call get_weather for Paris."}]
    r = c.chat(model="smol", messages=q, tools=tools, options={"temperature": 0, "num_predict": 60}, stream=False)
    calls = r.message.tool_calls
    assert calls and calls[0].function.name == "get_weather" and isinstance(calls[0].function.arguments["city"], str)
    streamed = [p.message.tool_calls for p in c.chat(model="smol", messages=q, tools=tools, stream=True,
                                                     options={"temperature": 0, "num_predict": 60})
                if p.message.tool_calls]
    assert len(streamed) == 1 and [t.function for t in streamed[0]] == [t.function for t in calls]
    convo = q + [r.message] + [{"role": "tool", "content": "Sunny, 22 C", "tool_name": "get_weather"}
                               for _ in calls]
    a = c.chat(model="smol", messages=convo, tools=tools, options={"temperature": 0, "num_predict": 24}, stream=False)
    assert a.done and a.prompt_eval_count > r.prompt_eval_count  # the call and its result reached the prompt
    # a tool message that answers no call
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="smol", messages=q + [{"role": "tool", "content": "x"}], stream=False)
    assert e.value.status_code == 400


def test_ollama_model_routes(server, smollm2_path):
    c = olla(server)
    names = [m.model for m in c.list().models]
    assert names == [server.model_id, "smol"]
    ps = c.ps().models
    assert [m.name for m in ps] == names and ps[0].context_length == 1024
    show = c.show("smol")
    assert "completion" in show.capabilities and show.modelinfo["general.architecture"] == "llama"
    assert show.template.startswith("{%") or "im_start" in show.template
    assert httpx.get(server.url + "/api/version", headers=server.headers()).json()["version"]
    with pytest.raises(ollama.ResponseError) as e:
        c.show("llama9")
    assert e.value.status_code == 404
    e1 = c.embed(model="smol", input=["hello", "world"])
    ref = server.openai().embeddings.create(model="smol", input=["hello", "world"])
    assert len(e1.embeddings) == 2 and e1.prompt_eval_count == ref.usage.prompt_tokens
    assert e1.embeddings[1] == pytest.approx(ref.data[1].embedding, abs=1e-6)


def test_ollama_legacy_embeddings(server):
    c = olla(server)
    ref = server.openai().embeddings.create(model="smol", input=["world"])
    e = c.embeddings(model="smol:latest", prompt="world")
    assert e.embedding == pytest.approx(ref.data[0].embedding, abs=1e-6)
    r = httpx.post(server.url + "/api/embeddings", headers=server.headers(), timeout=30,
                   json={"model": "smol", "prompt": "world", "keep_alive": "5m", "options": {"num_thread": 2}})
    assert r.status_code == 200 and set(r.json()) == {"embedding"}
    for body, field in (({"model": "smol"}, "prompt"), ({"model": "smol", "prompt": ""}, "prompt"),
                        ({"model": "smol", "prompt": "x", "input": "y"}, "input"),
                        ({"model": "smol", "prompt": "x", "options": {"temperature": 0.5}}, "options.temperature"),
                        ({"model": "smol", "prompt": "word " * 2000}, "")):
        r = httpx.post(server.url + "/api/embeddings", headers=server.headers(), timeout=60, json=body)
        assert r.status_code == 400 and set(r.json()) == {"error"} and field in r.json()["error"], r.text
    with pytest.raises(ollama.ResponseError) as err:
        c.embeddings(model="llama9", prompt="x")
    assert err.value.status_code == 404


def test_ollama_logprobs(server):
    """logprobs / top_logprobs (the client sends both): Chat Completions' values, each token's with its
    text when streamed."""
    c = olla(server)
    msgs = [{"role": "user", "content": Q}]
    opts = {"temperature": 0, "num_predict": 6}
    ref = server.openai().chat.completions.create(model="smol", messages=msgs, max_tokens=6, temperature=0,
                                                  logprobs=True, top_logprobs=3).choices[0].logprobs.content
    want = [(t.token, t.logprob, [a.token for a in t.top_logprobs]) for t in ref]
    assert len(want) == 6

    def got(lps):
        return [(t.token, t.logprob, [a.token for a in t.top_logprobs or []]) for t in lps]

    r = c.chat(model="smol", messages=msgs, options=opts, logprobs=True, top_logprobs=3, stream=False)
    assert got(r.logprobs) == want
    assert all(len(t.top_logprobs) == 3 for t in r.logprobs)
    parts = list(c.chat(model="smol", messages=msgs, options=opts, logprobs=True, top_logprobs=3, stream=True))
    assert got([t for p in parts for t in p.logprobs or []]) == want
    for p in parts:  # each line's logprobs are its own text's tokens
        assert "".join(t.token for t in p.logprobs or []) == p.message.content
    g = c.generate(model="smol", prompt=Q, options=opts, logprobs=True, stream=False)
    assert [(t.token, t.logprob) for t in g.logprobs] == [w[:2] for w in want]
    assert all(not t.top_logprobs for t in g.logprobs)
    raw = c.generate(model="smol", prompt="The sky is", raw=True, options=opts, logprobs=True, top_logprobs=2,
                     stream=False)
    cref = server.openai().completions.create(model="smol", prompt="The sky is", max_tokens=6, temperature=0,
                                              logprobs=2).choices[0].logprobs
    assert [t.token for t in raw.logprobs] == cref.tokens
    assert [t.logprob for t in raw.logprobs] == pytest.approx(cref.token_logprobs)
    assert [{a.token for a in t.top_logprobs} for t in raw.logprobs] == [set(x) for x in cref.top_logprobs]
    # without logprobs the answers carry none
    assert c.chat(model="smol", messages=msgs, options=opts, stream=False).logprobs is None
    for kw, field in (({"top_logprobs": 3}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs")):
        with pytest.raises(ollama.ResponseError) as e:
            c.chat(model="smol", messages=msgs, options=opts, stream=False, **kw)
        assert e.value.status_code == 400 and field in e.value.error


def test_ollama_errors(server):
    c = olla(server)
    q = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="smol", messages=q, options={"tfs_z": 0.9}, stream=False)
    assert e.value.status_code == 400 and "options.tfs_z" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        olla(server, key="wrong").chat(model="smol", messages=q, stream=False)
    assert e.value.status_code == 401
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="smol", messages=[{"role": "user", "content": "word " * 1100}], stream=False)
    assert e.value.status_code == 400 and "context" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="smol", messages=q, options={"num_ctx": 4096}, stream=False)
    assert e.value.status_code == 400 and "num_ctx" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="llama9", messages=q, stream=False)
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        c.generate(model="smol", prompt="x", suffix="y", stream=False)
    assert e.value.status_code == 400
    r = httpx.post(server.url + "/api/chat", headers=server.headers(), timeout=30,
                   json={"model": "smol", "messages": q, "bogus": 1})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    # num_ctx within the server's bounds the request: prompt and answer must fit
    r = c.chat(model="smol", messages=q, options={"num_ctx": 40, "temperature": 0}, stream=False)
    assert r.prompt_eval_count + r.eval_count <= 40 and r.done_reason == "length"


# ---- OpenAI Responses --------------------------------------------------------

def test_responses_create_and_stream(server):
    c = server.openai()
    want, ref = chat_text(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": Q}], 24)
    assert ref.choices[0].finish_reason == "stop"
    r = c.responses.create(model="smol", input=Q, instructions=SYSTEM, max_output_tokens=24, temperature=0,
                           store=False)
    assert r.object == "response" and r.status == "completed" and r.output_text == want and r.id.startswith("resp_")
    assert r.usage.input_tokens == ref.usage.prompt_tokens and r.usage.output_tokens == ref.usage.completion_tokens
    assert r.instructions == SYSTEM and r.max_output_tokens == 24 and r.model == "smol"
    items = c.responses.create(model="smol", instructions=SYSTEM, max_output_tokens=24, temperature=0,
                               input=[{"role": "user", "content": [{"type": "input_text", "text": Q}]}])
    assert items.output_text == want
    with c.responses.stream(model="smol", input=Q, instructions=SYSTEM, max_output_tokens=24, temperature=0) as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert "".join(deltas) == want and final.output_text == want and final.status == "completed"
    events = list(c.responses.create(model="smol", input="Hi", max_output_tokens=3, temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.incomplete"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_responses_structured_output(server):
    r = server.openai().responses.create(
        model="smol", input="A person.", max_output_tokens=60, temperature=0,
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), PERSON)


def test_responses_tool_round_trip(server):
    c = server.openai()
    tools = [{"type": "function", "name": "get_weather", "description": "Get the weather", "parameters": WEATHER}]
    q = [{"role": "user", "content": "What's the weather in Paris?"}]
    r = c.responses.create(model="smol", input=q, tools=tools, max_output_tokens=60, temperature=0,
                           tool_choice={"type": "function", "name": "get_weather"})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments)["city"]
    with c.responses.stream(model="smol", input=q, tools=tools, max_output_tokens=60, temperature=0,
                            tool_choice={"type": "function", "name": "get_weather"}) as s:
        args = "".join(e.delta for e in s if e.type == "response.function_call_arguments.delta")
        final = s.get_final_response()
    assert args == calls[0].arguments and final.output[0].arguments == args
    convo = q + r.output + [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 22 C"},
                            {"role": "user", "content": "So, is it warm?"}]
    a = c.responses.create(model="smol", input=convo, tools=tools, tool_choice="none", max_output_tokens=24,
                           temperature=0)
    want, _ = chat_text(server, [
        q[0], {"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0].call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": calls[0].arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].call_id, "content": "Sunny, 22 C"},
        {"role": "user", "content": "So, is it warm?"}], 24,
        tools=[{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                                 "parameters": WEATHER}}], tool_choice="none")
    assert a.output_text == want


def test_responses_errors(server):
    c = server.openai()
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="smol", input="x", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id" and "stateless" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="smol", input="x", extra_body={"bogus": 1})
    assert e.value.body["code"] == "unknown_parameter"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).responses.create(
            model="smol", input="x")
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="smol", input="word " * 1100)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="smol", input="x", tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0]"
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="smol", input="x", max_output_tokens=0)
    assert e.value.body["param"] == "max_output_tokens"
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="gpt-9", input="x")


# ---- the OpenAI Agents SDK over Responses -----------------------------------

def test_openai_agents_loop(server):
    """One Agent with one function tool, its model OpenAIResponsesModel on an AsyncOpenAI client pointed
    at the server (tracing off).  tool_choice "required" makes the first turn call the tool; the tool
    is enabled only until it has run (greedy SmolLM2-135M would call it again on every turn), so the
    second turn answers with the call and its result in its input: the loop ends with a final output."""
    agents.set_tracing_disabled(True)
    ran = []

    @agents.function_tool(is_enabled=lambda ctx, agent: not ran)
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        ran.append(city)
        return "Sunny, 22 C"

    async def loop():
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
        agent = agents.Agent(name="weather", instructions="Answer the user's question about the weather.",
                             tools=[get_weather],
                             model=agents.OpenAIResponsesModel(model="smol", openai_client=client),
                             model_settings=agents.ModelSettings(temperature=0, tool_choice="required",
                                                                 max_tokens=60))
        try:
            return await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3)
        finally:
            await client.close()

    result = asyncio.run(loop())
    assert ran == ["Paris"]
    kinds = [type(i).__name__ for i in result.new_items]
    assert kinds == ["ToolCallItem", "ToolCallOutputItem", "MessageOutputItem"], kinds
    assert result.new_items[0].raw_item.name == "get_weather"
    assert result.new_items[1].output == "Sunny, 22 C"
    assert len(result.raw_responses) == 2 and isinstance(result.final_output, str) and result.final_output
    assert result.raw_responses[1].output[-1].type == "message"
    assert result.final_output == result.raw_responses[1].output[-1].content[0].text
