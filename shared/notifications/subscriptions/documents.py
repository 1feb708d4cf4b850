"""A subscription as a JSON document: the stored (and api) form of `SubscriptionConfig`, snake_case.

The configuration file uses its usual kebab-case (`send-close`); the api's JSON uses snake_case (`send_close`) and
accepts kebab-case too. Fields named after Python keywords (`from_`) appear under their option's name (`from`).
"""

from __future__ import annotations

import dataclasses
import secrets as random_secrets
from collections.abc import Mapping
from typing import Any

from lagwatch.shared.runtime.config import SubscriptionConfig, option_name

SOURCE_CONFIG, SOURCE_API = "config", "api"
READ_ONLY = frozenset({"source"})  # api output only
TEMPLATES = ("body_template", "url_template")


class DocumentInvalid(ValueError):
    """An api document refused; `errors` maps field names to problems."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = dict(errors)


class SubscriptionInvalid(DocumentInvalid):
    """A subscription refused."""


def kebab(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A document's keys as the configuration's option names (what `build_section` reads)."""
    return {str(k).replace("_", "-"): v for k, v in doc.items()}


def to_document(config: SubscriptionConfig) -> dict[str, Any]:
    """The stored (and unmasked) JSON form, snake_case; fields named after Python keywords (`from_`) under their
    option's name (`from`)."""
    doc = dataclasses.asdict(config)
    return {option_name(f) if f.name.endswith("_") else f.name: doc[f.name] for f in dataclasses.fields(config)}


def new_id() -> str:
    return "sub-" + random_secrets.token_hex(6)
