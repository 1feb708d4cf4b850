"""A JSON Schema's validator, built once for a reader of many events. `jsonschema.validate` checks the schema itself
at every call (~15 ms for the status event's): a test reading a topic of hundreds of events held its event loop for
seconds, and the services under test with it."""

from __future__ import annotations

from typing import Any

import jsonschema


def validator_of(schema: dict[str, Any]) -> Any:
    """The schema's validator (`.validate(doc)` raises `jsonschema.ValidationError`), the schema checked once."""
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)
