#!/bin/sh
# Python plugins end to end: `weft new step|tool --lang python` writes projects that build with
# componentize-py (0.25.1) and run with `weft run`; `fetch` reaches granted hosts only; an
# uncaught exception in a step fails it with code `exception`. Run from the repository root
# after `cargo build`; needs componentize-py.
# Outside `cargo test`, which needs only the Rust toolchain. WEFT=path picks another weft binary.
#
# With the debug binary (whose Cranelift is built optimized) about a minute and a half: each
# ~20 MB component is compiled on first load (about 10 s); POLYGLOT_HOME=dir keeps the home,
# and the compiled code, between runs.
set -eu

SCRIPT=tests/polyglot/python.sh
. "$(dirname "$0")/lib.sh"
command -v componentize-py >/dev/null 2>&1 \
    || fail "componentize-py is not installed: pip install componentize-py==0.25.1"
prepare

echo "== weft new step greet --lang python"
"$WEFT" new step greet --lang python --dir "$TMP" >/dev/null || fail "weft new step"
for f in app.py weft_sdk.py build.sh workflow.yaml README.md .gitignore wit/plugin.wit; do
    [ -f "$TMP/greet/$f" ] || fail "the step project has no $f"
done
# A second step in the same component (one build, one compile): the SDK's context, suspend and
# resume, tripwire, custom events, and environment variables as the workflow grants them.
cat >>"$TMP/greet/app.py" <<'PY'


import os

from weft_sdk import HttpError, Suspend, Tripwire, aborted, custom, fetch, init_data


def fetched(url, **kw):
    """`fetch` of url: "STATUS BODY", or the HttpError's code."""
    try:
        r = fetch(url, **kw)
        return f"{r.status} {r.text()}"
    except HttpError as e:
        return e.code


@step("kit", description="Exercises the SDK for tests/polyglot/python.sh.")
def kit(input, ctx):
    what = input.get("do")
    if what == "context":
        return {"run_id": ctx.run_id, "workflow_id": ctx.workflow_id, "step_path": ctx.step_path,
                "attempt": ctx.attempt, "init": init_data(), "aborted": aborted()}
    if what == "env":
        return {"mood": os.environ.get("MOOD"), "secret": os.environ.get("WEFT_TEST_SECRET")}
    if what == "suspend":
        if ctx.resume is None:
            return Suspend({"question": "ok?"}, labels=["review"])
        return {"resumed": ctx.resume, "asked": ctx.suspend_payload}
    if what == "fetch":
        return {"granted": fetched(input["granted"] + "/a?q=1", headers={"X-Test": "yes"}),
                "posted": fetched(input["granted"] + "/p", method="POST", body="ping"),
                "refused": fetched(input["refused"] + "/b"),
                "not-http": fetched("ftp://example.com/")}
    if what == "trip":
        raise Tripwire("no way", metadata={"why": "test"}, processor_id="kit")
    custom("progress", {"n": 1})
    return {}
PY
# A server on a free port of 127.0.0.1: kit.yaml grants it; localhost (the same server, another
# name) it does not.
python3 -c '
import http.server, sys
class Echo(http.server.BaseHTTPRequestHandler):
    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        test = self.headers.get("X-Test")
        self.answer(200, f"hello from {self.path} x-test={test}")
    def do_POST(self):
        self.answer(201, "got " + self.rfile.read(int(self.headers["Content-Length"])).decode())
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Echo)
open(sys.argv[1] + ".tmp", "w").write(str(server.server_address[1]))
__import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
' "$TMP/port" &
SERVER=$!
cleanup() { kill "$SERVER" 2>/dev/null || true; }
for _ in $(seq 50); do [ -s "$TMP/port" ] && break; sleep 0.1; done
PORT=$(cat "$TMP/port" 2>/dev/null) || fail "the test HTTP server did not start"

cat >"$TMP/greet/kit.yaml" <<YAML
id: kit
plugins:
  greet:
    wasm: greet.wasm
    limits: { memory-mib: 256, timeout-ms: 10000 }
    grants: { env: { MOOD: happy }, http: ["127.0.0.1:$PORT"] }
steps:
  - { id: kit, plugin: greet, step: kit }
YAML

echo "== build the step"
sh "$TMP/greet/build.sh" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; fail "build.sh of the step"; }
[ -f "$TMP/greet/greet.wasm" ] || fail "the step's build.sh made no greet.wasm"

echo "== run the step (the first load compiles the component)"
record=$(run "$TMP/greet/workflow.yaml" '{"name": "Ada"}')
expect "step status" "$(field "$record" status)" "success"
expect "step result" "$(field "$record" result)" '{"greeting":"Hello, Ada!"}'
expect "step state" "$(field "$record" state)" '{"last-greeted":"Ada"}'

echo "== an exception in the step fails it with code exception"
record=$(run "$TMP/greet/workflow.yaml" '{}')
expect "exception status" "$(field "$record" status)" "failed"
expect "exception code" "$(field "$record" error code)" "exception"
expect "exception message" "$(field "$record" error message)" "KeyError: 'name'"
expect "exception type" "$(field "$record" error details type)" "KeyError"
case "$(field "$record" error details traceback)" in
*"Traceback (most recent call last)"*"KeyError"*) ;;
*) fail "exception details carry no traceback: $record" ;;
esac

echo "== the SDK: context, environment, fetch, suspend and resume, tripwire"
record=$(run "$TMP/greet/kit.yaml" '{"do": "context"}')
expect "context" "$(field "$record" result)" \
    "{\"aborted\":false,\"attempt\":0,\"init\":{\"do\":\"context\"},\"run_id\":\"$(field "$record" run_id)\",\"step_path\":\"kit\",\"workflow_id\":\"kit\"}"
record=$(WEFT_TEST_SECRET=leaked run "$TMP/greet/kit.yaml" '{"do": "env"}')
expect "granted env" "$(field "$record" result)" '{"mood":"happy","secret":null}'
record=$(run "$TMP/greet/kit.yaml" '{"do": "fetch", "granted": "http://127.0.0.1:'$PORT'", "refused": "http://localhost:'$PORT'"}')
expect "fetch as granted" "$(field "$record" result)" \
    '{"granted":"200 hello from /a?q=1 x-test=yes","not-http":"http-request-uri-invalid","posted":"201 got ping","refused":"http-request-denied"}'
record=$(run "$TMP/greet/kit.yaml" '{"do": "suspend"}')
expect "suspend status" "$(field "$record" status)" "suspended"
expect "suspend labels" "$(field "$record" steps kit labels)" '["review"]'
run_id=$(field "$record" run_id)
record=$("$WEFT" --home "$HOME_DIR" resume "$run_id" --label review --data '{"yes": true}' --json 2>"$TMP/stderr" || true)
expect "resumed" "$(field "$record" result)" '{"asked":{"question":"ok?"},"resumed":{"yes":true}}'
record=$(run "$TMP/greet/kit.yaml" '{"do": "trip"}')
expect "tripwire status" "$(field "$record" status)" "tripwire"
expect "tripwire" "$(field "$record" tripwire)" '{"metadata":{"why":"test"},"processor_id":"kit","reason":"no way","retry":false}'

adder_tool python
build_refused_without componentize-py "pip install componentize-py==0.25.1"

echo "tests/polyglot/python.sh: ok"
