"""Shared pytest configuration."""

from __future__ import annotations
