"""weft_sdk: the small glue between a Python weft plugin and the host.

It is plain Python, part of this project: read it, change it, or copy it elsewhere. It relies on
the bindings componentize-py generates from `wit/plugin.wit` while it builds the component (the
`wit_world` package), so it runs inside weft only.

What it does:

- `@step(NAME, ...)` and `@tool(NAME, ...)` register a function as a step or a tool, with its
  description and JSON Schemas (Python dicts); `describe` lists what was registered.
- JSON in and out: the function gets the parsed input (a step) or arguments (a tool) and a
  `Context`, and returns anything `json.dumps` accepts (`Suspend(...)` or `Bail(...)` too, from a
  step).
- Failures: `raise Fail(message, code=...)` fails the step or tool with that code;
  `raise Tripwire(reason, metadata=...)` trips a guardrail and ends the run `tripwire`. Any other
  uncaught exception fails it with code `exception`, the exception as the message, and
  `{"type": ..., "traceback": ...}` in `details` (without this, the host would see a bare trap).
- `write`, `custom`, `log`, `set_state`, `init_data`, `step_result` and `aborted` reach the
  host's `writer`, `log`, `run` and `abort` imports.
- `fetch(url, ...)` makes an HTTP request through `wasi:http/outgoing-handler` (the project's
  worlds import it); weft lets it out only to a host the workflow grants (`grants.http`).
- Type hints throughout: an editor or mypy checks a plugin against them.

The app module (app.py) exports `Steps` (world step-plugin) or `Tools` (world tool-plugin):
`from weft_sdk import Steps` is all it takes.
"""

from __future__ import annotations

import json
import traceback
from urllib.parse import urlsplit
from typing import Any, Callable, Iterable, Optional

from componentize_py_types import Err
from wit_world.imports import log as _log
from wit_world.imports import abort as _abort
from wit_world.imports import writer

try:  # a world that also imports wasi:http has two `types` interfaces, named by package
    from wit_world.imports import weft_plugin_types as types
except ImportError:  # the bare step-plugin and tool-plugin worlds
    from wit_world.imports import types

try:
    from wit_world.imports import outgoing_handler as _outgoing
    from wit_world.imports import wasi_http_types as _http
    from wit_world.imports import streams as _streams
except ImportError:  # a world without wasi:http: `fetch` says so
    _outgoing = None

try:
    from wit_world.imports import run as _run
except ImportError:  # the tool-plugin world has no `run` import
    _run = None

#: The JSON Schema dialect weft reads.
SCHEMA = "https://json-schema.org/draft/2020-12/schema"

#: A JSON value as Python holds it.
Json = Any

_STEPS: dict = {}  # name -> (function, StepInfo)
_TOOLS: dict = {}  # name -> (function, ToolInfo)


def _schema(schema: Optional[dict]) -> Optional[str]:
    """A schema dict as JSON text (with `$schema` set), or None."""
    if schema is None:
        return None
    return json.dumps({"$schema": SCHEMA, **schema})


def step(
    name: str,
    description: str = "",
    input_schema: Optional[dict] = None,
    output_schema: Optional[dict] = None,
    config_schema: Optional[dict] = None,
    suspend_schema: Optional[dict] = None,
    resume_schema: Optional[dict] = None,
) -> Callable:
    """Registers `fn(input, ctx)` as the step `name`; it returns the step's output (or
    `Suspend(...)`, or `Bail(...)`). weft checks input, output, config, suspend payload and
    resume data against the schemas given."""

    def register(fn: Callable[[Json, "Context"], Any]) -> Callable:
        info = types.StepInfo(
            name=name,
            description=description or (fn.__doc__ or "").strip(),
            input_schema=_schema(input_schema),
            output_schema=_schema(output_schema),
            suspend_schema=_schema(suspend_schema),
            resume_schema=_schema(resume_schema),
            config_schema=_schema(config_schema),
        )
        _STEPS[name] = (fn, info)
        return fn

    return register


def tool(
    name: str,
    description: str = "",
    input_schema: Optional[dict] = None,
    output_schema: Optional[dict] = None,
    needs_approval: bool = False,
) -> Callable:
    """Registers `fn(args, ctx)` as the tool `name`; it returns the tool's result.
    `needs_approval=True`: an agent's call waits for a person's approval."""

    def register(fn: Callable[[Json, "Context"], Any]) -> Callable:
        info = types.ToolInfo(
            name=name,
            description=description or (fn.__doc__ or "").strip(),
            input_schema=_schema(input_schema or {"type": "object"}),
            output_schema=_schema(output_schema),
            needs_approval=needs_approval,
        )
        _TOOLS[name] = (fn, info)
        return fn

    return register


