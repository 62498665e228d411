"""Shared pytest configuration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _kubectl_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each pytest process (each xdist worker) gives the kubectl it runs a discovery
    cache of its own (``KUBECACHEDIR``, kubectl >= 1.25). The default, ``~/.kube/cache``,
    is shared by every worker and every run, keyed by host:port, and the sandboxes draw
    their ports at random: a later sandbox on a reused port would start from another
    one's discovery, up to six hours old."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBECACHEDIR", str(tmp_path_factory.mktemp("kubectl-cache")))
        yield
