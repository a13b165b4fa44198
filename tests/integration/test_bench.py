"""`ember bench --simd-level` (or EMBER_SIMD_LEVEL, as for serve and run): the kernels of a named
level run (for A/B of levels on one host), and a level this CPU lacks or that does not exist is
refused with a message naming it. Also what bench measures at a depth, with --pool-timing, and
how it prints a 1-thread probe."""
import json
import os
import re
import subprocess


def _fixture(ember, tmp_path):
    model = str(tmp_path / "llama.gguf")
    subprocess.run([ember, "fixture", "--arch", "llama", "--layers", "2", "--out", model],
                   check=True, capture_output=True)
    return model


def test_bench_runs_the_named_simd_level(ember, tmp_path):
    model = _fixture(ember, tmp_path)
    for level in ("scalar", None):
        args = [ember, "bench", "-m", model, "-t", "1", "-p", "8", "-n", "4", "-c", "", "-r", "1",
                "--no-bandwidth", "--json"]
        if level:
            args += ["--simd-level", level]
        r = json.loads(subprocess.run(args, check=True, capture_output=True, text=True,
                                      timeout=120).stdout)
        if level:
            assert r["simd_level"] == level
        else:
            assert r["simd_level"] != "scalar"  # every host of this project has AVX2
        assert r["decode"]["tok_s"]["median"] > 0


