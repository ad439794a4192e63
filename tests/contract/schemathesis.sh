#!/bin/sh
# The OpenAPI document against the server it describes: schemathesis (pinned below, from PyPI)
# reads `GET /openapi.json` of a `weft serve --workflows examples` on a fresh home and sends
# requests made from it, valid and invalid, checking every answer with all its checks: no 5xx,
# only documented statuses and content types, each body matching its schema, invalid requests
# refused, valid ones not refused with 400 or 422. Once on a server without a token, once on one
# started with `--token-env` (the requests carry its token). Any failure fails the script.
#
# Run from the repository root after `cargo build`; it builds nothing. WEFT=path picks another
# weft binary; CONTRACT_EXAMPLES=N the test cases per operation and phase (default 100: about
# 1,900 cases a server, a minute and a quarter for both with the debug binary on two cores);
# CONTRACT_SEED=N repeats a run's cases. tests/contract/schemathesis.toml names the runs it
# starts first and the one allowance; tests/contract/hooks.py checks NDJSON events.
set -eu

SCRIPT=tests/contract/schemathesis.sh
SCHEMATHESIS_VERSION=4.32.5

fail() {
    printf '%s: FAIL: %s\n' "$SCRIPT" "$*" >&2
    exit 1
}

WEFT=${WEFT:-target/debug/weft}
[ -x "$WEFT" ] || fail "$WEFT not found: run \`cargo build\` first, from the repository root"
[ -d examples ] || fail "run it from the repository root (examples/ is the workflows directory)"
command -v schemathesis >/dev/null 2>&1 \
    || fail "schemathesis is not installed: pip install schemathesis==$SCHEMATHESIS_VERSION"
schemathesis --version | grep -qF "$SCHEMATHESIS_VERSION" \
    || fail "schemathesis $SCHEMATHESIS_VERSION is wanted, not $(schemathesis --version): pip install schemathesis==$SCHEMATHESIS_VERSION"
EXAMPLES=${CONTRACT_EXAMPLES:-100}
SEED=${CONTRACT_SEED:-}

TMP=$(mktemp -d)
SERVER=
stop() {
    if [ -n "$SERVER" ]; then
        kill "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
        SERVER=
    fi
}
trap 'stop; rm -rf "$TMP"' EXIT

# serve NAME [ARGS...]: starts `weft serve` on a home of its own and a free port, and sets URL
# once it answers `GET /openapi.json` (its address is read from what it prints, then polled).
serve() {
    name=$1
    shift
    "$WEFT" --home "$TMP/$name-home" serve --addr 127.0.0.1:0 --workflows examples "$@" \
        2>"$TMP/$name.log" &
    SERVER=$!
    URL=
    tries=0
    while [ -z "$URL" ]; do
        kill -0 "$SERVER" 2>/dev/null || fail "weft serve exited before serving: $(cat "$TMP/$name.log")"
        URL=$(sed -n 's/.*serving \(http:\/\/[^ ]*\).*/\1/p' "$TMP/$name.log" | head -n 1)
        URL=${URL%/}
        tries=$((tries + 1))
        [ "$tries" -le 300 ] || fail "weft serve printed no address in 30 s: $(cat "$TMP/$name.log")"
        [ -n "$URL" ] || sleep 0.1
    done
    until curl -fsS -o /dev/null "$URL/openapi.json"; do
        tries=$((tries + 1))
        [ "$tries" -le 600 ] || fail "weft serve at $URL does not answer GET /openapi.json"
        sleep 0.1
    done
}

# post PATH BODY [CURL ARGS...]: a write to the server started last; fails unless it is
# answered 2xx.
post() {
    path=$1
    body=$2
    shift 2
    curl -fsS -o /dev/null -X POST -H 'content-type: application/json' -d "$body" "$@" "$URL$path" \
        || fail "POST $path $body was refused"
}

# runs [CURL ARGS...]: the runs tests/contract/schemathesis.toml names, on the server started
# last: succeeded, suspended then resumed, suspended then cancelled; all ended.
runs() {
    post '/runs?wait=true' '{"workflow": "files", "run_id": "contract-done"}' "$@"
    for id in contract-approved contract-cancelled; do
        post '/runs?wait=true' "{\"workflow\": \"approval\", \"input\": {\"amount\": 5000}, \"run_id\": \"$id\"}" "$@"
    done
    post /runs/contract-approved/resume '{"label": "manager", "data": {"approved": true, "by": "ana"}}' "$@"
    post /runs/contract-cancelled/cancel '' "$@"
    curl -fsS -o /dev/null "$URL/runs/contract-approved/events?follow=true" \
        || fail "the run contract-approved did not end"
}

# check NAME [SCHEMATHESIS ARGS...]: schemathesis against the server started last.
check() {
    name=$1
    shift
    echo "== schemathesis ($name) against $URL"
    set -- --checks all --max-examples "$EXAMPLES" --workers 2 --request-timeout 20 --no-color "$@"
    [ -z "$SEED" ] || set -- --seed "$SEED" "$@"
    SCHEMATHESIS_HOOKS=tests/contract/hooks.py \
        schemathesis --config-file tests/contract/schemathesis.toml run "$URL/openapi.json" "$@" \
        || fail "schemathesis ($name) found failures above"
}

serve open
runs
check open
stop

TOKEN=contract-$(date +%s)-$$
WEFT_CONTRACT_TOKEN=$TOKEN
export WEFT_CONTRACT_TOKEN
serve token --token-env WEFT_CONTRACT_TOKEN
runs -H "Authorization: Bearer $TOKEN"
check token --header "Authorization: Bearer $TOKEN"
stop

echo "$SCRIPT: ok"
