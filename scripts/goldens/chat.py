#!/usr/bin/env python3
"""Chat-template goldens for tests/unit/test_chat.c.

Renders every template of the test data (build/testdata/chat-templates/, from
llama.cpp's models/templates/ in the llama-cpp-python 0.3.36 sdist, unpacked by
`scripts/fetch-model testdata`), the extra
templates in tests/goldens/chat/templates/ (spindle's built-in Gemma turn
format, src/chat/prompt.c: the local Gemma 3 GGUF carries no template) and the templates
stored in the GGUF metadata (tokenizer.chat_template) of the local models with Python's jinja2, configured as HF transformers does
(ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True,
loopcontrols, HF's tojson filter, globals
raise_exception and strftime_now with a fixed date), over a fixed set of
conversations.  Writes one tests/goldens/chat/NAME.json per template:

  {"template": "<jinja source>", "source": "<where it came from>",
   "jinja2": "<version>", "cases": [
     {"name": ..., "messages": [{"role":..,"content":..}], "add_generation_prompt": bool,
      "bos_token": .., "eos_token": .., "output": "<text>"  |  "error": "<message>"}]}

`tools` and `documents` are left undefined there.  Templates in the Harmony
format (gpt-oss: they write "<|channel|>") also get tests/goldens/chat-harmony/NAME.json:
conversations as an OpenAI client sends them (content null beside tool_calls,
reasoning_content, arguments as JSON text) with tools and template variables
(reasoning_effort), each rendered from the messages llama.cpp hands the
template (common_chat_msg::to_json_oaicompat and common/parsers/gpt-oss.cpp:
content "" for none, reasoning_content only when not empty and copied to
`thinking`, content dropped beside reasoning and tool calls, arguments as
objects).  The tool-use goldens go to
tests/goldens/chat-tools/NAME.json, same shape, each case with "tools" too:
conversations with tool definitions, assistant messages with tool_calls
(arguments as objects, as HF documents) and tool results.
Usage: scripts/goldens/chat.py [--models DIR] [--templates DIR] [--out DIR] [--tools-out DIR] [--harmony-out DIR]
"""
import argparse
import json
import os
import struct
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# --- a tiny GGUF metadata reader (only what we need: string values) ---------
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
           7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read_str(f):
    (n,) = struct.unpack("<Q", f.read(8))
    return f.read(n).decode("utf-8")


def _skip_or_read(f, t):
    if t in _SCALAR:
        fmt = _SCALAR[t]
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
    if t == 8:
        return _read_str(f)
    if t == 9:
        (et,) = struct.unpack("<I", f.read(4))
        (n,) = struct.unpack("<Q", f.read(8))
        if et in _SCALAR:
            f.seek(n * struct.calcsize(_SCALAR[et]), 1)
        else:
            for _ in range(n):
                _skip_or_read(f, et)
        return None
    raise ValueError("bad gguf type %d" % t)


def gguf_string(path, key):
    with open(path, "rb") as f:
        magic, _version, _nt, nkv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF":
            raise ValueError(path + ": not a GGUF file")
        for _ in range(nkv):
            k = _read_str(f)
            (t,) = struct.unpack("<I", f.read(4))
            v = _skip_or_read(f, t)
            if k == key:
                return v
    return None


# --- environment as HF transformers builds it --------------------------------
def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    # A fixed date so goldens are reproducible; test_chat.c uses the same.
    import datetime
    return datetime.datetime(2024, 7, 26, 12, 0, 0).strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # HF replaces jinja2's tojson (which sorts keys and HTML-escapes) with this.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


