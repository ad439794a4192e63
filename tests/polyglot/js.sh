#!/bin/sh
# JavaScript plugins end to end: `weft new step|tool --lang js` writes projects that build with
# their own build.sh (npm installs the pinned jco 1.35.0; `jco componentize`, StarlingMonkey) and
# run with `weft run`. Checks a step's result, state, streamed output and log line; a tool
# through a `tool:` entry; and, with steps added to the step project the way its README says, a
# suspension resumed with `weft resume`, granted and refused environment variables and HTTP
# hosts, `Fail`, `Tripwire`, `bail`, and an uncaught exception failing with code `exception` and
# the stack in `details`. Run from the repository root after `cargo build`; needs node (20 or
# later) and npm, and the npm registry unless npm's cache holds the packages. Outside
# `cargo test`. WEFT=path picks another weft binary.
#
# With the debug binary (whose Cranelift is built optimized) about a minute and a half, most of
# it builds and weft compiling each ~12 MB component on first load.
set -eu

SCRIPT=tests/polyglot/js.sh
. "$(dirname "$0")/lib.sh"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
    || fail "node and npm are not installed (Node.js 20 or later)"
prepare
SERVER=
cleanup() {
    [ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true
}
# npm takes what its cache (~/.npm) holds without asking the registry again: CI keeps that
# cache between runs (never node_modules/).
npm_config_prefer_offline=true
export npm_config_prefer_offline

echo "== weft new step greet --lang js"
"$WEFT" new step greet --lang js --dir "$TMP" >/dev/null || fail "weft new step"
P="$TMP/greet"
for f in app.js weft_sdk.js weft_sdk.d.ts package.json bundle.config.js build.sh workflow.yaml \
    README.md .gitignore wit/plugin.wit wit/worlds.wit wit/deps/wasi-cli/environment.wit; do
    [ -f "$P/$f" ] || fail "the step project has no $f"
done

# The steps a README reader would add (README.md, "Add a second step"), to check the rest of
# the SDK: suspend and resume, env, fetch, Fail, Tripwire, bail.
cat >>"$P/app.js" <<'EOF'

import { bail, env, environment, Fail, suspend, Tripwire } from './weft_sdk.js';

/** `fetch` of url: "STATUS BODY", or the error's name. @param {string} url */
async function fetched(url) {
  try {
    const response = await fetch(url);
    return `${response.status} ${(await response.text()).trim()}`;
  } catch (e) {
    return e instanceof Error ? e.name : String(e);
  }
}

step('approve', { description: 'suspends, then reports what it was resumed with' }, async (input, ctx) => {
  if (ctx.resume === null) return suspend({ ask: input.ask }, { labels: ['manager'] });
  return {
    data: ctx.resume.data,
    payload: ctx.resume.suspendPayload,
    granted: env('GRANTED') ?? null,
    fromHost: env('FROM_HOST') ?? null,
    refused: env('REFUSED') ?? null,
    names: Object.keys(environment()).sort(),
    fetchGranted: await fetched(input.granted),
    fetchRefused: await fetched(input.refused),
    stepPath: ctx.stepPath,
  };
});
step('refuse', {}, (input) => {
  throw new Fail('not today', { code: 'invalid-input', details: { why: input.why } });
});
step('trip', {}, () => {
  throw new Tripwire('blocked', { metadata: { rule: 'r1' }, processorId: 'guard' });
});
step('stop', {}, (input) => bail({ early: input }));
EOF

echo "== build the step"
sh "$P/build.sh" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; fail "build.sh of the step"; }
[ -f "$P/greet.wasm" ] || fail "the step's build.sh made no greet.wasm"
# The types: app.js (with the steps above) checks against weft_sdk.d.ts. tsc comes with jco.
if [ -x "$P/node_modules/.bin/tsc" ]; then
    echo "== tsc --checkJs app.js"
    (cd "$P" && node_modules/.bin/tsc --noEmit --allowJs --checkJs --strict --target es2022 \
        --module nodenext --moduleResolution nodenext --skipLibCheck app.js) >"$TMP/tsc.log" 2>&1 \
        || { cat "$TMP/tsc.log" >&2; fail "app.js does not type-check against weft_sdk.d.ts"; }
fi

