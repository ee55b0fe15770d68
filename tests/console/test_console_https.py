"""`tidemq console --certfile --keyfile` serves HTTPS (issue 47: "can serve HTTPS"), with its
cookies marked Secure; plain HTTP on that port gets no page; half a pair is refused."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import trustme

from cluster.console import assets
from cluster.launch.layout import free_ports
from tests.cluster.helpers import start_namesrv
from tests.node.nodeproc import Nodes

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.slow
def test_the_console_serves_https_with_secure_cookies(tmp_path: Path, nodes: Nodes) -> None:
    if assets.missing():
        pytest.fail("the console's front-end files are missing: run `tidemq console --install-assets`")
    ns = start_namesrv(nodes, tmp_path)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    (port,) = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "tidemq", "console", "--namesrv", ns.address, "--login",
                             "--port", str(port), "--certfile", str(tmp_path / "cert.pem"),
                             "--keyfile", str(tmp_path / "key.pem")],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # blocks until it listens (or exits: an empty line)
        assert ready.strip() == f"console: https://127.0.0.1:{port}/", (ready, proc.stderr and proc.stderr.read())
        context = ssl.create_default_context()
        ca.configure_trust(context)
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/login", context=context, timeout=10) as answer:
            assert answer.status == 200
            page = answer.read().decode()
            cookies = answer.headers.get_all("set-cookie") or []
        assert "password" in page.lower()
        assert cookies and all("secure" in c.lower() for c in cookies), cookies
        with pytest.raises(OSError):  # an HTTP request to the TLS port: no page comes back
            urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=10).read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_certificate_without_its_key_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "tidemq", "console", "--namesrv", "127.0.0.1:9876",
                           "--certfile", "cert.pem"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--certfile and --keyfile go together" in done.stderr, done.stderr
