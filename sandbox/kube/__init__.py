"""An emulated kube-apiserver for tests and the sandbox (see docs/developer/sandbox.md).

``KubeServer`` is the server; ``sandbox.kube.component.KubeComponent`` runs it as a
sandbox component; ``sandbox.kube.admission_api`` is the mutating admission hook.
"""
