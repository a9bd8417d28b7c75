"""gpt-oss's Harmony format through the server: SmolLM2 copied with gpt-oss's
chat template (tests/goldens/chat/openai-gpt-oss-120b.json; its vocabulary
has none of Harmony's special tokens, so they are plain text here, as the
server's parsers read them).  A grammar (spindle's extension) makes the
output known: the analysis channel is reasoning_content and the final
channel content, whole and streamed; reasoning_format none leaves the
messages as written.  With tools, a named call is read from its header
(" to=functions.NAME ...<|message|>") and its arguments from the body;
reasoning_content in the conversation reaches the template."""
import json
import os

import pytest

from server_util import Server, gguf_with_chat_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = "<|channel|>analysis<|message|>I reason.<|end|><|start|>assistant<|channel|>final<|message|>Paris."
Q = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path, tmp_path_factory):
    with open(os.path.join(ROOT, "tests", "goldens", "chat", "openai-gpt-oss-120b.json"), encoding="utf-8") as f:
        template = json.load(f)["template"]
    path = str(tmp_path_factory.mktemp("harmony") / "SmolLM2-harmony.gguf")
    gguf_with_chat_template(smollm2_path, path, template)
    s = Server(spindle_bin, path, "--parallel", "2", "--ctx", "2048")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def chat(server, **kw):
    kw.setdefault("messages", Q)
    kw.setdefault("max_tokens", 60)
    kw.setdefault("temperature", 0)
    r = server.post("/v1/chat/completions", kw, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_channels_split_into_reasoning_and_content(server):
    grammar = "root ::= %s" % json.dumps(OUT)
    msg = chat(server, grammar=grammar)["choices"][0]["message"]
    assert msg["reasoning_content"] == "I reason." and msg["content"] == "Paris."
    chunks = list(server.openai().chat.completions.create(model=server.model_id, messages=Q, max_tokens=60,
                                                          temperature=0, stream=True,
                                                          extra_body={"grammar": grammar}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thought = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    text = "".join(d.content or "" for d in deltas)
    assert thought == "I reason." and text == "Paris."
    kinds = ["r" if getattr(d, "reasoning_content", None) else "c" for d in deltas
             if d.content or getattr(d, "reasoning_content", None)]
    assert len(kinds) > 2 and kinds == sorted(kinds, reverse=True)  # several deltas, reasoning first
    # reasoning_format none: the messages as the model wrote them
    msg = chat(server, grammar=grammar, reasoning_format="none")["choices"][0]["message"]
    assert msg["content"] == OUT and "reasoning_content" not in msg


def test_reasoning_content_and_effort_reach_the_template(server):
    base = chat(server, max_tokens=1)["usage"]["prompt_tokens"]
    turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, Q[0]]
    no_thinking = chat(server, messages=turn, max_tokens=1)["usage"]["prompt_tokens"]
    # an earlier turn's reasoning is dropped by the template; a tool call's is kept
    turn[1]["reasoning_content"] = "Greet back."
    assert chat(server, messages=turn, max_tokens=1)["usage"]["prompt_tokens"] == no_thinking
    call = [Q[0], {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]
    plain = chat(server, messages=call, tools=[WEATHER], max_tokens=1)["usage"]["prompt_tokens"]
    call[1]["reasoning_content"] = "Need the weather first."
    thought = chat(server, messages=call, tools=[WEATHER], max_tokens=1)["usage"]["prompt_tokens"]
    assert thought > plain + 4
    assert chat(server, max_tokens=1, reasoning_effort="high")["usage"]["prompt_tokens"] == base
    r = server.post("/v1/chat/completions", dict(messages=[Q[0], {"role": "assistant", "content": "x",
                                                                  "reasoning_content": 3}], max_tokens=1))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].reasoning_content", r.text
    # Ollama's capabilities name thinking for a Harmony template
    show = server.post("/api/show", {"model": server.model_id})
    assert show.status_code == 200 and "thinking" in show.json()["capabilities"], show.text


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_call(server, stream):
    kw = dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
              max_tokens=200)
    if not stream:
        r = chat(server, **kw)
        c = r["choices"][0]
        calls = c["message"].get("tool_calls") or []
        assert c["finish_reason"] == "tool_calls" and len(calls) == 1, r
        assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
        assert list(json.loads(calls[0]["function"]["arguments"]).items()) in ([("city", "Paris")], [("city", "Rome")])
        assert not c["message"]["content"], r  # the header before the recipient is no answer
        return
    name, args, finish = "", "", None
    for chunk in server.openai().chat.completions.create(model=server.model_id, messages=Q, temperature=0,
                                                         stream=True, **kw):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                name += d.function.name or "" if d.function else ""
                args += d.function.arguments or "" if d.function else ""
            finish = ch.finish_reason or finish
    assert finish == "tool_calls" and name == "get_weather" and json.loads(args)["city"] in ("Paris", "Rome")


def test_thinking_budget_closes_the_analysis_message(server):
    """Anthropic's thinking.budget_tokens bounds the analysis message: after that many tokens <|end|> is
    forced and the final message follows (the grammar lets the analysis run on; SmolLM2 ends it
    itself after 6 words)."""
    import anthropic
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    grammar = ('root ::= "<|channel|>analysis<|message|>" [a-z ]+ '
               '"<|end|><|start|>assistant<|channel|>final<|message|>Paris."')
    extra = {"temperature": 0, "grammar": grammar}
    free = c.messages.create(model=server.model_id, max_tokens=80, messages=Q, extra_body=extra)
    assert [(b.type, getattr(b, "text", None)) for b in free.content] == [("thinking", None), ("text", "Paris.")]
    m = c.messages.create(model=server.model_id, max_tokens=80, messages=Q, extra_body=extra,
                          thinking={"type": "enabled", "budget_tokens": 3})
    assert [(b.type, getattr(b, "text", None)) for b in m.content] == [("thinking", None), ("text", "Paris.")]
    assert m.content[0].thinking and free.content[0].thinking.startswith(m.content[0].thinking)
    assert len(m.content[0].thinking) < len(free.content[0].thinking)
    # cut by max_tokens inside the next message's header: the header is no answer
    cut = c.messages.create(model=server.model_id, max_tokens=free.usage.output_tokens - 6, messages=Q,
                            extra_body=extra)
    assert cut.content[0].thinking == free.content[0].thinking and cut.stop_reason == "max_tokens"
    assert not "".join(b.text for b in cut.content if b.type == "text"), cut.content


def test_other_apis_hand_back_thinking(server):
    """Anthropic's thinking blocks and Ollama's message thinking in an assistant turn with a tool call
    reach gpt-oss's template (its analysis message before the call): a longer prompt than without."""
    import anthropic
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    tools = [{"name": "get_weather", "description": "Current weather in a city.",
              "input_schema": WEATHER["function"]["parameters"]}]

    def count(blocks):
        msgs = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": blocks + [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                            "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}]}]
        return c.messages.count_tokens(model=server.model_id, messages=msgs, tools=tools).input_tokens
    plain = count([])
    assert count([{"type": "thinking", "thinking": "Need the weather first.", "signature": ""}]) > plain + 4
    assert count([{"type": "redacted_thinking", "data": "xyz"}]) == plain

    def ollama(thinking):
        m = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                            "arguments": {"city": "Paris"}}}]}
        if thinking:
            m["thinking"] = thinking
        body = {"model": server.model_id, "stream": False, "options": {"num_predict": 1, "temperature": 0},
                "tools": [WEATHER], "messages": [{"role": "user", "content": "Weather in Paris?"}, m,
                                                 {"role": "tool", "tool_name": "get_weather", "content": "21 C"}]}
        r = server.post("/api/chat", body, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["prompt_eval_count"]
    assert ollama("Need the weather first.") > ollama(None) + 4


def test_responses_reasoning_items_reach_the_template(server):
    """A Responses reasoning item before a function_call is that turn's reasoning_content."""
    def tokens(reasoning):
        items = [{"role": "user", "content": "Weather in Paris?"}]
        if reasoning:
            items.append({"type": "reasoning", "id": "rs_1", "summary": [],
                          "content": [{"type": "reasoning_text", "text": reasoning}]})
        items += [{"type": "function_call", "call_id": "call_1", "name": "get_weather",
                   "arguments": "{\"city\": \"Paris\"}"},
                  {"type": "function_call_output", "call_id": "call_1", "output": "21 C"}]
        tools = [dict(WEATHER["function"], type="function")]
        r = server.post("/v1/responses", {"model": server.model_id, "input": items, "tools": tools,
                                          "max_output_tokens": 16, "temperature": 0}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["usage"]["input_tokens"]
    assert tokens("Need the weather first.") > tokens(None) + 4