class Fail(Exception):
    """Raise to fail with a code; `retryable=True` lets the workflow's retry policy retry it."""

    def __init__(
        self, message: str, code: str = "failed", retryable: bool = False, details: Optional[dict] = None
    ) -> None:
        super().__init__(message)
        self.failure = types.Failure(
            message=message,
            code=code,
            retryable=retryable,
            details=None if details is None else json.dumps(details),
            tripwire=None,
        )


class Tripwire(Exception):
    """Raise to trip a guardrail: the run ends `tripwire` with `reason` and `metadata` (inside
    an agent too); `retry=True` tells the caller it may try again with changed input."""

    def __init__(
        self,
        reason: str,
        metadata: Optional[dict] = None,
        retry: bool = False,
        processor_id: Optional[str] = None,
    ) -> None:
        super().__init__(reason)
        self.failure = types.Failure(
            message=reason,
            code="tripwire",
            retryable=False,
            details=None,
            tripwire=types.Tripwire(
                reason=reason,
                retry=retry,
                metadata=None if metadata is None else json.dumps(metadata),
                processor_id=processor_id,
            ),
        )


class Suspend:
    """Return from a step to pause the run until `weft resume`; `labels` are extra names to
    resume it by. The step runs again with `ctx.resume` set to the resume data."""

    def __init__(self, payload: Json, labels: Iterable[str] = ()) -> None:
        self.payload, self.labels = payload, list(labels)


class Bail:
    """Return from a step to end the whole run now, successfully, with `result`."""

    def __init__(self, result: Json) -> None:
        self.result = result


class Context:
    """Where the call stands.

    Both: `config` (the entry's `config:`), `run_id`, `raw` (the host's record as the bindings
    give it). A step: `workflow_id`, `step_path`, `attempt` (0, then +1 per retry), `state`
    (the run's state when the step started), `resume` (the resume data, or None),
    `suspend_payload` (what it suspended with, when resumed), `foreach_index`, `iteration`.
    A tool: `call_id` (the same for every attempt of one call)."""

    def __init__(self, raw: Any, config: Json) -> None:
        self.raw, self.config = raw, config
        self.run_id: str = raw.run_id
        self.workflow_id: Optional[str] = getattr(raw, "workflow_id", None)
        self.step_path: Optional[str] = getattr(raw, "step_path", None)
        self.call_id: Optional[str] = getattr(raw, "call_id", None)
        self.attempt: int = getattr(raw, "attempt", 0)
        state = getattr(raw, "state", None)
        self.state: Json = None if state is None else json.loads(state)
        resumption = getattr(raw, "resume", None)
        self.resume: Json = None if resumption is None else json.loads(resumption.data)
        self.suspend_payload: Json = (
            None if resumption is None else json.loads(resumption.suspend_payload)
        )
        self.foreach_index: Optional[int] = getattr(raw, "foreach_index", None)
        self.iteration: Optional[int] = getattr(raw, "iteration", None)


def write(value: Json) -> None:
    """Emits `value` (JSON-able) as a chunk of streamed output (`weft watch`)."""
    writer.write(json.dumps(value))


def custom(kind: str, data: Json) -> None:
    """Emits a custom event of `kind` with `data` (a `step-custom` event)."""
    writer.custom(kind, json.dumps(data))


def log(message: str, level: str = "info") -> None:
    """A log line kept with the run; level: trace, debug, info, warn or error."""
    _log.log(_log.Level[level.upper()], message)


def aborted() -> bool:
    """True once the run is cancelled or the call timed out: stop and return soon."""
    return _abort.is_aborted()


def set_state(patch: dict) -> None:
    """Merges a dict's top-level keys into the run's state when the step ends (steps only)."""
    if _run is None:
        raise RuntimeError("set_state: only steps have run state")
    _run.set_state(json.dumps(patch))


def init_data() -> Json:
    """The input of the step's workflow file (steps only)."""
    if _run is None:
        raise RuntimeError("init_data: only steps read their run")
    return json.loads(_run.init_data())


def step_result(step_id: str) -> Json:
    """The output of an earlier step of the run, by id or path, or None (steps only)."""
    if _run is None:
        raise RuntimeError("step_result: only steps read their run")
    out = _run.step_result(step_id)
    return None if out is None else json.loads(out)


class HttpError(Exception):
    """An HTTP request that got no response: `code` is the `wasi:http` error-code case
    (`http-request-denied` for a host the workflow does not grant, `connection-refused`, ...)."""

    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code


