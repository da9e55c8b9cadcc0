#!/usr/bin/env python3
"""Drive `graphc serve` with the official `openai` Python client and check
every answer token by token against `graphc run` on the same prompt.

    python tools/openai_client_check.py GRAPHC_BINARY CHECKPOINT

Starts the server on a free loopback port, runs chat and completions, whole
and streamed, with stop strings and logprobs, eight requests at once, and
two refusals; then sends SIGTERM and expects a clean exit. CI runs it
(.ci/run) in a venv with `openai` from PyPI. Exits non-zero on the first
mismatch, printing both sides.
"""
import atexit
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys

import openai

BIN, MODEL = sys.argv[1], sys.argv[2]
PROMPTS = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "serve", "prompts.json")))["prompts"]
failures = 0


def check(what, got, want):
    global failures
    if got != want:
        failures += 1
        print(f"FAIL {what}\n  served: {got!r}\n  run:    {want!r}")
    else:
        print(f"ok   {what}")


def run(prompt, n, chat=False, system=None, stop=None):
    """`graphc run --json`: the reference answer."""
    cmd = [BIN, "run", MODEL, "--prompt", prompt, "-n", str(n), "--json"]
    if chat:
        cmd.append("--chat")
    if system:
        cmd += ["--system", system]
    for s in stop or []:
        cmd += ["--stop", s]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    # The server sends no text for the end-of-generation token.
    out["served_texts"] = out["token_texts"][:-1] if out["finish"] == "stop" and out["stopped_on_eos"] else out["token_texts"]
    return out


server = subprocess.Popen([BIN, "serve", MODEL, "--port", "0", "--slots", "4", "--max-seq", "512"], stderr=subprocess.PIPE, text=True)
# A check that dies on an exception must not leave the server running.
atexit.register(lambda: server.poll() is None and server.kill())
line = server.stderr.readline()
m = re.search(r"serving `([^`]+)` on http://(\S+)", line)
if not m:
    sys.exit(f"the server did not start: {line}{server.stderr.read()}")
name, addr = m.group(1), m.group(2)
print(f"server: {line.strip()}")
client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="unused")

check("models lists the checkpoint", [x.id for x in client.models.list().data], [name])

# Completions, whole, with log-probabilities: token by token.
for p in PROMPTS[:3]:
    want = run(p, 16)
    r = client.completions.create(model=name, prompt=p, max_tokens=16, temperature=0, logprobs=1)
    c = r.choices[0]
    check(f"completion tokens {p!r}", c.logprobs.tokens, want["served_texts"])
    check(f"completion text {p!r}", c.text, want["text"])
    check(f"completion usage {p!r}", (r.usage.prompt_tokens, r.usage.completion_tokens), (len(want["prompt_ids"]), len(want["tokens"])))
    check(f"completion finish {p!r}", c.finish_reason, want["finish"])

# Completions, streamed.
want = run(PROMPTS[3], 20)
stream = client.completions.create(model=name, prompt=PROMPTS[3], max_tokens=20, temperature=0, stream=True)
check("streamed completion", "".join(ch.choices[0].text for ch in stream if ch.choices), want["text"])

# Stop strings.
want = run(PROMPTS[3], 20, stop=["7"])
r = client.completions.create(model=name, prompt=PROMPTS[3], max_tokens=20, temperature=0, stop=["7"])
check("stop string", (r.choices[0].text, r.choices[0].finish_reason), (want["text"], "stop"))

# Chat, whole, with log-probabilities and alternatives.
question, system = "What is the capital of France?", "You are a helpful assistant."
want = run(question, 40, chat=True, system=system)
messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
r = client.chat.completions.create(model=name, messages=messages, max_tokens=40, temperature=0, logprobs=True, top_logprobs=3)
c = r.choices[0]
check("chat text", c.message.content, want["text"])
check("chat tokens", [t.token for t in c.logprobs.content], want["served_texts"])
check("chat greedy = most likely", [t.top_logprobs[0].token for t in c.logprobs.content], want["served_texts"])
check("chat usage", (r.usage.prompt_tokens, r.usage.completion_tokens), (len(want["prompt_ids"]), len(want["tokens"])))

# Chat, streamed, with the usage chunk.
stream = client.chat.completions.create(
    model=name, messages=messages, max_tokens=40, temperature=0, stream=True, stream_options={"include_usage": True}
)
chunks = list(stream)
check("streamed chat", "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices), want["text"])
check("streamed chat usage", chunks[-1].usage.completion_tokens, len(want["tokens"]))
# The same conversation again: the slot that answered it holds all of its
# prompt but the last id (run again for its logits), and says so.
check("prompt cache", chunks[-1].usage.prompt_tokens_details.cached_tokens, len(want["prompt_ids"]) - 1)

# Structured outputs from pydantic models, as the client's `parse` sends them
# (strict json_schema: nested models as $defs / $ref, Optional as anyOf with
# null, a bounded list as maxItems): the answer parses into the model.
import pydantic  # noqa: E402  (the openai client's own dependency)


class City(pydantic.BaseModel):
    name: str
    population: int


class Answer(pydantic.BaseModel):
    country: str
    capital: City
    neighbours: list[str] = pydantic.Field(max_length=2)
    motto: str | None


parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
r = parse(model=name, messages=messages, response_format=Answer, max_tokens=300, temperature=0)
parsed = r.choices[0].message.parsed
check("structured output parses into the pydantic model", type(parsed).__name__ if parsed is not None else None, "Answer")
print(f"     {parsed!r}")

# Eight at once: each as `graphc run` alone.
wants = [run(p, 12) for p in PROMPTS]
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    answers = list(pool.map(lambda p: client.completions.create(model=name, prompt=p, max_tokens=12, temperature=0, logprobs=0), PROMPTS))
for p, a, w in zip(PROMPTS, answers, wants):
    check(f"concurrent {p!r}", a.choices[0].logprobs.tokens, w["served_texts"])

# Refusals come back as the client's typed errors.
for what, kwargs, error in [
    ("unknown model", dict(model="gpt-4", prompt="x", max_tokens=2), openai.NotFoundError),
    ("max_tokens 0", dict(model=name, prompt="x", max_tokens=0), openai.BadRequestError),
]:
    try:
        client.completions.create(**kwargs)
        check(what, "answered", error.__name__)
    except error as e:
        check(what, error.__name__, error.__name__)
        print(f"     {e}")

server.send_signal(signal.SIGTERM)
check("exit after SIGTERM", server.wait(timeout=60), 0)
sys.exit(1 if failures else 0)
