"""`ember version` (and `ember --version`): the project version from CMakeLists.txt, the git
commit the binary was built from (cmake/version.cmake; "unknown" outside git), the compiler, and
the kernel levels this CPU has with the one a command runs by default."""
import os
import re
import subprocess

from conftest import REPO


def version(ember, *args, env=None):
    r = subprocess.run([ember, *args], capture_output=True, text=True, timeout=30,
                       env={**os.environ, **(env or {})})
    return r.returncode, r.stdout, r.stderr


def test_version_names_the_build_and_the_kernel_levels(ember):
    code, out, err = version(ember, "--version", env={"EMBER_SIMD_LEVEL": ""})
    assert code == 0, err
    assert version(ember, "version", env={"EMBER_SIMD_LEVEL": ""})[1] == out
    lines = out.splitlines()
    want = re.search(r"project\(ember VERSION (\S+)",
                     open(os.path.join(REPO, "CMakeLists.txt")).read()).group(1)
    assert lines[0] == f"ember {want}", out
    commit = re.fullmatch(r"commit ([0-9a-f]{12}(-dirty)?|unknown)", lines[1])
    assert commit, out
    if commit.group(1) != "unknown" and os.path.exists(os.path.join(REPO, ".git")):
        # A commit of this repository (the build may predate the newest one).
        sha = commit.group(1).removesuffix("-dirty")
        assert subprocess.run(["git", "-C", REPO, "cat-file", "-e", sha + "^{commit}"]
                              ).returncode == 0, out
    assert re.fullmatch(r"compiler (GNU|Clang) [0-9.]+, \S+.* build", lines[2]), out
    levels = re.fullmatch(r"kernel levels this CPU has: (.+)", lines[3]).group(1).split(", ")
    assert levels[0] == "scalar" and "avx2" in levels, out  # every host of this project
    assert lines[4] == f"kernel level chosen: {levels[-1]} (the best this CPU has)", out

    # EMBER_SIMD_LEVEL chooses, as it does for serve, run and bench.
    out = version(ember, "version", env={"EMBER_SIMD_LEVEL": "scalar"})[1]
    assert "kernel level chosen: scalar (EMBER_SIMD_LEVEL)" in out, out
    out = version(ember, "version", env={"EMBER_SIMD_LEVEL": "avx9000"})[1]
    assert "kernel level chosen: none" in out and "'avx9000' is not a level" in out, out

    assert "version" in version(ember, "--help")[1]
    code, _, err = version(ember, "version", "extra")
    assert code == 2 and "takes no arguments" in err, err


def test_the_commit_is_unknown_outside_git(tmp_path):
    out = tmp_path / "version.cc"
    src = tmp_path / "not-a-checkout"
    src.mkdir()

    def write():
        subprocess.run(["cmake", f"-DOUT={out}", f"-DSRC={src}", "-DVERSION=1.2.3",
                        "-DCOMPILER=GNU 12", "-DBUILD=Release", "-P",
                        os.path.join(REPO, "cmake", "version.cmake")],
                       check=True, capture_output=True,
                       env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)})
    write()
    text = out.read_text()
    assert 'kCommit[] = "unknown"' in text and 'kVersion[] = "1.2.3"' in text, text
    # Rewritten only when its text changes: a build on the same commit compiles nothing.
    old = out.stat().st_mtime_ns - 10**9
    os.utime(out, ns=(old, old))
    write()
    assert out.stat().st_mtime_ns == old
