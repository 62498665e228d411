"""The reservation-app emulator: the contract of reservation-api.md over real HTTP,
with a real admission model, faults and a sandbox-only control API."""
