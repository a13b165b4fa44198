"""contrib/: the nginx and HAProxy configurations are valid for the real programs, and the
Kubernetes manifests agree with ember's own defaults (grace period, env names, probe routes, the
autoscaler's metric), so the two cannot drift apart."""
import os
import re
import subprocess
import tempfile

import pytest
import yaml

from conftest import REPO, request

CONTRIB = os.path.join(REPO, "contrib")


def serve_help(ember):
    out = subprocess.run([ember, "serve", "--help"], check=True, capture_output=True, text=True)
    return out.stdout + out.stderr


def default_of(help_text, flag):
    """The default ember prints for FLAG in `ember serve --help` ([N], =N or default: N)."""
    for line in help_text.splitlines():
        if re.search(rf"(^|[\s,]){re.escape(flag)}\b", line):
            m = re.search(r"(?:\[|=|default:?\s*)(\d+(?:\.\d+)?)", line)
            if m:
                return float(m.group(1))
    raise AssertionError(f"`ember serve --help` shows no numeric default for {flag}")


def load_all(name):
    with open(os.path.join(CONTRIB, "k8s", name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def container():
    (dep,) = load_all("deployment.yaml")
    assert dep["kind"] == "Deployment"
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    return dep, spec, c


def env_of(c):
    return {e["name"]: e["value"] for e in c.get("env", [])}


def test_grace_period_covers_prestop_drain_and_engine_drain(ember):
    help_text = serve_help(ember)
    _, spec, c = container()
    env = env_of(c)
    # Every environment variable the manifest sets is one ember reads.
    for name in env:
        assert name in help_text, f"deployment sets {name}, which `ember serve` does not read"
    drain = float(env.get("EMBER_DRAIN_TIMEOUT", default_of(help_text, "--drain-timeout")))
    engine_drain = float(env.get("EMBER_ENGINE_DRAIN_S", default_of(help_text, "--engine-drain")))
    # The manifest's values are never below ember's defaults (a shorter drain cuts streams).
    assert drain >= default_of(help_text, "--drain-timeout")
    assert engine_drain >= default_of(help_text, "--engine-drain")
    pre = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre[0] == "sleep"
    pre_stop = float(pre[1])
    margin = 5
    grace = spec["terminationGracePeriodSeconds"]
    assert grace >= pre_stop + drain + engine_drain + margin, (
        f"terminationGracePeriodSeconds {grace} < preStop {pre_stop} + drain {drain} + "
        f"engine drain {engine_drain} + margin {margin}")
    # Readiness must be able to notice a drain well inside the drain window.
    rp = c["readinessProbe"]
    assert rp["periodSeconds"] * rp.get("failureThreshold", 3) < drain / 2


def test_rolling_update_never_drops_below_the_replica_count():
    dep, _, _ = container()
    ru = dep["spec"]["strategy"]["rollingUpdate"]
    assert ru["maxUnavailable"] == 0 and ru["maxSurge"] >= 1
    (pdb,) = load_all("pdb.yaml")
    assert pdb["kind"] == "PodDisruptionBudget"
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    (svc,) = load_all("service.yaml")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_probes_routes_and_autoscaler_metric_exist_on_a_running_server(start_server, models):
    _, _, c = container()
    (hpa,) = load_all("hpa.yaml")
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
    s = start_server(models["small"])
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        path = c[probe]["httpGet"]["path"]
        status, _, _ = request(s.port, "GET", path)
        assert status == 200, f"{probe} path {path} answered {status}"
    status, _, body = request(s.port, "GET", "/metrics")
    assert status == 200
    assert re.search(rf"^{metric}(\{{| )", body.decode(), re.M), f"/metrics has no {metric}"


def test_nginx_configuration_is_accepted_by_nginx():
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"events {{}}\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n"
                    f"http {{ include {CONTRIB}/nginx/ember.conf; }}\n")
        r = subprocess.run(["nginx", "-t", "-c", conf, "-p", d], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    text = open(os.path.join(CONTRIB, "nginx", "ember.conf")).read()
    for directive in ("proxy_buffering off", "proxy_http_version 1.1", "proxy_read_timeout"):
        assert directive in text


def test_haproxy_configuration_is_accepted_by_haproxy():
    cfg = os.path.join(CONTRIB, "haproxy", "haproxy.cfg")
    r = subprocess.run(["haproxy", "-c", "-f", cfg], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "option httpchk GET /ready" in open(cfg).read()
