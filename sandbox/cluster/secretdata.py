"""The data of a Secret or a ConfigMap as bytes. No side effects."""

from __future__ import annotations

import base64
import binascii
from typing import Any


def decoded(obj: dict[str, Any], secret: bool) -> dict[str, bytes]:
    """Secret ``data`` base64-decoded; ConfigMap ``data`` encoded and ``binaryData``
    decoded (a value that does not decode is left out)."""
    out: dict[str, bytes] = {}
    if secret:
        for key, value in (obj.get("data") or {}).items():
            try:
                out[key] = base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                continue
        return out
    for key, value in (obj.get("data") or {}).items():
        out[key] = str(value).encode()
    for key, value in (obj.get("binaryData") or {}).items():
        try:
            out[key] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            continue
    return out
