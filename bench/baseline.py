"""The baseline the webhook is measured against: the least a mutating webhook can do.

``python -m bench.baseline <port> <cert> <key>`` serves ``POST /mutate`` with the
webhook's own server construction (``webhook.__main__.server``: same uvicorn options,
TLS context and HTTP parser; uvloop as in ``webhook.__main__.main``) and a handler
doing what every admission must: read the body, parse the AdmissionReview with the
webhook's parser, deep-copy the pod, add a toleration and an annotation, diff the copy
into a JSON Patch, answer with the webhook's answer builder and response class. No
cache, no decision, no ledger, no log line: what remains is the stack's own cost, so
``webhook / baseline`` is the share of the stack's limit the webhook reaches on the
same machine, in the same run.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from certs.tls import ReloadingTLS
from shared import vocab
from shared.clock import SystemClock
from webhook.app import json_response
from webhook.patch import diff, edit_copy
from webhook.review import answer, parse


async def mutate(request: Request) -> Response:
    review = parse(await request.body())
    pod = review.obj or {}
    edited = edit_copy(pod)
    spec = edited.setdefault("spec", {})
    spec.setdefault("tolerations", []).append(
        {"key": vocab.RESERVATION_TAINT_KEY, "operator": "Equal", "value": "h100"}
    )
    edited.setdefault("metadata", {}).setdefault("annotations", {})["baseline"] = "yes"
    return json_response(answer(review.uid, patch=diff(pod, edited)))


def app() -> Starlette:
    """The baseline's application: one Starlette route to ``mutate``."""
    return Starlette(routes=[Route("/mutate", mutate, methods=["POST"])])


def main() -> int:
    port, cert, key = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    from webhook.__main__ import server

    tls = ReloadingTLS(cert, key, SystemClock())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(server(app(), "127.0.0.1", port, tls).serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
