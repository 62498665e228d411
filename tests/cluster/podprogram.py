"""A small program the process kubelet's tests run as a pod's container.

``env NAME...``: print the named variables as JSON and exit 0.
``serve PORT``: HTTP on the wildcard address; ``/ready`` answers 200 once the file
``$READY_FILE`` exists (503 before), ``/healthz`` 500 once ``$SICK_FILE`` exists,
``/whoami`` the pid and the address it listens on. SIGTERM: print and exit 0.
``crash``: count the starts in ``$COUNTER_FILE``, print ``start N``, exit 3.
``kube PATH...``: GET each API path with ``$KUBECONFIG``'s token; print the codes as JSON.
``slow WORD...``: print each word, half a second apart, then exit 0.
``say TEXT``: write TEXT to ``$MESSAGE_FILE`` (the termination message) and exit 1.
``files PATH...``: print the paths it was given as JSON, then wait for SIGTERM.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import yaml


def _exists(variable: str) -> bool:
    path = os.environ.get(variable, "")
    return bool(path) and Path(path).exists()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/ready":
            code = 200 if _exists("READY_FILE") else 503
        elif self.path == "/healthz":
            code = 500 if _exists("SICK_FILE") else 200
        else:
            code = 200
        address: Any = self.server.server_address
        host = str(address[0])
        body = json.dumps({"pid": os.getpid(), "address": host})
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        return


def serve(port: int) -> None:
    def stop(*_: object) -> None:
        print("terminated", flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    server = HTTPServer(("", port), Handler)
    host = str(server.server_address[0])
    print(f"listening on {host}:{port} pid {os.getpid()}", flush=True)
    server.serve_forever()


def crash() -> None:
    counter = Path(os.environ["COUNTER_FILE"])
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    print(f"start {count}", flush=True)
    sys.exit(3)


def kube(paths: list[str]) -> None:
    config = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as ca:
        ca.write(base64.b64decode(cluster["certificate-authority-data"]))
    context = ssl.create_default_context(cafile=ca.name)
    codes = {}
    for path in paths:
        request = urllib.request.Request(
            cluster["server"] + path, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, context=context) as answer:
                codes[path] = answer.status
        except urllib.error.HTTPError as exc:
            codes[path] = exc.code
    print(json.dumps(codes), flush=True)


def files(paths: list[str]) -> None:
    print(json.dumps(paths), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        time.sleep(1)


def main() -> None:
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "env":
        print(json.dumps({name: os.environ.get(name) for name in rest}), flush=True)
    elif mode == "serve":
        serve(int(rest[0]))
    elif mode == "late":  # a slow start: import-heavy processes take wall seconds
        time.sleep(float(rest[0]))
        serve(int(rest[1]))
    elif mode == "crash":
        crash()
    elif mode == "kube":
        kube(rest)
    elif mode == "slow":
        for word in rest:
            print(word, flush=True)
            time.sleep(0.5)
    elif mode == "say":
        Path(os.environ["MESSAGE_FILE"]).write_text(rest[0])
        print("said it", flush=True)
        sys.exit(1)
    elif mode == "files":
        files(rest)


if __name__ == "__main__":
    main()
