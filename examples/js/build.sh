#!/bin/sh
# Builds this plugin into slugify.wasm (a WebAssembly component, world `tool-plugin-wasi` of
# wit/), the file workflow.yaml loads. Needs Node.js 20 or later with npm: `npm install` puts
# the pinned jco 1.35.0 (and componentize-js 0.22.0, StarlingMonkey) into
# node_modules/ (quick once it is there), then `npm run build` runs
#   jco componentize app.js --wit wit --world-name tool-plugin-wasi --bundle \
#       --bundle-config bundle.config.js -o slugify.wasm
# Extra arguments go to `jco componentize`.
set -eu
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "error: node and npm are not installed; install Node.js 20 or later (npm comes with it):" >&2
    echo "  https://nodejs.org/ or your system's package manager (e.g. apt-get install nodejs npm)" >&2
    exit 1
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
    echo "error: jco 1.35.0 needs Node.js 20 or later; this is node $(node --version)" >&2
    exit 1
fi
npm install --no-audit --no-fund --loglevel=error >&2
npm run --silent build -- "$@" >&2
echo "built slugify.wasm" >&2
