"""JSON Pointers (RFC 6901), as our JSON Patches write and test them.

One place for the escaping every patch builder needs (a map key holding ``/`` or ``~``
— ``galends/booking-reference`` — is one segment, escaped ``~1`` / ``~0``) and for
reading the value a pointer names (the ledger checks a refused patch's ``test``
operations against a re-read object).
"""

from __future__ import annotations

from typing import Any

ANNOTATIONS = "/metadata/annotations"


def segment(key: str) -> str:
    """``key`` as one pointer segment (``~`` → ``~0``, then ``/`` → ``~1``)."""
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def annotation(key: str) -> str:
    """The pointer of the pod annotation ``key``."""
    return f"{ANNOTATIONS}/{segment(key)}"


def resolve(doc: Any, pointer: str) -> tuple[bool, Any]:
    """Whether ``pointer`` names a value in ``doc``, and that value (None when not)."""
    if pointer == "":
        return True, doc
    for token in pointer.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and key in doc:
            doc = doc[key]
        elif isinstance(doc, list) and key.isdigit() and int(key) < len(doc):
            doc = doc[int(key)]
        else:
            return False, None
    return True, doc
