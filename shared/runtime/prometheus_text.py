"""Metric families made at a scrape, in Prometheus's text format (prometheus_client renders only registries)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric


class _Families:
    """A collector handing fixed families to prometheus_client's renderer."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(families: Iterable[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)
