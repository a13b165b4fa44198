"""`ember run --chat` in a pseudo-terminal, as a person types into it: Ctrl-C during an answer
stops that answer (the engine cancels through its CancelToken) and the chat goes on; Ctrl-C at
the prompt, or Ctrl-D, ends it with exit 0. An answer cut by the token limit (-n, by default
`ember serve --max-tokens`) is marked [length], as a stopped one is marked [stopped]. Runs on the default model (SmolLM2-135M-Instruct)."""
import os
import pty
import re
import select
import subprocess
import time

import pytest


class Pty:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.out = b""

    def read_until(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while not rx.search(self.out):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {pattern!r}; got {self.out[-2000:]!r}")
            r, _, _ = select.select([self.fd], [], [], min(left, 0.1))
            if r:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"pty closed waiting for {pattern!r}; got {self.out!r}")
                self.out += chunk
        return self.out

    def send(self, data):
        os.write(self.fd, data)

    def wait_exit(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                # drain what is left
                try:
                    while select.select([self.fd], [], [], 0)[0]:
                        chunk = os.read(self.fd, 4096)
                        if not chunk:
                            break
                        self.out += chunk
                except OSError:
                    pass
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        os.kill(self.pid, 9)
        raise AssertionError(f"ember run did not exit; output {self.out[-2000:]!r}")


def chat(ember):
    p = Pty([os.path.abspath(ember), "run", "--chat", "--temp", "0", "-n", "1500",
             "--threads", "1"])
    p.read_until(rb"> $", 60)
    return p


def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(ember):
    p = chat(ember)
    p.send(b"Write a very long story about a dragon who learns to bake bread.\r")
    # Wait for the answer to be well under way, then Ctrl-C (the terminal sends SIGINT).
    p.read_until(rb"bake bread\.\r\n.{80,}", 60)
    p.send(b"\x03")
    t0 = time.monotonic()
    p.read_until(rb"\[stopped\]\r\n> $", 5)
    assert time.monotonic() - t0 < 5
    mark = len(p.out)
    # The chat goes on: the next question is answered, and the stopped story is history.
    p.send(b"What is the capital of France?\r")
    p.read_until(rb"France\?\r\n.*\r\n> $", 60)
    assert b"Paris" in p.out[mark:], p.out[mark:]
    # Ctrl-C at the prompt ends the chat cleanly.
    p.send(b"\x03")
    assert p.wait_exit(10) == 0


def test_ctrl_d_at_the_prompt_exits_cleanly(ember):
    p = chat(ember)
    p.send(b"\x04")
    assert p.wait_exit(10) == 0


def piped_chat(ember, question, *args, env=None):
    """One chat turn through a pipe (no terminal, so no prompt): the answer's line."""
    r = subprocess.run([ember, "run", "--chat", "--temp", "0", "--threads", "1", *args],
                       input=question + "\n", capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_an_answer_cut_by_the_token_limit_is_marked(ember):
    # A story does not fit in 8 tokens: the answer ends mid-sentence, and says so.
    out = piped_chat(ember, "Write a long story about a dragon.", "-n", "8")
    assert out.endswith(" [length]\n"), out
    # One that ends on its own is not marked.
    out = piped_chat(ember, "What is the capital of France? Answer in one word.", "-n", "64")
    assert "Paris" in out and "[length]" not in out, out


def test_the_token_limit_is_serves_max_tokens_setting(ember):
    # The same default as `ember serve --max-tokens`, and the same variable.
    def default_of(help_text):
        m = re.search(r"--max-tokens [^\n]*?=(\d+)", help_text)
        assert m, help_text
        return int(m.group(1))
    serve = subprocess.run([ember, "serve", "--help"], capture_output=True, text=True).stdout
    run = subprocess.run([ember, "run", "--help"], capture_output=True, text=True).stdout
    assert default_of(run) == default_of(serve), run
    out = piped_chat(ember, "Write a long story about a dragon.", env={"EMBER_MAX_TOKENS": "8"})
    assert out.endswith(" [length]\n"), out
    assert len(out) < 120, out  # 8 tokens, not the default's thousands


def test_a_chat_longer_than_the_context_drops_old_turns_and_goes_on(ember):
    # In a 96-token context each story fills what the prompt leaves (the default -n is serve's
    # --max-tokens, far more), so every later turn's conversation outgrows the context: the
    # oldest exchanges are dropped with a notice, and every turn is answered, without exit 1.
    stories = ["Write a long story about a dragon.", "Write a long story about a ship.",
               "Write a long story about a baker."]
    question = "What is the capital of France? Answer in one word."
    r = subprocess.run([ember, "run", "--chat", "--temp", "0", "--threads", "1", "-c", "96"],
                       input="\n".join(stories + [question]) + "\n", capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # Each story is cut at the context's edge and marked; the last answer ends on its own.
    assert r.stdout.count(" [length]\n") == len(stories), r.stdout
    last = r.stdout.rsplit(" [length]\n", 1)[1]
    assert "Paris" in last and "[length]" not in last, r.stdout
    assert "the conversation outgrew the 96-token context" in r.stderr, r.stderr
    # A message that does not fit even alone is not sent, and the chat still goes on.
    r = subprocess.run([ember, "run", "--chat", "--temp", "0", "--threads", "1", "-c", "96",
                        "-n", "4"], input="word " * 200 + "\n" + question + "\n",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "but the context holds 96 (-c): not sent" in r.stderr, r.stderr
    assert r.stdout.strip(), r.stdout
