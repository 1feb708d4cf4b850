"""Spark SQL DDL for the history and output column tables ((name, type name) pairs)."""

from __future__ import annotations

from collections.abc import Iterable


def ddl(columns: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)
