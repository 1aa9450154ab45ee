#!/usr/bin/env bash
# The project's test command: installs what the integration tests need,
# starts local stand-ins for Kinesis, DynamoDB, S3 and Valkey on 127.0.0.1,
# runs go vet and the whole test suite (unit and integration) against them,
# and stops every server it started, whatever happens.
#
# Usage:
#   ./scripts/test.sh                      go vet + go test of ./...
#   ./scripts/test.sh [ARGS...]            ARGS are passed to go test
#   ./scripts/test.sh --servers-only       start the servers, print the
#                                          export lines, wait for Ctrl-C
#
# Argument handling: every argument is given to `go test` after the default
# flags (-race -tags integration,pebblegozstd -timeout 40m), so a later
# flag wins, e.g.
# `-timeout 5m` or `-race=false`. Arguments that start with ./ or ../ or the
# module path (github.com/adclick/adclick) are package patterns: when there
# is none, ./... is added. go vet runs on the same packages. Write flag
# values that look like paths as -flag=value (-coverprofile=./c.out).
# Everything from -args on goes last, to the test binaries.
# Examples:
#   ./scripts/test.sh -run TestSmoke ./internal/testenv/...
#   ./scripts/test.sh -count=1 -v ./sink/...
#
# Environment:
#   ADCLICK_TEST_KEEP=1        keep the temporary folder (logs, S3 data)
#   ADCLICK_TEST_NO_VET=1      skip go vet (it runs beside go test)
#   ADCLICK_TEST_BINARY=PATH   a prebuilt adclick for the tests that run
#                              it (default: built once by this script)
#   ADCLICK_TEST_NO_BENCH=1    skip the short stage benchmarks after a full run
#   ADCLICK_TEST_READY_SECS=N  readiness timeout per server (default 60)
#   ADCLICK_TEST_COMPILE_GOGC=N  GOGC of the steps that only compile
#                              (default 400; go test's binaries keep yours)
#
# Needs: Go, Node.js >= 20 with npm. redis-server, promtool (Debian's
# prometheus package) and chromium are installed with apt-get when missing;
# the npm servers are installed with `npm ci` from
# scripts/servers/package-lock.json, DuckDB from
# scripts/duckdb/package-lock.json and the CloudFormation validator from
# deploy/cfn-validate/package-lock.json, when node_modules is out of date.
# shellcheck disable=SC2317 # functions run from traps look unreachable
set -euo pipefail

readonly MODULE=github.com/adclick/adclick
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly SERVERS_DIR="$ROOT/scripts/servers"
readonly READY_SECS="${ADCLICK_TEST_READY_SECS:-60}"

