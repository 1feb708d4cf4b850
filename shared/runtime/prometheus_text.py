"""Metric families made at a scrape, in Prometheus's text format (prometheus_client renders only collectors)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class _Families(Collector):
    """Fixed families: the renderer reads any collector, no registry needed."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(families: Iterable[Metric]) -> bytes:
    return generate_latest(_Families(families))
