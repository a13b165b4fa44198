#!/usr/bin/env python3
"""Writes golden data from llama.cpp (the reference) for ember's parity tests.

For each model (fixture models written by `ember fixture`, and the real named models):
  - token ids of a corpus of tricky strings (whitespace runs, digits, code, emoji, CJK, ...);
  - greedy continuations: for each prompt, GREEDY_STEPS tokens, with the top-5 logits and the
    log-probability of every top-5 token at each step.
llama.cpp runs with an F32 KV cache (type_k = type_v = 0) so that both sides keep keys and
values at full precision. The fixture's byte length and CRC-32 are recorded so a test can tell
a changed fixture generator (regenerate) from a changed forward pass (a bug).

Usage: tools/install_llama_cpp.sh && tools/gen_goldens.py --ember build/ember [--real-models]
       [--only NAME]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import zlib

CORPUS = [
    "Hello world",
    " Hello world",
    "Hello  world",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nmany",
    "\n\n\n",
    " ",
    "1234567890 12 123 1234 3.14159 -42 1e10",
    "I'm sure you've seen they'll it's WE'RE DON'T",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }",
    "emoji: 😀🎉👍🏽 🇫🇷 ❤️",
    "CJK: 日本語のテキスト 中文文本 한국어 텍스트",
    "mixed: naïve café Ωμέγα Привет мир مرحبا",
    "URLs: https://example.com/path?q=1&r=2#frag",
    "punctuation!!! ??? ... --- ''' \"\"\" ((()))",
    "UPPER lower MiXeD CamelCase snake_case kebab-case",
    "<|begin_of_text|> not special when unparsed",
]

PROMPTS = [
    "The capital of France is",
    "Once upon a time",
    "def add(a, b):",
    "1, 2, 3, 4,",
    "The quick brown fox",
    "In the beginning",
    "Hello, my name is",
    "Water boils at",
]

# Chat prompts, for instruction-tuned models with a ChatML template (SmolLM2): the README's
# question with ember's default system prompt, rendered as the template renders it.
CHATML_PROMPTS = [
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Write a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
]

# Real models, by ember's name for them (src/cli/model_path.h) -> extra prompts
REAL_MODELS = {
    "gemma3_270m": ("gemma3-270m", []),
    "smollm2_135m": ("smollm2-135m", CHATML_PROMPTS),
}

GREEDY_STEPS = 32
TOP_K = 5

# name -> ember fixture arguments (the real model has no fixture args)
FIXTURES = {
    "llama_f32": ["--arch", "llama", "--type", "F32", "--layers", "2", "--ctx", "2048"],
    "llama_q8_0_tied": ["--arch", "llama", "--type", "Q8_0", "--tied", "--ctx", "2048"],
    "llama_rope_freqs": ["--arch", "llama", "--type", "F32", "--rope-freqs", "--ctx", "2048"],
    "qwen3_f32": ["--arch", "qwen3", "--type", "F32", "--ctx", "2048"],
    "qwen3_f16_tied": ["--arch", "qwen3", "--type", "F16", "--tied", "--ctx", "2048"],
    # the block types of the default model, on rows long enough for K types (multiples of 256)
    "llama_q4_k": ["--arch", "llama", "--type", "Q4_K", "--embd", "256", "--ff", "512", "--ctx", "2048"],
    "llama_q6_k": ["--arch", "llama", "--type", "Q6_K", "--embd", "256", "--ff", "512", "--ctx", "2048"],
    "gemma3_f32": ["--arch", "gemma3", "--type", "F32", "--layers", "6", "--ctx", "2048"],
    "qwen2_f32": ["--arch", "qwen2", "--type", "F32", "--ctx", "2048"],
    "qwen2_q8_0_tied": ["--arch", "qwen2", "--type", "Q8_0", "--tied", "--ctx", "2048"],
    # fused QKV and gate+up; LongRoPE's long factors (the context exceeds the original 1024)
    "phi3_f32": ["--arch", "phi3", "--type", "F32", "--ctx", "2048"],
    # head_dim 32 (the vector attention kernels' size), a window the prompts and continuations
    # cross (gemma2 slides on layers 0 and 2), and the fixture's soft-caps that bite
    "gemma2_f32": ["--arch", "gemma2", "--type", "F32", "--layers", "4", "--embd", "128",
                   "--sliding-window", "16", "--ctx", "2048"],
}


def crc32_of(path):
    crc = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return crc & 0xFFFFFFFF
            crc = zlib.crc32(b, crc)


def run_reference(path, n_ctx, extra_prompts=(), n_threads=None):
    from llama_cpp import Llama

    import numpy as np

    # The prompt is evaluated as one batch, as llama.cpp does by default. (Its one-token-at-a-
    # time path rounds differently: on the default model its own first-step log-probabilities
    # move by up to 0.41 between n_batch 512 and 1, which bounds how closely any other
    # implementation can be asked to agree; see tests/golden/parity_test.cc.)
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=n_threads or os.cpu_count() or 2,
                logits_all=True, type_k=0, type_v=0, verbose=False)
    out = {"tokenize": [], "greedy": []}
    for text in CORPUS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        out["tokenize"].append({"text": text, "parse_special": False, "ids": list(ids)})
    special_text = "<|begin_of_text|>Hi<|eot_id|>" if "begin_of_text" in str(
        llm.detokenize([llm.token_bos()], special=True)) else None
    if special_text:
        ids = llm.tokenize(special_text.encode(), add_bos=False, special=True)
        out["tokenize"].append({"text": special_text, "parse_special": True, "ids": list(ids)})
    for prompt in PROMPTS + list(extra_prompts):
        llm.reset()
        ids = list(llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
        llm.eval(ids)
        steps = []
        for _ in range(GREEDY_STEPS):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            lse = row.max() + math.log(float(np.exp(row - row.max()).sum()))
            order = sorted(np.argpartition(-row, TOP_K)[:TOP_K].tolist(),
                           key=lambda i: (-row[i], i))
            steps.append({"top": [[int(i), float(np.float32(row[i])), float(row[i] - lse)]
                                  for i in order]})
            llm.eval([order[0]])
        out["greedy"].append({"prompt": prompt, "prompt_ids": ids, "steps": steps})
    return out


def model_path(ember, name):
    """The installed file of a named model, as `ember models` reports it."""
    out = subprocess.run([ember, "models"], check=True, capture_output=True, text=True).stdout
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            current = line.split()[0]
        elif current == name and line.strip().startswith("path: "):
            return line.strip()[len("path: "):]
    sys.exit(f"gen_goldens: model {name} is not installed (ember models)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default="build/ember")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                       "golden"))
    ap.add_argument("--only", default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="llama.cpp threads (default: all cores; 1 on a busy machine, where "
                         "its spinning threads crawl)")
    ap.add_argument("--real-models", action="store_true",
                    help="also write goldens for the real named models (gemma3-270m, "
                         "smollm2-135m), which must be installed")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    work = os.path.join(args.out_dir, "fixtures.tmp")
    os.makedirs(work, exist_ok=True)
    jobs = [(n, a) for n, a in FIXTURES.items()]
    if args.real_models:
        jobs += [(n, None) for n in REAL_MODELS]
    for name, fargs in jobs:
        if args.only and name != args.only:
            continue
        if fargs is not None:
            path = os.path.join(work, name + ".gguf")
            subprocess.run([args.ember, "fixture", *fargs, "--out", path], check=True)
            n_ctx = 2048
            record = {"fixture_args": fargs, "fixture_bytes": os.path.getsize(path),
                      "fixture_crc32": crc32_of(path)}
            extra = ()
        else:
            model_name, extra = REAL_MODELS[name]
            path = model_path(args.ember, model_name)
            n_ctx = 2048
            record = {"model": model_name, "model_bytes": os.path.getsize(path)}
        print(f"gen_goldens: {name}: running llama.cpp on {path}", file=sys.stderr)
        record.update(run_reference(path, n_ctx, extra, args.threads))
        record["reference"] = "llama-cpp-python " + __import__("llama_cpp").__version__
        with open(os.path.join(args.out_dir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(record, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