class Response:
    """An HTTP response: `status`, `headers` (a list of (name, value) pairs, names in lower
    case) and the whole `body` as bytes."""

    def __init__(self, status: int, headers: list, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        """The first value of header `name` (any case), or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def text(self) -> str:
        """The body as UTF-8 text."""
        return self.body.decode("utf-8")

    def json(self) -> Json:
        """The body parsed as JSON."""
        return json.loads(self.body)


_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


def _error_code(value: Any) -> str:
    """`ErrorCode_HttpRequestDenied` -> `http-request-denied`."""
    name = type(value).__name__.split("_", 1)[-1]
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def fetch(
    url: str,
    method: str = "GET",
    headers: Optional[dict] = None,
    body: Optional[bytes | str] = None,
) -> Response:
    """Makes an HTTP request and waits for the whole response. weft lets it out only to a host
    in the workflow's `grants.http`; any other raises `HttpError("http-request-denied")`.
    A response is returned whatever its status (redirects are not followed); `HttpError` means
    there was none."""
    if _outgoing is None:
        raise HttpError("unsupported", "this plugin's world does not import wasi:http")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError("http-request-uri-invalid", f"not an http(s) URL: {url!r}")
    data = body.encode() if isinstance(body, str) else body
    pairs = [(k.lower(), str(v).encode()) for k, v in (headers or {}).items()]
    if data and not any(k == "content-length" for k, _ in pairs):
        pairs.append(("content-length", str(len(data)).encode()))  # else it goes chunked
    try:
        fields = _http.Fields.from_list(pairs)
    except Err as e:
        raise HttpError("http-request-header-invalid", repr(e.value)) from None
    request = _http.OutgoingRequest(fields)
    upper = method.upper()
    if upper in _METHODS:
        request.set_method(getattr(_http, "Method_" + upper.capitalize())())
    else:
        request.set_method(_http.Method_Other(method))
    request.set_scheme(_http.Scheme_Https() if parts.scheme == "https" else _http.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing_body = request.body()
    if data:
        with outgoing_body.write() as sink:
            for at in range(0, len(data), 4096):  # blocking-write-and-flush takes 4096 at most
                sink.blocking_write_and_flush(data[at : at + 4096])
    _http.OutgoingBody.finish(outgoing_body, None)
    try:
        future = _outgoing.handle(request, None)
    except Err as e:
        raise HttpError(_error_code(e.value), repr(e.value)) from None
    with future:
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
    # option<result<result<incoming-response, error-code>>>
    if answer is None or isinstance(answer, Err):
        raise HttpError("internal-error", "the response was already taken")
    if isinstance(answer.value, Err):
        raise HttpError(_error_code(answer.value.value), repr(answer.value.value))
    with answer.value.value as response:
        status = response.status()
        with response.headers() as fields:
            pairs = [(k, v.decode("latin-1")) for k, v in fields.entries()]
        incoming = response.consume()
        chunks = []
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(65536))
                except Err as e:
                    if isinstance(e.value, _streams.StreamError_Closed):
                        break
                    raise HttpError("http-protocol-error", repr(e.value)) from None
        with _http.IncomingBody.finish(incoming):  # the trailers, unread
            pass
    return Response(status, pairs, b"".join(chunks))


def _failure(code: str, message: str) -> Any:
    return types.Failure(message=message, code=code, retryable=False, details=None, tripwire=None)


def _guard(call: Callable[[], Any]) -> Any:
    """Runs `call()`; turns Fail, Tripwire and any other exception into the host's failure
    (raised as Err, which the bindings hand back as the `result`'s error)."""
    try:
        return call()
    except (Fail, Tripwire) as e:
        raise Err(e.failure)
    except Err:
        raise
    except Exception as e:  # noqa: BLE001 - every exception must become a failure, not a trap
        details = {"type": type(e).__name__, "traceback": traceback.format_exc()}
        raise Err(
            types.Failure(
                message=f"{type(e).__name__}: {e}",
                code="exception",
                retryable=False,
                details=json.dumps(details),
                tripwire=None,
            )
        )


class Steps:
    """The `steps` export: what the bindings call."""

    def describe(self):
        return [info for _, info in _STEPS.values()]

    def execute(self, name, ctx):
        if name not in _STEPS:
            raise Err(_failure("unknown-step", f"no step named {name!r}"))
        fn = _STEPS[name][0]

        def call():
            out = fn(json.loads(ctx.input), Context(ctx, json.loads(ctx.config)))
            if isinstance(out, Suspend):
                return types.Outcome_Suspend(types.Suspension(json.dumps(out.payload), out.labels))
            if isinstance(out, Bail):
                return types.Outcome_Bail(json.dumps(out.result))
            return types.Outcome_Done(json.dumps(out))

        return _guard(call)


class Tools:
    """The `tools` export: what the bindings call."""

    def describe(self):
        return [info for _, info in _TOOLS.values()]

    def call(self, name, call):
        if name not in _TOOLS:
            raise Err(_failure("unknown-tool", f"no tool named {name!r}"))
        fn = _TOOLS[name][0]
        return _guard(lambda: json.dumps(fn(json.loads(call.args), Context(call, json.loads(call.config)))))
