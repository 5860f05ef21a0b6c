#!/bin/sh
# Installs the programs the test suite runs for real when they are missing:
# redis-server and redis-cli (Redis store tests, Redis Cluster tests) and
# prometheus/promtool (alert rule tests, end-to-end dashboard tests) and
# chromium (the browser tests of the HTML what-if report, the docs/rollout.md
# screenshots) and postgresql (the tenant directory tests: initdb and the
# server, run by the tests as the postgres user the package creates).
set -eu
missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# policy-rc.d keeps the packages' own services from starting: the tests start
# their servers themselves on free loopback ports.
printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
$SUDO chmod +x /usr/sbin/policy-rc.d
$SUDO apt-get install -y -qq --no-install-recommends $missing
$SUDO rm -f /usr/sbin/policy-rc.d
