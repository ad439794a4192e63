#!/bin/sh
# The polyglot example end to end: examples/python (a step, componentize-py 0.25.1) and
# examples/js (a tool, jco 1.35.0 through npm) built with their own build.sh, as the README says,
# then examples/polyglot.yaml (with the Rust plugin examples/plugins/text.wasm) run with
# `weft run --json` and its result checked exactly, with the Python step's streamed chunk and the
# JavaScript tool's log line. Run from the repository root after `cargo build` (which builds
# text.wasm); needs componentize-py, node (20 or later) and npm, and the npm registry unless
# npm's cache holds the packages. Outside `cargo test`. WEFT=path picks another weft binary.
#
# The plugins are built in place: their build outputs (wordstats.wasm, slugify.wasm,
# node_modules/) are left there for the README's `weft run`, and each project's .gitignore keeps
# them out of git, which this script checks when it runs in a git checkout.
#
# Not safe to run twice at once in one checkout (both would build into examples/). With the
# debug binary about a minute: each build about 10 s (npm install into an empty node_modules/
# 10 s more), weft compiling the two components (~20 MB and ~12 MB) about 30 s. A kept weft home
# would not save that: componentize-py and jco do not build byte-identical components.
set -eu

SCRIPT=tests/polyglot/examples.sh
. "$(dirname "$0")/lib.sh"
[ -f examples/polyglot.yaml ] || fail "run from the repository root"
[ -f examples/plugins/text.wasm ] || fail "no examples/plugins/text.wasm: run \`cargo build\` first"
command -v componentize-py >/dev/null 2>&1 \
    || fail "componentize-py is not installed: pip install componentize-py==0.25.1"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
    || fail "node and npm are not installed (Node.js 20 or later)"

prepare
# npm takes what its cache (~/.npm) holds without asking the registry again.
npm_config_prefer_offline=true
export npm_config_prefer_offline


echo "== sh examples/python/build.sh"
rm -f examples/python/wordstats.wasm
sh examples/python/build.sh >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; fail "examples/python/build.sh"; }
[ -f examples/python/wordstats.wasm ] || fail "examples/python/build.sh made no wordstats.wasm"

echo "== sh examples/js/build.sh"
rm -f examples/js/slugify.wasm
sh examples/js/build.sh >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; fail "examples/js/build.sh"; }
[ -f examples/js/slugify.wasm ] || fail "examples/js/build.sh made no slugify.wasm"

echo "== weft run examples/polyglot.yaml (the first load compiles the components)"
record=$("$WEFT" --home "$HOME_DIR" run examples/polyglot.yaml --json \
    --input '{"text": "The café opens at nine.\nThe café closes at six, the bar at ten."}' \
    2>"$TMP/stderr" || true)
expect "status" "$(field "$record" status)" "success"
expect "result" "$(field "$record" result)" \
    '{"lines":2,"shout":"THE CAFÉ OPENS AT NINE.\nTHE CAFÉ CLOSES AT SIX, THE BAR AT TEN.","slug":"the-cafe-opens-at-nine-the-cafe-closes-at-six-the-bar-at-ten","top":[["at",3],["the",3],["café",2]],"words":14}'
has_event 'step-output stats {"progress":"counted 14 words in 2 lines"}'
has_event '"message":"slugified 63 characters into \"the-cafe-opens-at-nine-the-cafe-closes-at-six-the-bar-at-ten\" (call slug)"'

# The build outputs stay out of git (each project's .gitignore).
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "== git sees no build output"
    seen=$(git status --porcelain --untracked-files=all -- examples/python examples/js \
        | grep -E '\.wasm$|node_modules/|__pycache__/|/\.weft/' || true)
    [ -z "$seen" ] || fail "git sees build outputs: $seen"
fi

echo "tests/polyglot/examples.sh: ok"