step() { printf '\n==> [%3ds] %s\n' "$SECONDS" "$*"; }
info() { printf '    %s\n' "$*"; }
die() {
	printf 'test.sh: error: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------
SERVERS_ONLY=0
GO_ARGS=()
PKGS=()
TEST_BINARY_ARGS=() # -args and what follows it: for the test binaries
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
	arg=${args[$i]}
	case "$arg" in
	--servers-only) SERVERS_ONLY=1 ;;
	-h | --help)
		awk 'NR > 1 && /^# shellcheck/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
		exit 0
		;;
	-args | --args)
		TEST_BINARY_ARGS=("${args[@]:i}")
		break
		;;
	./* | ../* | . | .. | "$MODULE" | "$MODULE"/*)
		GO_ARGS+=("$arg")
		PKGS+=("$arg")
		;;
	*) GO_ARGS+=("$arg") ;;
	esac
done
FULL_RUN=0
[ "$#" -eq 0 ] && FULL_RUN=1
if [ "${#PKGS[@]}" -eq 0 ]; then
	PKGS=(./...)
	GO_ARGS+=(./...)
fi
GO_ARGS+=(${TEST_BINARY_ARGS[@]+"${TEST_BINARY_ARGS[@]}"})
if [ "$SERVERS_ONLY" -eq 1 ] && [ "$#" -gt 1 ]; then
	die "--servers-only takes no other arguments"
fi

cd "$ROOT"

# ---------------------------------------------------------------------------
# Cleanup: stop every server we started, by process group, in an EXIT trap.
# ---------------------------------------------------------------------------
TMP=""
PIDS=()   # server PIDs; each is the leader of its own process group
NAMES=()
WAITER="" # the sleep of --servers-only
VET_PID="" # the background go vet
SERVING=0 # 1 while --servers-only waits for Ctrl-C
KEEP_TMP="${ADCLICK_TEST_KEEP:-0}"

group_alive() { kill -0 -- "-$1" 2>/dev/null; }

stop_servers() {
	local i pid n
	if [ -n "$WAITER" ]; then kill "$WAITER" 2>/dev/null || true; fi
	[ "${#PIDS[@]}" -eq 0 ] && return 0
	for pid in "${PIDS[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null || true
	done
	# Grace period: up to 5 s for all groups to go away.
	for ((n = 0; n < 50; n++)); do
		local any=0
		for pid in "${PIDS[@]}"; do
			if group_alive "$pid"; then any=1; fi
		done
		[ "$any" -eq 0 ] && break
		sleep 0.1
	done
	for i in "${!PIDS[@]}"; do
		pid="${PIDS[$i]}"
		if group_alive "$pid"; then
			printf 'test.sh: %s (pid %s) did not stop on SIGTERM; sending SIGKILL\n' "${NAMES[$i]}" "$pid" >&2
			kill -KILL -- "-$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
	NAMES=()
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM HUP
	set +e
	if [ -n "$VET_PID" ]; then
		kill "$VET_PID" 2>/dev/null
		wait "$VET_PID" 2>/dev/null
	fi
	stop_servers
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ "$rc" -ne 0 ] || [ "$KEEP_TMP" = 1 ]; then
			printf '\ntest.sh: server logs kept in %s\n' "$TMP" >&2
		else
			rm -rf "$TMP"
		fi
	fi
	exit "$rc"
}
trap on_exit EXIT
# Ctrl-C is the normal end of --servers-only, once the servers are serving.
trap 'if [ "$SERVING" -eq 1 ]; then exit 0; fi; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ---------------------------------------------------------------------------
# Tools and installation
# ---------------------------------------------------------------------------
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root to run: $* (install it yourself, or install sudo)"
	fi
}

step "checking tools"
command -v go >/dev/null 2>&1 || die "go is not on PATH"
command -v node >/dev/null 2>&1 || die "node (Node.js >= 20) is not on PATH"
command -v npm >/dev/null 2>&1 || die "npm is not on PATH"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 20 ] || die "Node.js >= 20 is needed (dynalite 4), found $(node --version)"
info "$(go version)"
info "node $(node --version), npm $(npm --version)"

if ! command -v redis-server >/dev/null 2>&1; then
	step "installing redis-server (apt-get)"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server
	command -v redis-server >/dev/null 2>&1 || die "redis-server is still not on PATH after apt-get install"
fi

# promtool (from Debian's prometheus package) checks the alert rules;
# headless chromium renders the status page in the api package's
# integration test.
apt_missing=()
command -v promtool >/dev/null 2>&1 || apt_missing+=(prometheus)
[ -x /usr/bin/chromium ] || apt_missing+=(chromium)
if [ "${#apt_missing[@]}" -gt 0 ]; then
	step "installing ${apt_missing[*]} (apt-get)"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${apt_missing[@]}"
	command -v promtool >/dev/null 2>&1 || die "promtool is still not on PATH after apt-get install prometheus"
	[ -x /usr/bin/chromium ] || die "/usr/bin/chromium is still missing after apt-get install chromium"
fi

# npm ci wipes and reinstalls node_modules; skip it when the stamp written by
# the last successful install matches the lock file and the Node version.
stamp_file="$SERVERS_DIR/node_modules/.adclick-install-stamp"
want_stamp="$(cat "$SERVERS_DIR/package-lock.json" "$SERVERS_DIR/package.json" | sha256sum | cut -d' ' -f1) node-$(node --version)"
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$want_stamp" ]; then
	step "npm servers are up to date (scripts/servers/node_modules)"
else
	step "installing npm servers (npm ci in scripts/servers)"
	t0=$SECONDS
	# --ignore-scripts: the only install scripts are node-gyp-build checks of
	# leveldown/classic-level, whose prebuilt N-API binaries ship in the
	# packages; no compiler is needed. The load check below proves it.
	(cd "$SERVERS_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
	(cd "$SERVERS_DIR" && node -e "require('leveldown'); require('classic-level')") ||
		die "the native modules of leveldown/classic-level do not load on this platform"
	printf '%s\n' "$want_stamp" >"$stamp_file"
	info "installed in $((SECONDS - t0))s"
fi

# DuckDB reads the lake's Parquet objects in the recount package's
# integration test, as a reader independent of parquet-go. It comes from the
# npm registry (@duckdb/node-api); its native binding is a per-platform
# package of the same registry, so nothing is downloaded from elsewhere and
# no install script runs.
readonly DUCKDB_DIR="$ROOT/scripts/duckdb"
duck_stamp_file="$DUCKDB_DIR/node_modules/.adclick-install-stamp"
want_duck_stamp="$(cat "$DUCKDB_DIR/package-lock.json" "$DUCKDB_DIR/package.json" | sha256sum | cut -d' ' -f1) node-$(node --version)"
if [ -f "$duck_stamp_file" ] && [ "$(cat "$duck_stamp_file")" = "$want_duck_stamp" ]; then
	step "DuckDB is up to date (scripts/duckdb/node_modules)"
else
	step "installing DuckDB (npm ci in scripts/duckdb)"
	t0=$SECONDS
	(cd "$DUCKDB_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
	(cd "$DUCKDB_DIR" && node -e "require('@duckdb/node-api')") ||
		die "DuckDB's native binding does not load on this platform"
	printf '%s\n' "$want_duck_stamp" >"$duck_stamp_file"
	info "installed in $((SECONDS - t0))s"
fi

# The CloudFormation template is checked against the AWS resource
# specification of @aws-cdk/aws-service-spec (npm registry; cfn-lint is not
# installable from the registries the test command reaches) by
# deploy/cfn-validate/validate.js.
readonly CFN_DIR="$ROOT/deploy/cfn-validate"
cfn_stamp_file="$CFN_DIR/node_modules/.adclick-install-stamp"
want_cfn_stamp="$(cat "$CFN_DIR/package-lock.json" "$CFN_DIR/package.json" | sha256sum | cut -d' ' -f1) node-$(node --version)"
if [ -f "$cfn_stamp_file" ] && [ "$(cat "$cfn_stamp_file")" = "$want_cfn_stamp" ]; then
	step "CloudFormation validator is up to date (deploy/cfn-validate/node_modules)"
else
	step "installing the CloudFormation validator (npm ci in deploy/cfn-validate)"
	t0=$SECONDS
	(cd "$CFN_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
		die "npm ci in deploy/cfn-validate failed: the template cannot be validated"
	(cd "$CFN_DIR" && node -e "require('@aws-cdk/aws-service-spec').loadAwsServiceSpecSync(); require('yaml')") ||
		die "the AWS resource specification (@aws-cdk/aws-service-spec) does not load"
	printf '%s\n' "$want_cfn_stamp" >"$cfn_stamp_file"
	info "installed in $((SECONDS - t0))s"
fi

# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------
TMP="$(mktemp -d "${TMPDIR:-/tmp}/adclick-test.XXXXXX")"
mkdir -p "$TMP/s3" "$TMP/redis"
readonly NM="$SERVERS_DIR/node_modules"
readonly SERVER_NAMES=(kinesalite dynalite s3rver redis)
declare -A KIND=([kinesalite]=kinesis [dynalite]=dynamodb [s3rver]=s3 [redis]=redis)
declare -A SPID=() SPORT=() WPID=()

# server_cmd NAME PORT: sets CMD to the command line that starts NAME.
server_cmd() {
	case "$1" in
	kinesalite) CMD=(node "$SERVERS_DIR/kinesalite.js" "$2") ;;
	dynalite) CMD=(node "$SERVERS_DIR/dynalite.js" "$2") ;;
	s3rver) CMD=(node "$SERVERS_DIR/s3rver.js" "$TMP/s3" "$2") ;;
	redis) CMD=(redis-server --bind 127.0.0.1 --port "$2" --save '' --appendonly no
		--dir "$TMP/redis") ;;
	esac
}

# start_server NAME PORT: starts NAME in its own session and process group
# (so that stopping the group also stops any child it has), output in
# $TMP/NAME.log.
start_server() {
	local name=$1 port=$2
	server_cmd "$name" "$port"
	setsid "${CMD[@]}" >"$TMP/$name.log" 2>&1 </dev/null &
	SPID[$name]=$!
	SPORT[$name]=$port
	PIDS+=("$!")
	NAMES+=("$name")
}

# wait_ready NAME: waits until NAME answers a real request of its protocol,
# or fails when it exits or READY_SECS pass.
wait_ready() {
	local name=$1
	node "$SERVERS_DIR/wait-ready.js" "${KIND[$name]}" "${SPORT[$name]}" "${SPID[$name]}" "$READY_SECS" \
		2>"$TMP/$name.ready"
}

# discard_server NAME ATTEMPT: reports why NAME did not start, stops it and
# forgets it.
discard_server() {
	local name=$1 attempt=$2 pid=${SPID[$1]} i
	printf 'test.sh: %s did not start on port %s (attempt %d):\n' "$name" "${SPORT[$name]}" "$attempt" >&2
	sed 's/^/    | /' "$TMP/$name.ready" >&2 || true
	echo "    | last lines of $name.log:" >&2
	tail -n 20 "$TMP/$name.log" | sed 's/^/    | /' >&2 || true
	kill -TERM -- "-$pid" 2>/dev/null || true
	sleep 0.2
	kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for i in "${!PIDS[@]}"; do
		if [ "${PIDS[$i]}" = "$pid" ]; then unset 'PIDS[i]' 'NAMES[i]'; fi
	done
	PIDS=("${PIDS[@]}")
	NAMES=("${NAMES[@]}")
	mv "$TMP/$name.log" "$TMP/$name.log.$attempt" 2>/dev/null || true
}

pkg_version() { node -p "require('$NM/$1/package.json').version"; }

step "starting servers on 127.0.0.1 (logs in $TMP)"
t0=$SECONDS
# Ports the kernel reports free, all different. Another process could take
# one before the server binds it, so a server that fails gets two more tries
# on fresh ports.
mapfile -t ports < <(node "$SERVERS_DIR/free-ports.js" "${#SERVER_NAMES[@]}")
[ "${#ports[@]}" -eq "${#SERVER_NAMES[@]}" ] || die "could not find free ports"
for i in "${!SERVER_NAMES[@]}"; do
	start_server "${SERVER_NAMES[$i]}" "${ports[$i]}"
done
for name in "${SERVER_NAMES[@]}"; do
	wait_ready "$name" &
	WPID[$name]=$!
done
failed=()
for name in "${SERVER_NAMES[@]}"; do
	wait "${WPID[$name]}" || failed+=("$name")
done
for name in ${failed[@]+"${failed[@]}"}; do
	ok=0
	for attempt in 1 2 3; do
		if [ "$attempt" -gt 1 ]; then
			start_server "$name" "$(node "$SERVERS_DIR/free-ports.js" 1)"
			if wait_ready "$name"; then
				ok=1
				break
			fi
		fi
		discard_server "$name" "$attempt"
	done
	[ "$ok" -eq 1 ] || die "$name could not be started; logs in $TMP"
done
KINESIS_PORT=${SPORT[kinesalite]}
DYNAMODB_PORT=${SPORT[dynalite]}
S3_PORT=${SPORT[s3rver]}
REDIS_PORT=${SPORT[redis]}
info "kinesalite $(pkg_version kinesalite)   http://127.0.0.1:$KINESIS_PORT"
info "dynalite $(pkg_version dynalite)     http://127.0.0.1:$DYNAMODB_PORT"
info "s3rver $(pkg_version s3rver)       http://127.0.0.1:$S3_PORT"
info "$(redis-server --version | cut -d' ' -f1-3)  127.0.0.1:$REDIS_PORT"
info "all ready in $((SECONDS - t0))s"

# The SDK reads these; nothing from the developer's own AWS setup may leak in.
unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL \
	AWS_IGNORE_CONFIGURED_ENDPOINT_URLS AWS_ROLE_ARN AWS_WEB_IDENTITY_TOKEN_FILE \
	AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
: >"$TMP/aws-config"
: >"$TMP/aws-credentials"
export AWS_CONFIG_FILE="$TMP/aws-config"
export AWS_SHARED_CREDENTIALS_FILE="$TMP/aws-credentials"
export AWS_ENDPOINT_URL_KINESIS="http://127.0.0.1:$KINESIS_PORT"
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$DYNAMODB_PORT"
export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$S3_PORT"
export ADCLICK_TEST_VALKEY="127.0.0.1:$REDIS_PORT"
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=S3RVER # s3rver accepts only this pair; the others accept any
export AWS_SECRET_ACCESS_KEY=S3RVER
export AWS_EC2_METADATA_DISABLED=true

if [ "$SERVERS_ONLY" -eq 1 ]; then
	step "servers are running; in another shell:"
	for v in AWS_ENDPOINT_URL_KINESIS AWS_ENDPOINT_URL_DYNAMODB AWS_ENDPOINT_URL_S3 \
		ADCLICK_TEST_VALKEY AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY \
		AWS_EC2_METADATA_DISABLED AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE; do
		printf 'export %s=%q\n' "$v" "${!v}"
	done
	printf '\nthen: go test -race -tags integration,pebblegozstd ./...\n'
	printf 'Press Ctrl-C to stop the servers.\n'
	SERVING=1
	while :; do
		sleep 5 &
		WAITER=$!
		wait "$WAITER" || true
		WAITER=""
		for i in "${!PIDS[@]}"; do
			group_alive "${PIDS[$i]}" || die "${NAMES[$i]} exited; log: $TMP/${NAMES[$i]}.log"
		done
	done
fi

# ---------------------------------------------------------------------------
# Vet and test
# ---------------------------------------------------------------------------
step "promtool check rules deploy/prometheus/*.yml"
promtool check rules "$ROOT"/deploy/prometheus/*.yml

step "CloudFormation template against the AWS resource specification"
node "$CFN_DIR/selftest.js" || die "the CloudFormation validator's self-test failed"
node "$CFN_DIR/validate.js" "$ROOT/deploy/cloudformation/adclick.yaml" ||
	die "deploy/cloudformation/adclick.yaml does not match the AWS resource specification"

# The packages that run the adclick binary (cmd/adclick, deploy, runbooks)
# share one build of it, named by ADCLICK_TEST_BINARY; run alone with go
# test, each builds its own. It is built as the Dockerfile builds it
# (CGO_ENABLED=0 -trimpath; no package of this module uses cgo), so the
# tests run the binary the image ships, and its compile of every package is
# the one deploy's TestDockerBuildCommand and go vet reuse from the build
# cache: with -trimpath the cache does not key on the source directory, so
# the test's copy of the build context hits it too.
#
# The steps that only compile (this build, go vet, the race build below)
# run with GOGC=400: the compiler collects garbage less often, for about 8 %
# less CPU, and a 2-core machine has the memory. go test itself does not
# get it: its test binaries run with the GOGC of the caller.
BUILD_ENV=(env CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false")
COMPILE_GOGC=(env GOGC="${ADCLICK_TEST_COMPILE_GOGC:-400}")
needs_bin=0
for p in "${PKGS[@]}"; do
	case "$p" in
	./... | . | "$MODULE" | "$MODULE"/... | *cmd/adclick* | *deploy* | *runbooks* | ./cmd/... | ./cmd) needs_bin=1 ;;
	esac
done
if [ "$needs_bin" -eq 1 ] && [ -z "${ADCLICK_TEST_BINARY:-}" ]; then
	step "go build ./cmd/adclick (one binary for the tests that run it)"
	t0=$SECONDS
	mkdir -p "$TMP/bin"
	"${COMPILE_GOGC[@]}" "${BUILD_ENV[@]}" go build -trimpath -o "$TMP/bin/adclick" ./cmd/adclick
	export ADCLICK_TEST_BINARY="$TMP/bin/adclick"
	info "built in $((SECONDS - t0))s"
fi

# go vet runs beside go test (the test binaries build and wait on servers
# meanwhile); its output is shown after the tests, and a finding fails the
# run as before.
VET_PID=""
if [ "${ADCLICK_TEST_NO_VET:-0}" != 1 ]; then
	step "go vet -tags integration ${PKGS[*]} (in the background, output in $TMP/vet.log)"
	"${COMPILE_GOGC[@]}" "${BUILD_ENV[@]}" go vet -trimpath -tags integration "${PKGS[@]}" >"$TMP/vet.log" 2>&1 &
	VET_PID=$!
fi

# -tags pebblegozstd: Pebble compresses with its pure-Go zstd, as in the
# image (CGO_ENABLED=0), instead of compiling the C zstd that -race (which
# needs cgo) would otherwise pull in. -p stays at its default (GOMAXPROCS):
# with -p 4 four packages at once queue their requests on the one
# single-threaded dynalite, and lease calls, whose deadline is a quarter of
# the lease, time out.
#
# The test binaries are built without debug information (-dwarf=false,
# -ldflags=-w: stack traces and the race detector's reports do not need
# it), which takes about 14 % off the race compile and 45 % off each of the
# 45 links; -vet=off because the full go vet above runs every check go
# test's own vet pass would. A failing test is debugged with its own
# `go test` (or -gcflags= -ldflags= after these flags).
TEST_FLAGS=(-race -tags integration,pebblegozstd -timeout 40m -vet=off -gcflags=all=-dwarf=false -ldflags=-w)
# Every package (and dependency) the tests link is compiled first with
# COMPILE_GOGC, the same action go test would run (same flags, so go test
# finds it in the build cache); then go test compiles only the test
# packages and links.
step "go build -race ${PKGS[*]} (the packages the test binaries link)"
t0=$SECONDS
"${COMPILE_GOGC[@]}" go build -race -tags integration,pebblegozstd -gcflags=all=-dwarf=false "${PKGS[@]}"
info "built in $((SECONDS - t0))s"
step "go test ${TEST_FLAGS[*]} ${GO_ARGS[*]}"
t0=$SECONDS
rc=0
go test "${TEST_FLAGS[@]}" "${GO_ARGS[@]}" || rc=$?
step "go test exited with $rc after $((SECONDS - t0))s"

if [ -n "$VET_PID" ]; then
	vet_rc=0
	wait "$VET_PID" || vet_rc=$?
	VET_PID=""
	# stderr: with -json, stdout stays go test's stream alone.
	cat "$TMP/vet.log" >&2
	if [ "$vet_rc" -ne 0 ]; then
		printf 'test.sh: go vet -tags integration %s failed (exit %d)\n' "${PKGS[*]}" "$vet_rc" >&2
		[ "$rc" -eq 0 ] && rc=$vet_rc
	else
		info "go vet passed"
	fi
fi

# A short run of each stage's benchmarks (no -race), so a regression shows
# in the log; BENCHMARKS.md has the full measurement and its command.
if [ "$rc" -eq 0 ] && [ "$FULL_RUN" -eq 1 ] && [ "${ADCLICK_TEST_NO_BENCH:-0}" != 1 ]; then
	step "stage benchmarks (short)"
	# Built as the binary is (CGO_ENABLED=0 -trimpath), so they reuse its
	# compile of Pebble and the rest instead of a third one. The filter
	# budget benchmark is left out: it fills 2 M ids before each of its
	# three cases (a minute, whatever -benchtime), and the budget is
	# tested by TestDedupBudgetBoundsFilterMemory.
	"${BUILD_ENV[@]}" go test -trimpath -run '^$' -bench . -skip '^BenchmarkDedupBudget$' -benchtime 20000x -benchmem \
		./ingest/ ./preagg/ ./windowing/ ./latepath/ ./state/ 2>&1 | grep -E '^(Benchmark|ok|FAIL|PASS)' || rc=$?
fi
exit "$rc"
