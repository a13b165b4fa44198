"""A rolling restart behind real nginx (Debian's, started here on loopback ports): three ember
replicas on the default model, a steady mix of streaming and non-streaming requests, and each
replica stopped gracefully and started again, one after another (the next one only once nginx
sends the restarted one requests again: see roll_wait). Every request must either
complete normally or be refused before it was accepted (503 + Retry-After, which this client
honours by retrying): zero truncated streams, zero 5xx left after retries.

Figures (requests sent, completed, retried, p99 latency in steady state and during the roll)
are printed and written to $EMBER_TEST_OUT/rolling_restart.json when that is set."""
import http.client
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import REPO, Server, free_port, wait_for

MAX_TOKENS = 12
CLIENTS = 4


class Nginx:
    def __init__(self, listen_port, upstream_ports, directory):
        self.dir = directory
        os.makedirs(directory)
        conf = open(os.path.join(REPO, "contrib", "nginx", "ember.conf")).read()
        servers = "".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n"
                          for p in upstream_ports)
        start = conf.index("    server 127.0.0.1:8081")
        end = conf.index("}", start)
        conf = conf[:start] + servers + conf[end:]
        conf = conf.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{listen_port};")
        with open(os.path.join(self.dir, "ember.conf"), "w") as f:
            f.write(conf)
        main = os.path.join(self.dir, "nginx.conf")
        with open(main, "w") as f:
            f.write(f"daemon off;\nworker_processes 1;\npid {self.dir}/nginx.pid;\n"
                    f"error_log {self.dir}/error.log;\nevents {{}}\n"
                    f"http {{ access_log off; client_body_temp_path {self.dir}/body;\n"
                    f"  proxy_temp_path {self.dir}/proxy;\n  include {self.dir}/ember.conf; }}\n")
        self.proc = subprocess.Popen(["nginx", "-c", main, "-p", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = listen_port

        # nginx writes its pid file once its listening socket is bound (a connection to the
        # port could have reached another program's listener while nginx still retried its bind).
        pid_file = os.path.join(self.dir, "nginx.pid")
        wait_for(lambda: os.path.exists(pid_file) or self.proc.poll() is not None, 10,
                 what="nginx listening")
        assert self.proc.poll() is None, self.proc.stderr.read().decode() + self.error_log()

    def error_log(self, lines=80):
        """The end of nginx's error log: why it answered 502 (which upstream, which errno)."""
        try:
            with open(os.path.join(self.dir, "error.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"(no error log: {e})"

    def stop(self):
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Load:
    """Closed-loop clients through the balancer; a 503/429 with Retry-After is retried after
    the time it asks for. Anything else that is not a complete answer is a failure."""

    def __init__(self, port):
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (t_start, t_end, outcome, streamed, retries)
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(CLIENTS)]

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def _one(self, stream, n):
        body = {"model": "default", "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream,
                "messages": [{"role": "user", "content": f"Count from {n} to {n + 5}."}]}
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                r.read()
                return ("retry", float(r.getheader("Retry-After"))) \
                    if r.status in (429, 503) and r.getheader("Retry-After") else (f"http_{r.status}", 0)
            if not stream:
                j = json.loads(r.read())
                fr = j["choices"][0]["finish_reason"]
                return ("ok", 0) if fr in ("stop", "length") else (f"finish_{fr}", 0)
            finish, done = None, False
            for raw in r:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    ch = json.loads(line[6:])
                    if ch.get("choices") and ch["choices"][0].get("finish_reason"):
                        finish = ch["choices"][0]["finish_reason"]
            if done and finish in ("stop", "length"):
                return ("ok", 0)
            return (f"truncated_{finish}_{done}", 0)
        except (OSError, http.client.HTTPException) as e:
            return (f"conn_{type(e).__name__}", 0)
        finally:
            conn.close()

    def _run(self, i):
        n = 0
        while not self.stop.is_set():
            n += 1
            stream = (n + i) % 2 == 0
            t0 = time.monotonic()
            retries = 0
            while True:
                outcome, wait = self._one(stream, n)
                if outcome != "retry" or retries >= 20:
                    break
                retries += 1
                time.sleep(wait)
            with self.lock:
                self.results.append((t0, time.monotonic(), outcome, stream, retries))


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


def answered(server):
    """Chat completions this replica has answered 200: they reach it only through nginx."""
    try:
        return server.metric("ember_http_requests_total", route="/v1/chat/completions",
                             status="200")
    except KeyError:  # none yet
        return 0


def roll_wait(server, k):
    """The step of the rolling restart between a replica's /ready and stopping the next one.

    nginx's health checks are passive: the connections refused while this replica was down
    marked it failed (max_fails=1), and nginx sends it nothing until fail_timeout has passed
    since its last failure, whatever /ready says. Stopping the next replica before then let
    the roll outpace fail_timeout: on a fast host all three restarts took 1.74 s against 2 s,
    every replica was marked failed at once, and nginx answered each request at once with 502
    ("no live upstreams while connecting to upstream" in its error log) until the first one's
    fail_timeout ran out: 5127 failed requests. So the roll waits for the evidence that nginx
    takes this replica back: a request it answered."""
    wait_for(lambda: answered(server) > 0, 60, interval=0.05,
             what=f"nginx sending restarted replica {k} requests again")


def stop_replica(ember, server, pid_file):
    """Graceful stop as an operator does it (`ember stop`, which waits for the drain), then the
    process's own exit status."""
    r = subprocess.run([ember, "stop", "--pid-file", pid_file], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped: exit 0" in r.stdout, r.stdout
    return server.wait_exit(30)


@pytest.mark.heavy  # a load test: its drain bounds assume release speed
def test_rolling_restart_behind_nginx_loses_no_request(ember, tmp_path):
    ports = [free_port() for _ in range(3)]
    args = ["--max-sequences", "4", "--drain-timeout", "30"]
    pid_files = [str(tmp_path / f"replica{k}.pid") for k in range(3)]
    replicas = [Server(ember, "default", *args, "--pid-file", pid_files[k], port=p)
                for k, p in enumerate(ports)]
    for r in replicas:
        r.wait_ready(120)
    nginx = Nginx(free_port(), ports, str(tmp_path / "nginx"))
    load = Load(nginx.port)
    try:
        load.start()
        time.sleep(8)  # steady state: a measurement window, not synchronisation
        roll_start = time.monotonic()
        for k, p in enumerate(ports):
            code = stop_replica(ember, replicas[k], pid_files[k])
            assert code == 0, "".join(replicas[k].lines)
            replicas[k] = Server(ember, "default", *args, "--pid-file", pid_files[k], port=p)
            replicas[k].wait_ready(120)
            roll_wait(replicas[k], k)
        roll_end = time.monotonic()
        time.sleep(3)
    finally:
        load.join()
        nginx.stop()
        for r in replicas:
            r.stop()

    res = load.results
    failures = [r for r in res if r[2] != "ok"]
    steady = [e - s for s, e, o, _, _ in res if o == "ok" and e < roll_start]
    rolling = [e - s for s, e, o, _, _ in res if o == "ok" and s >= roll_start and s < roll_end]
    figures = {
        "requests": len(res),
        "completed": sum(1 for r in res if r[2] == "ok"),
        "streamed": sum(1 for r in res if r[3]),
        "retried_requests": sum(1 for r in res if r[4] > 0),
        "retries": sum(r[4] for r in res),
        "failed": len(failures),
        "failure_kinds": sorted({r[2] for r in failures}),
        "roll_seconds": round(roll_end - roll_start, 2),
        "p99_steady_s": round(p99(steady), 3),
        "p99_during_roll_s": round(p99(rolling), 3),
    }
    print("rolling restart:", json.dumps(figures))
    if failures:
        t0 = res[0][0] if res else 0
        print("first failures (start s, end s, outcome; roll from %.2f to %.2f s):"
              % (roll_start - t0, roll_end - t0))
        for s, e, o, _, _ in failures[:10]:
            print(f"  {s - t0:.3f} {e - t0:.3f} {o}")
        print("--- nginx error.log ---\n" + nginx.error_log())
    out = os.environ.get("EMBER_TEST_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "rolling_restart.json"), "w") as f:
            json.dump(figures, f, indent=2)
    assert not failures, figures
    assert figures["completed"] >= 12, figures
    assert rolling, "no request completed during the roll"
