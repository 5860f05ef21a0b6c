#!/bin/sh
# Produces the screenshots of docs/rollout.md. The what-if report: replays the
# example request log (examples/replay) through the example policy files
# with admitctl replay --html --suggest, and photographs the page with
# headless Chromium (scripts/test-deps.sh installs it).
#
#   scripts/screenshots.sh [OUT_DIR]     (default docs/)
set -eu
cd "$(dirname "$0")/.."
out="${1:-docs}"
mkdir -p "$out"
command -v chromium >/dev/null 2>&1 || ./scripts/test-deps.sh
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go run ./cmd/admitctl replay --log examples/replay/sample.jsonl \
	--config examples/replay/current.yaml --config examples/replay/candidate.yaml \
	--suggest --html "$tmp/whatif-report.html" >/dev/null
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
	--user-data-dir="$tmp/profile" --window-size=1300,1500 \
	--screenshot="$out/whatif-report.png" "file://$tmp/whatif-report.html" 2>/dev/null
echo "wrote $out/whatif-report.png"
# The status page of a controller under known traffic, as the browser
# test of package shadow/status serves it.
SLUICE_SCREENSHOT_DIR="$(cd "$out" && pwd)" go test -count=1 -run '^TestStatusPageInBrowser$' ./shadow/status >/dev/null
echo "wrote $out/status-page.png"
