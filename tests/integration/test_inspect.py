"""`ember inspect FILE` ends with whether ember runs the file, and a file it cannot run is a clear
error at load naming what is supported (docs/models.md): an exit status, never a crash."""
import struct
import subprocess

import pytest

SUPPORTED = "llama, qwen2, qwen3, gemma2, gemma3, phi3"


def fixture(ember, tmp_path, arch, *args):
    path = str(tmp_path / f"{arch}.gguf")
    subprocess.run([ember, "fixture", "--arch", arch, *args, "--out", path], check=True,
                   capture_output=True)
    return path


def inspect(ember, path):
    return subprocess.run([ember, "inspect", path], capture_output=True, text=True, timeout=60)


def patched(path, out, old, new):
    data = open(path, "rb").read()
    assert data.count(old) == 1, old
    open(out, "wb").write(data.replace(old, new))
    return out


def gguf_string(s):
    return struct.pack("<Q", len(s)) + s


@pytest.mark.parametrize("arch,window,template", [
    ("llama", "", "none in the file, ChatML fallback"),
    ("qwen2", "", "none in the file, ChatML fallback"),
    ("gemma3", ", sliding window 128", "ember's built-in"),
    ("gemma2", ", sliding window 128",
     "ember's built-in (no system role: system text opens the first user turn)"),
    ("phi3", "", "none in the file, ChatML fallback"),
])
def test_inspect_ends_with_supported_and_the_file_generates(ember, tmp_path, arch, window,
                                                            template):
    path = fixture(ember, tmp_path, arch, "--type", "Q8_0")
    r = inspect(ember, path)
    assert r.returncode == 0, r.stderr
    last = r.stdout.rstrip("\n").splitlines()[-1]
    # Fixtures carry no template: gemma2 and gemma3 get ember's built-in ones (Gemma 2's has no
    # system role), the others ChatML.
    assert last == f"supported: {arch}, 2 layers{window}, weights Q8_0, chat template: {template}"
    run = subprocess.run([ember, "run", "--model", path, "-p", "hello", "-n", "4"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_unsupported_architecture_is_named_by_inspect_and_refused_at_load(ember, tmp_path):
    good = fixture(ember, tmp_path, "llama")
    key = gguf_string(b"general.architecture") + struct.pack("<I", 8)
    bad = patched(good, str(tmp_path / "mamba.gguf"), key + gguf_string(b"llama"),
                  key + gguf_string(b"mamba"))
    r = inspect(ember, bad)
    assert r.returncode == 1
    last = r.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("not supported: "), last
    assert f"architecture 'mamba' is not supported (supported: {SUPPORTED})" in last
    run = subprocess.run([ember, "run", "--model", bad, "-p", "hi", "-n", "1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode > 0, (run.returncode, run.stderr)  # an error exit, not a signal
    assert f"architecture 'mamba' is not supported (supported: {SUPPORTED})" in run.stderr


def test_unsupported_weight_type_is_named_by_inspect_and_refused_at_load(ember, tmp_path):
    good = fixture(ember, tmp_path, "llama")  # F32: type id 0
    # The tensor-info entry: name, 2 dims ([64, 64]: attn_q of the default fixture), type id.
    name = gguf_string(b"blk.0.attn_q.weight") + struct.pack("<IQQ", 2, 64, 64)
    bad = patched(good, str(tmp_path / "iq.gguf"), name + struct.pack("<I", 0),
                  name + struct.pack("<I", 23))
    want = "tensor 'blk.0.attn_q.weight' has type IQ4_XS (ggml type id 23), which ember cannot read"
    r = inspect(ember, bad)
    assert r.returncode == 1
    last = r.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("not supported: ") and want in last, last
    assert "Q4_K" in last  # the types it can read are listed
    run = subprocess.run([ember, "run", "--model", bad, "-p", "hi", "-n", "1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode > 0, (run.returncode, run.stderr)
    assert want in run.stderr