def test_bench_refuses_an_unknown_simd_level_naming_it_and_the_levels_it_has(ember, tmp_path):
    model = _fixture(ember, tmp_path)
    p = subprocess.run([ember, "bench", "-m", model, "--simd-level", "avx9000", "-c", ""],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "avx9000" in p.stderr and "scalar" in p.stderr and "avx2" in p.stderr
    assert p.stdout == ""


def test_bench_reads_ember_simd_level_as_serve_and_run_do(ember, tmp_path):
    # The README's EMBER_SIMD_LEVEL: the same setting as `ember serve --simd-level`.
    model = _fixture(ember, tmp_path)
    env = {**os.environ, "EMBER_SIMD_LEVEL": "scalar"}
    r = subprocess.run([ember, "bench", "-m", model, "-t", "1", "-p", "8", "-n", "4", "-c", "",
                        "-r", "1", "--no-bandwidth", "--json"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["simd_level"] == "scalar"
    env["EMBER_SIMD_LEVEL"] = "avx9000"
    p = subprocess.run([ember, "bench", "-m", model, "-c", ""], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 2 and "avx9000" in p.stderr, p.stderr


def test_bench_one_thread_prints_its_one_bandwidth_figure_once(ember):
    p = subprocess.run([ember, "bench", "--bandwidth-only", "-t", "1"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert re.fullmatch(r"simd level \S+, 1 thread", lines[0]), p.stdout
    assert re.fullmatch(r"read bandwidth: 1 thread [0-9.]+ GB/s", lines[1]), p.stdout
    assert "threads" not in p.stdout, p.stdout


def test_bench_at_a_depth_counts_the_kv_it_reads_in_its_bandwidth(ember, tmp_path):
    """At a long context a decode step reads the cache as well as the weights: the reported
    GB/s covers both, and the KV bytes are each layer's K and V rows for every position seen
    (the fixture: 2 layers, 2 KV heads of 16, so 2 x 2 x 32 elements per position)."""
    model = _fixture(ember, tmp_path)
    for kv_type, elem in (("f16", 2), ("f32", 4)):
        for depth in (100, 300):
            r = json.loads(subprocess.run(
                [ember, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "4", "-d", str(depth),
                 "-c", "", "-r", "1", "--no-bandwidth", "--kv-type", kv_type, "--json"],
                check=True, capture_output=True, text=True, timeout=120).stdout)
            d = r["decode"]
            # the timed steps see depth + 2 ... depth + 4 positions: depth + 3 on average
            assert d["kv_bytes_per_token"] == 2 * 2 * 32 * elem * (depth + 3), (kv_type, depth)
            per_token = d["gbps"]["median"] * 1e9 / d["tok_s"]["median"]
            want = r["decode_bytes_per_token"] + d["kv_bytes_per_token"]
            assert abs(per_token - want) <= 1e-6 * want, (per_token, want)


def test_bench_pool_timing_splits_decode_time_across_the_engine_threads_work(ember, tmp_path):
    """--pool-timing: per token, the engine thread's share of the parallel jobs, its wait for the
    other thread and its serial work between jobs; together they are the step's time (bounds
    loose: the parts are per forward, the rate per interval between tokens), at batch 1 and at
    each -c concurrency."""
    model = str(tmp_path / "wide.gguf")
    subprocess.run([ember, "fixture", "--arch", "llama", "--layers", "2", "--embd", "512", "--ff",
                    "1536", "--heads", "8", "--kv-heads", "4", "--out", model],
                   check=True, capture_output=True)
    base = [ember, "bench", "-m", model, "-t", "2", "-p", "0", "-n", "32", "-c", "", "-r", "1",
            "--no-bandwidth", "--json", "--pool-timing"]
    d = json.loads(subprocess.run(base, check=True, capture_output=True, text=True,
                                  timeout=120).stdout)["decode"]
    pool = d["pool"]
    assert pool["jobs_per_token"]["median"] >= 2 * 3  # at least q/k/v, gate/up, down per layer
    parts = sum(pool[k]["median"] for k in ("run_ms_per_token", "wait_ms_per_token",
                                            "serial_ms_per_token"))
    per_token_ms = 1000.0 / d["tok_s"]["median"]
    assert 0.5 * per_token_ms < parts < 2.0 * per_token_ms, (parts, per_token_ms)

    # At a concurrency (-c) too, per token generated across the streams (their prompts'
    # forwards included, so the bounds are looser); without the flag, no breakdown.
    conc = base[:]
    conc[conc.index("-c") + 1] = "4"
    conc[conc.index("-n") + 1] = "0"
    for flag in (True, False):
        args = conc if flag else [a for a in conc if a != "--pool-timing"]
        agg = json.loads(subprocess.run(args, check=True, capture_output=True, text=True,
                                        timeout=120).stdout)["aggregate"][0]
        assert agg["concurrency"] == 4
        if not flag:
            assert "pool" not in agg
            continue
        pool = agg["pool"]
        assert pool["jobs_per_token"]["median"] > 0
        parts = sum(pool[k]["median"] for k in ("run_ms_per_token", "wait_ms_per_token",
                                                "serial_ms_per_token"))
        per_token_ms = 1000.0 / agg["tok_s"]["median"]
        assert 0.3 * per_token_ms < parts < 3.0 * per_token_ms, (parts, per_token_ms)

    # One thread hands nothing off: no breakdown. With -d the prompt's prefill would count: refused.
    one = base[:]
    one[one.index("-t") + 1] = "1"
    d1 = json.loads(subprocess.run(one, check=True, capture_output=True, text=True,
                                   timeout=120).stdout)["decode"]
    assert "pool" not in d1
    p = subprocess.run(base + ["-d", "64"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--pool-timing" in p.stderr and "-d" in p.stderr, p.stderr


def test_bench_reads_a_chunked_decode_against_the_bandwidth_sampled_around_it(ember, tmp_path):
    """With the probe on, the batch-1 decode runs again in chunks of 16 tokens with one bandwidth
    sample before the first and after each (`decode.sampled`): its GB/s over the samples'
    time-weighted mean is its fraction. Not with -d (each chunk would prefill the depth again)
    nor with --no-bandwidth."""
    model = _fixture(ember, tmp_path)
    base = [ember, "bench", "-m", model, "-t", "2", "-p", "0", "-n", "40", "-c", "", "-r", "1",
            "--json"]
    r = json.loads(subprocess.run(base, check=True, capture_output=True, text=True,
                                  timeout=180).stdout)
    s = r["decode"]["sampled"]
    assert s["chunks"] == 2 and s["chunk_tokens"] == 16
    gbps, probe, frac = (s[k]["median"] for k in ("gbps", "probe_gbps", "fraction"))
    assert gbps > 0 and probe > 0
    assert abs(frac - gbps / probe) <= 1e-9 * frac, (frac, gbps, probe)
    assert r["bandwidth"]["all_gbps"] > 0 and "fraction_of_bandwidth" in r["decode"]
    for extra in (["-d", "8"], ["--no-bandwidth"]):
        r = json.loads(subprocess.run(base + extra, check=True, capture_output=True, text=True,
                                      timeout=180).stdout)
        assert "sampled" not in r["decode"], extra
