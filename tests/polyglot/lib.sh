# Shared by the scripts of tests/polyglot, sourced by each after it sets SCRIPT (its name in
# messages); `prepare` then sets WEFT (an absolute path), TMP (removed on exit, after the
# script's own `cleanup`, when it defines one) and HOME_DIR.

# fail TEXT...: stops the script. printf, not echo: dash's echo would turn "\n" in events into
# line breaks.
fail() {
    printf '%s: FAIL: %s\n' "$SCRIPT" "$*" >&2
    exit 1
}

# prepare: checks the weft binary (WEFT=path picks another than target/debug/weft) and makes
# the temporary directory and the home.
prepare() {
    WEFT=${WEFT:-target/debug/weft}
    [ -x "$WEFT" ] || fail "$WEFT not found: run \`cargo build\` first, from the repository root"
    WEFT=$(cd "$(dirname "$WEFT")" && pwd)/$(basename "$WEFT")
    TMP=$(mktemp -d)
    trap 'command -v cleanup >/dev/null 2>&1 && cleanup; rm -rf "$TMP"' EXIT
    HOME_DIR=${POLYGLOT_HOME:-"$TMP/home"}
}

# run WORKFLOW INPUT: the run record (--json) on stdout; the events go to $TMP/stderr.
run() {
    "$WEFT" --home "$HOME_DIR" run "$1" --input "$2" --json 2>"$TMP/stderr" || true
}

# expect WHAT GOT WANT: exact comparison.
expect() {
    [ "$2" = "$3" ] || fail "$1: got [$2], want [$3]"
}

# field RECORD PATH...: a value of the run record (a string as it is, anything else as compact
# JSON with sorted keys, non-ASCII as it is); python3 reads it.
field() {
    rec=$1
    shift
    printf '%s' "$rec" | python3 -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1:]:
    v = v.get(k) if isinstance(v, dict) else None
print(v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
' "$@" 2>/dev/null || echo "(not a run record: $(head -c 500 "$TMP/stderr"))"
}

# has_event TEXT: the last run wrote TEXT among its events (stderr).
has_event() {
    grep -qF "$1" "$TMP/stderr" || fail "no event [$1] in: $(cat "$TMP/stderr")"
}

# adder_tool LANG: `weft new tool adder --lang LANG`, built with its build.sh and called through
# its workflow's `tool:` entry; leaves the run record in $record.
adder_tool() {
    echo "== weft new tool adder --lang $1"
    "$WEFT" new tool adder --lang "$1" --dir "$TMP" >/dev/null || fail "weft new tool"
    echo "== build the tool"
    sh "$TMP/adder/build.sh" >"$TMP/build.log" 2>&1 || {
        cat "$TMP/build.log" >&2
        fail "build.sh of the tool"
    }
    [ -f "$TMP/adder/adder.wasm" ] || fail "the tool's build.sh made no adder.wasm"
    echo "== run the tool (the first load compiles the component)"
    record=$(run "$TMP/adder/workflow.yaml" '{"a": 2, "b": 3}')
    expect "tool status" "$(field "$record" status)" "success"
    expect "tool result" "$(field "$record" result)" '{"sum":5}'
}

# build_refused_without TOOL HINT: the tool project's build.sh, run where TOOL is not on PATH,
# fails and says HINT.
build_refused_without() {
    echo "== build.sh without $1 says how to install it"
    mkdir -p "$TMP/bin"
    ln -sf "$(command -v dirname)" "$TMP/bin/dirname"
    if PATH="$TMP/bin" /bin/sh "$TMP/adder/build.sh" >"$TMP/out" 2>&1; then
        fail "build.sh succeeded without $1"
    fi
    grep -qF "$2" "$TMP/out" || fail "build.sh said: $(cat "$TMP/out")"
}
