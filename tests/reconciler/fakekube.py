"""Moved: the one unit-test Kubernetes fake is ``tests.fakekube``.

Kept only as an alias for tests written against the old path while it moved; import
``tests.fakekube`` instead. Delete this module once nothing imports it.
"""

from tests.fakekube import FakeKube

__all__ = ["FakeKube"]
