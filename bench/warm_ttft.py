#!/usr/bin/env python3
"""Time to first token of a request whose ~2,000-token system prompt a previous server run has
seen, cold (fresh server, nothing cached) vs warm (the previous run saved its warm state on
SIGTERM; this one loaded it at start). Prints one line per run and the median ratio.

  python3 bench/warm_ttft.py --ember build/ember [--model default] [--threads 2] [--reps 3]
"""
import argparse
import http.client
import json
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from conftest import Server  # noqa: E402  (the integration tests' server runner)
from test_warm_restart import system_prompt  # noqa: E402


def start(ember, model, threads, warm_dir):
    s = Server(ember, model, "--warm-cache-dir", warm_dir, threads=threads)
    s.wait_ready(timeout=300)
    return s


def stop(server):
    server.signal(signal.SIGTERM)
    return server.wait_exit(120)


def ttft(port, question):
    body = json.dumps({"model": "default", "temperature": 0, "max_tokens": 8, "stream": True,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "system", "content": system_prompt(1900)},
                                    {"role": "user", "content": question}]})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first, usage = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if first is None and any(ch.get("delta", {}).get("content") for ch in ev.get("choices", [])):
            first = time.monotonic() - t0
        if ev.get("usage"):
            usage = ev["usage"]
    return first, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default="build/ember")
    ap.add_argument("--model", default="default")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    ratios = []
    for rep in range(a.reps):
        with tempfile.TemporaryDirectory() as d:
            # Cold: a fresh server answers the second question with nothing cached.
            s = start(a.ember, a.model, a.threads, os.path.join(d, "cold"))
            cold, cu = ttft(s.port, "What is the last word of the notes?")
            stop(s)
            # Warm: a first run sees the system prompt and saves on SIGTERM; the second loads.
            s = start(a.ember, a.model, a.threads, os.path.join(d, "warm"))
            ttft(s.port, "Summarize the notes.")
            assert stop(s) == 0
            s = start(a.ember, a.model, a.threads, os.path.join(d, "warm"))
            warm, wu = ttft(s.port, "What is the last word of the notes?")
            stop(s)
        ratios.append(cold / warm)
        print(f"rep {rep}: prompt {cu['prompt_tokens']} tokens; cold TTFT {cold * 1000:.0f} ms "
              f"(cached {cu['prompt_tokens_details']['cached_tokens']}), warm TTFT "
              f"{warm * 1000:.0f} ms (cached {wu['prompt_tokens_details']['cached_tokens']}), "
              f"{cold / warm:.1f}x", flush=True)
    print(f"median speed-up warm vs cold: {statistics.median(ratios):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
