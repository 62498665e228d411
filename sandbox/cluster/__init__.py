"""Scheduler and kubelet emulation: HTTP clients of the Kubernetes API emulator.

``scheduler`` binds pods to nodes (``fit`` holds the pure filter rules and the fit
error message), ``kubelet`` runs bound pods, finishes and removes them, ``component``
starts both in the sandbox as the ``cluster`` component.
"""
