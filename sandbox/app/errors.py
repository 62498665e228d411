"""The app's error answers: JSON ``{detail}``, the denial envelope, validation arrays.

Handlers raise ``AppError``; ``error_response`` renders it. A refusal adds ``code``,
``retryable`` and (when known) ``not_before`` next to ``detail``, and then a
``Retry-After`` header with the same delay in whole seconds (§1.5.2).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse

from sandbox.app.gates import Refusal
from sandbox.app.timeutil import utc_text

M = TypeVar("M", bound=BaseModel)


class AppError(Exception):
    """An HTTP error answer; ``detail`` is a string or a FastAPI-style error array."""

    def __init__(self, status: int, detail: Any, refusal: Refusal | None = None) -> None:
        super().__init__(str(detail))
        self.status = status
        self.detail = detail
        self.refusal = refusal


def refused(refusal: Refusal, status: int = 409) -> AppError:
    return AppError(status, refusal.detail, refusal)


def envelope(refusal: Refusal) -> dict[str, Any]:
    """The envelope fields of a refusal (also used in ``withheld`` entries)."""
    body: dict[str, Any] = {
        "detail": refusal.detail,
        "code": refusal.code,
        "retryable": refusal.retryable,
    }
    if refusal.not_before is not None:
        body["not_before"] = utc_text(refusal.not_before)
    return body


def error_response(error: AppError, now: datetime) -> JSONResponse:
    headers: dict[str, str] = {}
    if error.refusal is None:
        return JSONResponse({"detail": error.detail}, status_code=error.status)
    body = envelope(error.refusal)
    if error.refusal.not_before is not None:
        delay = max(0, math.ceil((error.refusal.not_before - now).total_seconds()))
        headers["Retry-After"] = str(delay)
    return JSONResponse(body, status_code=error.status, headers=headers)


def validation_error(exc: ValidationError) -> AppError:
    """422 with FastAPI's ``[{loc, msg, type}]`` detail."""
    detail = [
        {"loc": ["body", *map(str, err["loc"])], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors()
    ]
    return AppError(422, detail)


def parse_body(model: type[M], data: Any) -> M:
    """Validate a JSON body or raise the 422 ``AppError``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
