"""schemathesis hooks of tests/contract/schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

- `ndjson_events`: a check that every line of an `application/x-ndjson` answer (the events of
  `GET /runs/{id}/events`) is one event as the document's schema for that content describes
  it; schemathesis has no reader of NDJSON of its own, and an empty line (a heartbeat) is none.
- On CPython 3.11 (before 3.12), `ast.parse` called deep in the stack can raise
  `SystemError: AST constructor recursion depth mismatch` where it should parse; hypothesis
  parses a lambda's source only to name it in a strategy's description, so that failure,
  which says nothing about the API, gives the lambda the name hypothesis gives one it cannot
  read instead of ending the run.
"""

import json
import sys

import jsonschema_rs
import schemathesis

NDJSON = "application/x-ndjson"


@schemathesis.check
def ndjson_events(ctx, response, case):
    """Each line of an NDJSON answer matches the schema the document gives its content."""
    content_type = response.headers.get("content-type", [""])
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    if not content_type.startswith(NDJSON):
        return None
    raw = case.operation.schema.raw_schema
    answer = case.operation.definition.raw["responses"].get(str(response.status_code), {})
    schema = answer.get("content", {}).get(NDJSON, {}).get("schema")
    if schema is None:
        raise AssertionError(f"the document gives no {NDJSON} schema for status {response.status_code}")
    validator = jsonschema_rs.Draft202012Validator(
        {"components": raw.get("components", {}), "allOf": [schema]}
    )
    for number, line in enumerate(response.content.decode("utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"line {number} is not JSON ({e}): {line[:200]}") from None
        errors = [f"{error.message} at {list(error.instance_path)}" for error in validator.iter_errors(event)]
        if errors:
            raise AssertionError(f"line {number} does not match the document: {errors}: {line[:500]}")
    return None


if sys.version_info < (3, 12):
    from hypothesis.internal import lambda_sources

    _describe = lambda_sources._lambda_description

    def _described(f, *args, **kwargs):
        try:
            return _describe(f, *args, **kwargs)
        except SystemError:
            return "lambda: <unknown>"

    lambda_sources._lambda_description = _described
