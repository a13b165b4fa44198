#!/usr/bin/env python3
"""Per-token cost of the subprocess engine: decode throughput of `ember serve --engine subprocess`
against `--engine in-process`, same model, same prompt (temperature 0, so the same tokens),
interleaved rounds so both see the same machine load. Prints the median and min-max of each and
the median overhead, and the CPU time the server's processes (front + worker) spent per token,
which a busy machine disturbs far less than wall-clock rates. Usage: bench/worker_overhead.py [--ember build/ember] [--model default]
[--rounds 9] [--tokens 128] [--threads 1]"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import threading
import time


def start(ember, model, engine, threads):
    p = subprocess.Popen([ember, "serve", "--model", model, "--port", "0", "--threads", str(threads),
                          "--engine", engine, "--log-level", "warn"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    port = None
    for raw in p.stderr:
        m = re.search(rb"listening on http://[^:]+:(\d+)", raw)
        if m:
            port = int(m.group(1))
        if b"ready" in raw:
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port


def cpu_seconds(pid):
    """CPU time of a process and its children (the worker)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/children") as f:
            for k in f.read().split():
                total += cpu_seconds(int(k))
    return total


def decode_rate(port, tokens):
    """Tokens per second between the first and the last streamed token."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"model": "default", "prompt": "The history of the city begins", "max_tokens": tokens,
            "temperature": 0, "stream": True}
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: {") and b'"text"' in ev:
                times.append(time.perf_counter())
    c.close()
    n = len(times)
    return (n - 1) / (times[-1] - times[0]) if n > 2 else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default="build/ember")
    ap.add_argument("--model", default="default")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    servers = {e: start(a.ember, a.model, e, a.threads) for e in ("subprocess", "in-process")}
    rates = {e: [] for e in servers}
    cpu = {e: [] for e in servers}
    try:
        for e, (_, port) in servers.items():
            decode_rate(port, 16)  # warm-up
        for i in range(a.rounds):
            order = list(servers) if i % 2 == 0 else list(reversed(list(servers)))
            for e in order:
                c0 = cpu_seconds(servers[e][0].pid)
                rates[e].append(decode_rate(servers[e][1], a.tokens))
                cpu[e].append((cpu_seconds(servers[e][0].pid) - c0) / a.tokens * 1000)
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()
    for e, r in rates.items():
        print(f"{e:11s} decode tok/s: median {statistics.median(r):.1f} "
              f"(min {min(r):.1f}, max {max(r):.1f}, n={len(r)})")
    for e, c in cpu.items():
        print(f"{e:11s} CPU ms per token (front + worker): median {statistics.median(c):.2f} "
              f"(min {min(c):.2f}, max {max(c):.2f})")
    # Per round, paired: robust to load that drifts between rounds.
    paired = [1 - s / i for s, i in zip(rates["subprocess"], rates["in-process"])]
    print(f"subprocess overhead: median {100 * statistics.median(paired):.2f}% "
          f"(min {100 * min(paired):.2f}%, max {100 * max(paired):.2f}%)")


if __name__ == "__main__":
    main()
