#!/usr/bin/env python3
"""Function calling through `graphc serve`, read by the official `openai` Python client.

    python tools/openai_tools_check.py GRAPHC_BINARY CHECKPOINT

CHECKPOINT must have a chat template that shows the model tools (CI uses
Qwen2.5-Coder-0.5B-Instruct). Checks that the client reads the answers
into its own typed objects: a forced call (`tool_choice: required`, then a
named function) is a `ChatCompletionMessageToolCall` naming a listed
function whose `arguments` parse into the parameters' shape; a streamed
call, put together from `delta.tool_calls` by index as the client's users
do, equals the whole answer; a conversation that carries the call and its
result is answered; and a tool for a template that shows none is refused
as a typed `BadRequestError`. Exits non-zero on the first mismatch.
"""
import atexit
import json
import re
import signal
import subprocess
import sys

import openai

BIN, MODEL = sys.argv[1], sys.argv[2]
failures = 0


def check(what, ok, detail=""):
    global failures
    if not ok:
        failures += 1
        print(f"FAIL {what}: {detail}")
    else:
        print(f"ok   {what}")


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "scale", "description": "Multiply a number by a factor.",
        "parameters": {"type": "object", "properties": {"x": {"type": "number"}, "factor": {"type": "number"}},
                       "required": ["x", "factor"]}}},
]
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]

server = subprocess.Popen([BIN, "serve", MODEL, "--port", "0", "--slots", "2", "--max-seq", "1024"],
                          stderr=subprocess.PIPE, text=True)
# A check that dies on an exception must not leave the server running.
atexit.register(lambda: server.poll() is None and server.kill())
line = server.stderr.readline()
m = re.search(r"serving `([^`]+)` on http://(\S+)", line)
if not m:
    sys.exit(f"the server did not start: {line}{server.stderr.read()}")
name, addr = m.group(1), m.group(2)
print(f"server: {line.strip()}")
client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="unused")

# A forced call: some listed function, then a named one.
r = client.chat.completions.create(model=name, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                                   max_tokens=64)
c = r.choices[0]
calls = c.message.tool_calls or []
check("required: finish_reason tool_calls", c.finish_reason == "tool_calls", c)
check("required: one call of get_weather", len(calls) == 1 and calls[0].function.name == "get_weather", calls)
args = json.loads(calls[0].function.arguments) if calls else {}
check("required: arguments have the parameters' shape", isinstance(args.get("city"), str)
      and set(args) <= {"city", "unit"}, args)
whole = [(t.function.name, json.loads(t.function.arguments)) for t in calls]

r = client.chat.completions.create(model=name, messages=ASK, tools=TOOLS, temperature=0, max_tokens=64,
                                   tool_choice={"type": "function", "function": {"name": "scale"}})
calls = r.choices[0].message.tool_calls or []
args = json.loads(calls[0].function.arguments) if calls else {}
check("named: a call of scale with x and factor", len(calls) == 1 and calls[0].function.name == "scale"
      and set(args) == {"x", "factor"}, calls)

# Streamed: the call put together from its deltas equals the whole answer.
stream = client.chat.completions.create(model=name, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                                        max_tokens=64, stream=True)
parts, finish, content = {}, None, ""
for ch in stream:
    if not ch.choices:
        continue
    d = ch.choices[0].delta
    content += d.content or ""
    for t in d.tool_calls or []:
        p = parts.setdefault(t.index, {"name": "", "arguments": ""})
        p["name"] += (t.function.name or "") if t.function else ""
        p["arguments"] += (t.function.arguments or "") if t.function else ""
    finish = ch.choices[0].finish_reason or finish
streamed = [(p["name"], json.loads(p["arguments"])) for _, p in sorted(parts.items())]
check("streamed call equals the whole one", streamed == whole, (streamed, whole))
check("streamed: no content, finish tool_calls", content == "" and finish == "tool_calls", (content, finish))

# A tool made from a pydantic model (strict: nested model as $defs / $ref),
# forced: its arguments parse into the model.
import pydantic  # noqa: E402  (the openai client's own dependency)


class Place(pydantic.BaseModel):
    city: str
    country: str


class Forecast(pydantic.BaseModel):
    place: Place
    days: int


r = client.chat.completions.create(model=name, messages=ASK, temperature=0, max_tokens=64,
                                   tools=[openai.pydantic_function_tool(Forecast)], tool_choice="required")
calls = r.choices[0].message.tool_calls or []
try:
    f = Forecast.model_validate_json(calls[0].function.arguments)
    check("a pydantic tool's forced arguments validate", True)
    print(f"     {f!r}")
except (IndexError, pydantic.ValidationError) as e:
    check("a pydantic tool's forced arguments validate", False, e)

# The call and its result in the history: answered.
history = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18, "sky": "clear"}'},
]
r = client.chat.completions.create(model=name, messages=history, tools=TOOLS, temperature=0, max_tokens=24)
check("a conversation with a call and its result is answered", r.choices[0].finish_reason in ("stop", "length")
      and r.usage.prompt_tokens > 200, r)

# A bad tool is the client's typed error.
try:
    client.chat.completions.create(model=name, messages=ASK, tools=[{"type": "function", "function": {"name": "a b"}}])
    check("bad tool name refused", False, "answered")
except openai.BadRequestError as e:
    check("bad tool name refused", "tools[0].function.name" in str(e), e)

server.send_signal(signal.SIGTERM)
check("exit after SIGTERM", server.wait(timeout=60) == 0)
sys.exit(1 if failures else 0)
