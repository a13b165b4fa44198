"""The options `ember run` and `ember bench` share with `ember serve` come from the same settings
tables: `--help` shows the same default and the same environment variable for each (serve's
--help is bound from the tables; tests/cli/settings_cli_test.cc checks that side), and each is
read from its variable. `ember run` checks its sampling options' ranges where it reads them."""
import os
import re
import subprocess

import pytest


def options_of(ember, cmd):
    """{long flag: (default or None, environment variable or None)} from `ember CMD --help`."""
    out = subprocess.run([ember, cmd, "--help"], check=True, capture_output=True, text=True).stdout
    opts = {}
    for line in out.splitlines():
        if not line.startswith("  -"):
            continue
        # CLI11: "  NAMES TYPE=DEFAULT (Env:VAR)" then the description, padded to a column or on
        # the next line. No type name here holds '=', and no default below holds two spaces.
        head = re.split(r"\s{2,}", line.strip())[0]
        env = re.search(r" \(Env:(\w+)\)", head)
        if env:
            head = head[:env.start()]
        names, _, rest = head.partition(" ")
        default = rest.split("=", 1)[1] if "=" in rest else None
        for name in names.split(","):
            if name.startswith("--"):
                opts[name] = (default, env.group(1) if env else None)
    return opts


RUN_SHARED = {"--model": "--model", "--threads": "--threads", "--ctx-size": "--ctx-size",
              "--kv-type": "--kv-type", "--simd-level": "--simd-level",
              "--max-tokens": "--max-tokens", "--system": "--system-prompt"}
BENCH_SHARED = {"--model": "--model", "--threads": "--threads", "--kv-type": "--kv-type",
                "--simd-level": "--simd-level"}


@pytest.mark.parametrize("cmd,shared", [("run", RUN_SHARED), ("bench", BENCH_SHARED)])
def test_shared_options_show_the_serve_tables_default_and_variable(ember, cmd, shared):
    serve = options_of(ember, "serve")
    mine = options_of(ember, cmd)
    for flag, serve_flag in shared.items():
        assert flag in mine, f"`ember {cmd}` has no {flag}"
        default, env = mine[flag]
        assert env is not None, f"`ember {cmd} {flag}` reads no environment variable"
        assert (default, env) == serve[serve_flag], (cmd, flag)
    # Every other flag spelled as one of serve's is the same setting too.
    for flag, (default, env) in mine.items():
        if flag in serve and flag not in shared and flag != "--help":
            pytest.fail(f"`ember {cmd} {flag}` is spelled as serve's but not shared")


def test_run_and_bench_read_the_shared_variables(ember):
    env = dict(os.environ, EMBER_KV_TYPE="q8", EMBER_CTX_SIZE="nope")
    # Checked at parse time, before any model is looked for: the variable was read.
    r = subprocess.run([ember, "bench", "--bandwidth-only"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "kv-type" in r.stderr.lower(), r.stderr
    r = subprocess.run([ember, "run", "-p", "hi"], env=dict(os.environ, EMBER_CTX_SIZE="nope"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "ctx-size" in r.stderr.lower(), r.stderr


@pytest.mark.parametrize("flag,value", [("--temp", "-1"), ("--top-p", "1.5"), ("--min-p", "-0.1"),
                                        ("--top-k", "-2"), ("--repeat-penalty", "0")])
def test_run_refuses_sampling_options_out_of_range_before_loading(ember, flag, value):
    r = subprocess.run([ember, "run", "-m", "/nonexistent.gguf", "-p", "hi", f"{flag}={value}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert flag in r.stderr, r.stderr
    assert "nonexistent" not in r.stderr, "the options are checked before the model is opened"
