"""Operator commands where the obvious thing goes wrong: `ember stop` given a pid file whose pid
now belongs to another ember, `ember restart` of a server started with `--port 0`, and a server
short of file descriptors (docs/operations.md, "Pid files" and "File descriptors").
"""
import os
import subprocess
import time

from conftest import Server, connect, cpu_seconds, request, wait_for
from test_reuse_port import wait_line
from test_worker import alive, worker_pid


def pid_file_fields(path):
    """The pid file as (pid, {key: value}): the pid on the first line, "key value" lines after."""
    lines = open(path).read().splitlines()
    return int(lines[0]), dict(l.split(" ", 1) for l in lines[1:])


def test_stop_refuses_a_pid_now_held_by_another_ember(ember, start_server, models, tmp_path):
    # A server wrote the file and died without removing it (SIGKILL); its pid went to another
    # ember: another server, or another server's engine worker. The name matches, the start time
    # recorded in the file does not, and neither process may be signalled.
    pid_file = tmp_path / "ember.pid"
    first = start_server(models["small"], "--pid-file", str(pid_file))
    pid, fields = pid_file_fields(pid_file)
    assert pid == first.pid and "start_time" in fields and "boot_id" in fields
    first.proc.kill()
    first.wait_exit()
    assert pid_file.exists()

    other = start_server(models["small"])
    worker = worker_pid(other)
    assert worker is not None
    for victim in (other.pid, worker):
        pid_file.write_text(f"{victim}\nstart_time {fields['start_time']}\n"
                            f"boot_id {fields['boot_id']}\n")
        r = subprocess.run([ember, "stop", "--pid-file", str(pid_file), "--timeout", "5"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"pid {victim} is not the server that wrote it (start time" in r.stderr, r.stderr
        assert "refusing to signal it" in r.stderr, r.stderr
        assert not pid_file.exists()  # stale: removed
        assert alive(victim)
    assert other.proc.poll() is None and alive(worker)
    assert request(other.port, "GET", "/ready")[0] == 200
    assert "draining" not in "".join(other.lines)


def test_restart_of_a_port_0_server_keeps_its_port(ember, models, tmp_path):
    pid_file = str(tmp_path / "ember.pid")
    new_log = tmp_path / "new.log"
    old = Server(ember, models["small"], "--reuse-port", "--handover", "0.2", "--pid-file",
                 pid_file)  # --port 0: the kernel picks the port
    new_pid = None
    try:
        wait_line(old, "model loaded; ready")
        port = old.port
        pid, fields = pid_file_fields(pid_file)
        assert pid == old.pid and fields["port"] == str(port)

        # A pid file that records no port (an older ember wrote it): with --port 0 there is no
        # telling which port the successor should take, so restart refuses and touches nothing.
        saved = open(pid_file).read()
        with open(pid_file, "w") as f:
            f.write(f"{old.pid}\n")
        r = subprocess.run([ember, "restart", "--pid-file", pid_file], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "records no bound port" in r.stderr, r.stderr
        assert old.proc.poll() is None
        with open(pid_file, "w") as f:
            f.write(saved)

        r = subprocess.run([ember, "restart", "--pid-file", pid_file, "--log", str(new_log)],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr + "".join(old.lines)
        assert old.wait_exit(60) == 0
        new_pid, fields = pid_file_fields(pid_file)
        assert new_pid != old.pid and fields["port"] == str(port)
        # The successor serves the port the old server had, not a port of its own.
        assert f"listening on http://127.0.0.1:{port}" in new_log.read_text(), new_log.read_text()
        assert request(port, "GET", "/ready", timeout=10)[0] == 200

        stop = subprocess.run([ember, "stop", "--pid-file", pid_file], capture_output=True,
                              text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        wait_for(lambda: not alive(new_pid), 30, what="the successor gone")
        new_pid = None
    finally:
        old.stop()
        if new_pid:
            try:
                os.kill(new_pid, 9)
            except ProcessLookupError:
                pass


def open_files_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return line.split()[3:5]  # soft, hard
    raise AssertionError("no open-files line")


def test_out_of_descriptors_the_server_neither_spins_nor_stops_answering(ember, models, tmp_path):
    # soft = hard = 64 (the server cannot raise it): far fewer descriptors than connections.
    wrapper = tmp_path / "ember-64-files"
    wrapper.write_text(f'#!/bin/bash\nulimit -n 64\nexec "{ember}" "$@"\n')
    wrapper.chmod(0o755)
    s = Server(str(wrapper), models["small"], "--header-timeout", "60")
    conns = []
    try:
        s.wait_ready()
        assert open_files_limit(s.pid) == ["64", "64"]
        assert "open files limit 64 (the hard limit)" in "".join(s.lines)
        for _ in range(120):  # idle connections: each one the server takes holds a descriptor
            conns.append(connect(s.port, timeout=30))
        wait_for(lambda: "Too many open files" in "".join(s.lines), 20,
                 what="an accept failing with EMFILE")
        # Over a bounded interval, a retry loop without a pause burns a whole core; paused, the
        # server sleeps. A generous bound: a tenth of one core.
        before = cpu_seconds(s.pid)
        t0 = time.monotonic()
        time.sleep(2.0)  # a measurement window, not synchronization
        used = cpu_seconds(s.pid) - before
        elapsed = time.monotonic() - t0
        print(f"out of descriptors: {used:.3f} s of CPU in {elapsed:.2f} s")
        assert used / elapsed < 0.1, f"{used:.2f} s of CPU in {elapsed:.2f} s while out of files"
        for c in conns:
            c.close()
        conns = []
        # The descriptors come back as the sessions see their clients go; the server takes the
        # queued connections (all closed) and then ours.
        status, _, body = request(s.port, "GET", "/health", timeout=20)
        assert status == 200, body
        assert s.metric("ember_accept_errors_total", reason="emfile") >= 1
        # Logged after the accept that ended the run (the server's stderr is read by a thread).
        wait_for(lambda: "accepting connections again" in "".join(s.lines), 10,
                 what="the end of the failed accepts logged")
    finally:
        for c in conns:
            c.close()
        s.stop()
