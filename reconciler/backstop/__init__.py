"""The proof-of-admission backstop (DESIGN §3, §10): loop ``admission-backstop``.

``rules``: the pure rule — which pods are in scope and why one is in breach.
``backstop``: the evicting pass that re-reads and acts, and its wiring.
"""
