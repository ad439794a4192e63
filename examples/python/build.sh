#!/bin/sh
# Builds this plugin into wordstats.wasm (a WebAssembly component, world `step-plugin` of
# wit/plugin.wit), the file workflow.yaml loads. Needs componentize-py 0.25.1. Extra arguments
# go to `componentize-py componentize`.
set -eu
cd "$(dirname "$0")"
if ! command -v componentize-py >/dev/null 2>&1; then
    echo "error: componentize-py is not installed; install it with:" >&2
    echo "  pip install componentize-py==0.25.1" >&2
    exit 1
fi
componentize-py -d wit -w step-plugin componentize app -o wordstats.wasm "$@"
echo "built wordstats.wasm" >&2
