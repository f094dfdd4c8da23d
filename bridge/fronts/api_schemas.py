"""JSON Schemas of the daemon's wire types, generated from their msgspec Structs.

The API descriptions (`/api/openapi.json`, bridge/fronts/openapi.py; `/api/asyncapi.json`,
bridge/fronts/asyncapi.py) take every schema of a body or a frame from here, so a field
added to a Struct is in the documents at once, and they cannot drift from the code.

`msgspec.json.schema_components` writes JSON Schema 2020-12 with OpenAPI 3.1's
`discriminator` object (OpenAPI 3.1 §4.8.25). AsyncAPI 3.0's default schema format is
the AsyncAPI Schema Object (AsyncAPI 3.0 §3.3.41, a superset of JSON Schema Draft 07)
whose `discriminator` is only the property's name, and which has no `prefixItems`:
`for_asyncapi` rewrites those two.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

__all__ = ["components", "for_asyncapi"]


def components(types: Iterable[Any], prefix: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(one schema per type, in order, each usually a `$ref`; the named schemas they use),
    their references written `prefix` + name (e.g. "#/components/schemas/")."""
    schemas, named = msgspec.json.schema_components(list(types), ref_template=prefix + "{name}")
    return list(schemas), dict(named)


def for_asyncapi(schema: Any) -> Any:
    """`schema` in the AsyncAPI Schema Object's words (Draft 07), recursively."""
    if isinstance(schema, list):
        return [for_asyncapi(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "discriminator" and isinstance(value, dict):
            out[key] = value["propertyName"]
        elif key == "prefixItems":  # a tuple: Draft 07 writes it as `items` with a list
            out["items"] = for_asyncapi(value)
        elif key == "items" and "prefixItems" in schema:
            out["additionalItems"] = for_asyncapi(value)
        else:
            out[key] = for_asyncapi(value)
    return out