SYS = {"role": "system", "content": "You are a helpful assistant."}
CONVS = [
    ("sys_user", [SYS, {"role": "user", "content": "Hello! How are you?"}]),
    ("user_only", [{"role": "user", "content": "What is 2+2?"}]),
    ("multi_turn", [SYS,
                    {"role": "user", "content": "Hi there"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}]),
    ("multi_turn_nosys", [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "  Hello.  "},
                          {"role": "user", "content": "Bye\n"}]),
    ("unicode", [{"role": "user", "content": "Grüße, 世界! 🚀 naïve café — ok?"}]),
    ("jinja_text", [{"role": "user",
                     "content": "Show me {{ x }} and {% if a %}b{% endif %} and {# c #} verbatim."}]),
    ("ends_assistant", [{"role": "user", "content": "Say yes."},
                        {"role": "assistant", "content": "Yes."}]),
    ("empty_content", [{"role": "user", "content": ""}]),
    ("quotes_newlines", [SYS, {"role": "user",
                               "content": "Line 1\n\n  indented 'single' \"double\" back\\slash\ttab\n"}]),
    ("assistant_first", [{"role": "assistant", "content": "I start."},
                         {"role": "user", "content": "ok"}]),
    ("reasoning", [{"role": "user", "content": "Why?"},
                   {"role": "assistant", "content": "<think>\nLet me see.\n</think>\n\nBecause."},
                   {"role": "user", "content": "Thanks"},
                   {"role": "assistant", "content": "<think>ok</think>You're welcome."}]),
    ("bad_alternation", [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]),
]
TOKENS = [("<s>", "</s>"), ("<|begin_of_text|>", "<|eot_id|>")]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a timezone.",
        "parameters": {"type": "object", "properties": {
            "tz": {"type": "string", "description": "IANA timezone"}}, "required": ["tz"]}}},
]
CALL1 = {"id": "call00001", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL2 = {"id": "call00002", "type": "function",
         "function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}}
ASK = {"role": "user", "content": "What's the weather and time in Paris?"}
TOOL_CONVS = [
    ("tools_sys_user", [SYS, ASK]),
    ("tools_user_only", [ASK]),
    ("tool_round_trip", [SYS, ASK,
                         {"role": "assistant", "content": None, "tool_calls": [CALL1]},
                         {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
                          "content": "{\"temperature\": 21}"}]),
    ("tool_parallel", [ASK,
                       {"role": "assistant", "content": None, "tool_calls": [CALL1, CALL2]},
                       {"role": "tool", "tool_call_id": "call00001", "content": "21 C"},
                       {"role": "tool", "tool_call_id": "call00002", "content": "12:00"},
                       {"role": "assistant", "content": "It is 21 C and noon."},
                       {"role": "user", "content": "Thanks"}]),
]


RICH_TOOLS = TOOLS + [
    {"type": "function", "function": {
        "name": "search", "description": "Search the catalogue.",
        "parameters": {"type": "object", "properties": {
            "terms": {"type": "array", "items": {"type": "string"}, "description": "Words to find"},
            "limit": {"type": "integer", "default": 10},
            "exact": {"type": "boolean"},
            "sort": {"type": "string", "enum": ["price", "date"], "default": "date"},
            "range": {"type": "object", "properties": {"lo": {"type": "number"}, "hi": {"type": "number"}},
                      "required": ["lo"]},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "owner": {"type": "string", "nullable": True},
            "id": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            "required": ["terms"]}}},
    {"type": "function", "function": {
        "name": "ping", "description": "Checks the service.",
        "parameters": {"type": "object", "properties": {}}}},
]
CALL1_API = {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}
RESULT1 = {"role": "tool", "tool_call_id": "call00001", "content": "{\"temperature\": 21}"}
HARMONY_CONVS = [
    ("effort_high", [SYS, ASK], TOOLS, {"reasoning_effort": "high"}),
    ("developer_low", [{"role": "developer", "content": "Answer in French."},
                       {"role": "user", "content": "Hi"}], None, {"reasoning_effort": "low"}),
    ("thinking_history", [{"role": "user", "content": "Why?"},
                          {"role": "assistant", "content": "Because.", "reasoning_content": "Let me see."},
                          {"role": "user", "content": "Thanks"}], None, None),
    ("thinking_last", [{"role": "user", "content": "Why?"},
                       {"role": "assistant", "content": "Because.", "reasoning_content": "Let me see."}], None, None),
    ("tool_thinking", [SYS, ASK, {"role": "assistant", "content": None, "reasoning_content": "Need the weather.",
                                  "tool_calls": [CALL1_API]}, RESULT1], TOOLS, None),
    ("tool_then_final", [ASK, {"role": "assistant", "content": None, "tool_calls": [CALL1_API]}, RESULT1,
                         {"role": "assistant", "content": "It is 21 C."},
                         {"role": "user", "content": "Thanks"}], TOOLS, {"reasoning_effort": "medium"}),
    ("tool_content_analysis", [ASK, {"role": "assistant", "content": "Checking the weather.",
                                     "tool_calls": [CALL1_API]}, RESULT1], TOOLS, None),
    ("rich_tools", [ASK], RICH_TOOLS, {"reasoning_effort": "low"}),
]


def llama_cpp_harmony_messages(msgs):
    """The messages llama.cpp's server hands gpt-oss's template."""
    out = []
    for m in msgs:
        j = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("reasoning_content"):
            j["reasoning_content"] = m["reasoning_content"]
        for k in ("name", "tool_call_id"):
            if m.get(k):
                j[k] = m[k]
        if m.get("tool_calls"):
            j["tool_calls"] = [{"id": c["id"], "type": "function",
                                "function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        if "reasoning_content" in j:
            j["thinking"] = j["reasoning_content"]
            if j.get("tool_calls"):
                del j["content"]
        out.append(j)
    return out


def render_harmony(env, src):
    tmpl = env.from_string(src)
    cases = []
    for name, msgs, tools, variables in HARMONY_CONVS:
        for agp in (True, False):
            case = {"name": "%s/agp=%d" % (name, agp), "messages": msgs, "add_generation_prompt": agp}
            extra = dict(variables or {})
            if tools is not None:
                case["tools"] = extra["tools"] = tools
            if variables:
                case["vars"] = variables
            try:
                case["output"] = tmpl.render(messages=llama_cpp_harmony_messages(msgs), add_generation_prompt=agp,
                                             bos_token="", eos_token="", **extra)
            except Exception as e:  # noqa: BLE001 - any failure is the expected result
                case["error"] = "%s: %s" % (type(e).__name__, e)
            cases.append(case)
    return cases


def render_cases(env, src, convs=CONVS, tools=None):
    tmpl = env.from_string(src)
    cases = []
    for name, msgs in convs:
        for agp in (True, False):
            for bos, eos in TOKENS[:1] if name != "sys_user" else TOKENS:
                case = {"name": "%s/agp=%d/bos=%s" % (name, agp, bos), "messages": msgs,
                        "add_generation_prompt": agp, "bos_token": bos, "eos_token": eos}
                extra = {}
                if tools is not None:
                    case["tools"] = extra["tools"] = tools
                try:
                    case["output"] = tmpl.render(messages=msgs, add_generation_prompt=agp,
                                                 bos_token=bos, eos_token=eos, **extra)
                except Exception as e:  # noqa: BLE001 - any failure is the expected result
                    case["error"] = "%s: %s" % (type(e).__name__, e)
                cases.append(case)
    return cases


def write(out_dir, name, src, origin, cases):
    doc = {"template": src, "source": origin, "jinja2": jinja2.__version__, "cases": cases}
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    nerr = sum(1 for c in cases if "error" in c)
    print("%-55s %3d cases, %d errors" % (name, len(cases), nerr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default=None, help="default: the test data's chat-templates/")
    ap.add_argument("--models", nargs="*", default=[
        os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")])
    ap.add_argument("--extra", default=os.path.join(ROOT, "tests", "goldens", "chat", "templates"),
                    help="more .jinja templates (Gemma 3 / Qwen3 style), rendered as extra-NAME")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "goldens", "chat"))
    ap.add_argument("--tools-out", default=os.path.join(ROOT, "tests", "goldens", "chat-tools"))
    ap.add_argument("--harmony-out", default=os.path.join(ROOT, "tests", "goldens", "chat-harmony"))
    args = ap.parse_args()
    env = make_env()
    label = "llama.cpp models/templates/ (llama-cpp-python 0.3.36 sdist): "
    if args.templates is None:
        import subprocess
        data = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model"), "testdata"],
                              stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        args.templates = os.path.join(data, "chat-templates")
    else:
        label = args.templates.rstrip("/") + "/"
    sources = []
    for fn in sorted(os.listdir(args.templates)):
        if fn.endswith(".jinja"):
            with open(os.path.join(args.templates, fn), encoding="utf-8") as f:
                sources.append((fn[:-len(".jinja")], f.read(), label + fn))
    if args.extra and os.path.isdir(args.extra):
        for fn in sorted(os.listdir(args.extra)):
            if fn.endswith(".jinja"):
                with open(os.path.join(args.extra, fn), encoding="utf-8") as f:
                    sources.append(("extra-" + fn[:-len(".jinja")], f.read(),
                                    "tests/goldens/chat/templates/" + fn))
    for path in args.models:
        if not os.path.exists(path):
            print("missing model %s" % path, file=sys.stderr)
            sys.exit(1)
        src = gguf_string(path, "tokenizer.chat_template")
        base = os.path.basename(path)
        if src is None:
            # gemma-3-270m-q4_k_m.gguf ships without one; the engine then
            # uses the built-in fallback, so there is nothing to compare.
            print("%s: no tokenizer.chat_template, skipped" % base, file=sys.stderr)
            continue
        sources.append(("gguf-" + base.split(".")[0], src, base + ":tokenizer.chat_template"))
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.tools_out, exist_ok=True)
    for name, src, origin in sources:
        write(args.out, name, src, origin, render_cases(env, src))
        write(args.tools_out, name, src, origin, render_cases(env, src, TOOL_CONVS, TOOLS))
        if "<|channel|>" in src:
            os.makedirs(args.harmony_out, exist_ok=True)
            write(args.harmony_out, name, src, origin, render_harmony(env, src))


if __name__ == "__main__":
    main()