echo "== run the step (the first load compiles the component)"
record=$(run "$P/workflow.yaml" '{"name": "Ada"}')
expect "step status" "$(field "$record" status)" "success"
expect "step result" "$(field "$record" result)" '{"greeting":"Hello, Ada!"}'
expect "step state" "$(field "$record" state)" '{"last-greeted":"Ada"}'
has_event 'step-output greet "Hello, Ada!"'
has_event '"message":"greeting Ada (attempt 0)"'

echo "== an exception in the step fails it with code exception"
record=$(run "$P/workflow.yaml" '{}')
expect "exception status" "$(field "$record" status)" "failed"
expect "exception code" "$(field "$record" error code)" "exception"
expect "exception message" "$(field "$record" error message)" \
    'TypeError: can'"'"'t access property "trim", input.name is undefined'
expect "exception type" "$(field "$record" error details type)" "TypeError"
case "$(field "$record" error details stack)" in
greet@app.js:*) ;;
*) fail "exception details carry no stack from greet: $record" ;;
esac

# A server on a free port of 127.0.0.1: the workflow grants it; localhost (the same server,
# another name) it does not.
node -e '
const server = require("http").createServer((req, res) => res.end("hello from " + req.url));
server.listen(0, "127.0.0.1", () => require("fs").writeFileSync(process.argv[1], String(server.address().port)));
' "$TMP/port" &
SERVER=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$TMP/port" ] && break; sleep 0.2; done
PORT=$(cat "$TMP/port" 2>/dev/null) || fail "the test HTTP server did not start"

# checks.yaml STEP: a workflow running one of the added steps, with grants.
checks() {
    cat >"$P/checks.yaml" <<EOF
id: checks
plugins:
  greet:
    wasm: greet.wasm
    limits: { memory-mib: 128, timeout-ms: 10000 }
    grants:
      env: { GRANTED: granted-value, FROM_HOST: { from-host: JS_SH_SECRET } }
      http: ["127.0.0.1:$PORT"]
steps:
  - { id: check, plugin: greet, step: $1 }
EOF
    echo "$P/checks.yaml"
}

echo "== suspend, then weft resume with data; env and fetch as granted"
export JS_SH_SECRET=from-the-host REFUSED=not-granted
input='{"ask": "ok?", "granted": "http://127.0.0.1:'$PORT'/a", "refused": "http://localhost:'$PORT'/b"}'
record=$(run "$(checks approve)" "$input")
expect "suspend status" "$(field "$record" status)" "suspended"
expect "suspend payload" "$(field "$record" steps check suspend_payload)" '{"ask":"ok?"}'
expect "suspend labels" "$(field "$record" steps check labels)" '["manager"]'
run_id=$(field "$record" run_id)
record=$("$WEFT" --home "$HOME_DIR" resume "$run_id" --label manager --data '{"approved": true}' \
    --json 2>"$TMP/stderr" || true)
expect "resumed status" "$(field "$record" status)" "success"
expect "resumed result" "$(field "$record" result)" \
    '{"data":{"approved":true},"fetchGranted":"200 hello from /a","fetchRefused":"TypeError","fromHost":"from-the-host","granted":"granted-value","names":["FROM_HOST","GRANTED"],"payload":{"ask":"ok?"},"refused":null,"stepPath":"check"}'

echo "== Fail, Tripwire and bail"
record=$(run "$(checks refuse)" '{"why": "closed"}')
expect "Fail status" "$(field "$record" status)" "failed"
expect "Fail error" "$(field "$record" error)" \
    '{"code":"invalid-input","details":{"why":"closed"},"message":"not today","step":"check"}'
record=$(run "$(checks trip)" '{}')
expect "Tripwire status" "$(field "$record" status)" "tripwire"
expect "Tripwire" "$(field "$record" tripwire)" \
    '{"metadata":{"rule":"r1"},"processor_id":"guard","reason":"blocked","retry":false}'
record=$(run "$(checks stop)" '{"n": 1}')
expect "bail status" "$(field "$record" status)" "success"
expect "bail result" "$(field "$record" result)" '{"early":{"n":1}}'

adder_tool js
has_event '"message":"2 + 3 = 5 (call '
build_refused_without node "install Node.js 20 or later"

echo "tests/polyglot/js.sh: ok"
