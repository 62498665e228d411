"""``Warning`` response headers as kube-apiserver writes them (apiserver
``pkg/endpoints/filters/warning.go`` over apimachinery ``NewWarningHeader``).

Each distinct, non-empty text becomes one ``299 - "<text>"`` header, ``\\`` and ``"``
escaped, in the order the warnings were added. The text is UTF-8: Go writes the bytes as
they are and client-go (kubectl) reads them back as UTF-8, so ``…`` or ``é`` reach the
client unchanged. The recorder counts runes (code points): while the texts written stay
within 4096 of them every warning is whole; the warning that would pass the limit
switches to truncating — every text is cut to its first 256 runes, the headers are
written again from the first, and later warnings are added (cut) only while the count
is below 4096.

Two things differ from Go, both because the HTTP layer here (uvicorn) refuses what Go's
``net/http`` writes: a control character (CR, LF, NUL, …; tab excepted) becomes a
space, as Go's header writer does for CR and LF; and a lone surrogate (which only a
Python string can hold) becomes U+FFFD, as Go's JSON decoder turns it when it reads the
webhook's answer. So a warning can never make an answer unsendable.
"""

from __future__ import annotations

import re

#: Runes of warning text written before truncation starts.
TOTAL_RUNES = 4 * 1024
#: Runes each warning is cut to once truncating.
ITEM_RUNES = 256

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def header_value(text: str) -> str:
    """``299 - "<text>"`` with ``\\`` and ``"`` escaped (``NewWarningHeader``)."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


def _sendable(text: str) -> str:
    return _CONTROL.sub(" ", _SURROGATE.sub("\ufffd", text))


def headers(texts: list[str]) -> list[bytes]:
    """The ``Warning`` header values (UTF-8) for ``texts``, in order: deduplicated,
    empty ones dropped, truncated as the apiserver's recorder does."""
    ordered: list[str] = []
    seen: set[str] = set()
    written, truncating = 0, False
    out: list[str] = []
    for text in texts:
        if not text or text in seen:
            continue
        if truncating and written >= TOTAL_RUNES:
            break
        seen.add(text)
        ordered.append(text)
        if truncating:
            cut = text[:ITEM_RUNES]
            written += len(cut)
            out.append(cut)
        elif written + len(text) <= TOTAL_RUNES:
            written += len(text)
            out.append(text)
        else:
            truncating = True
            out = [t[:ITEM_RUNES] for t in ordered]
            written = sum(len(t) for t in out)
    return [header_value(_sendable(t)).encode("utf-8") for t in out]
