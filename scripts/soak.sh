#!/usr/bin/env bash
# Soak benchmark (not a test): runs `adclick run` on the built-in generator
# at the machine's full rate for a while and samples the process's resident
# memory, to show whether it stays flat once the dedup horizon is full.
#
# Usage:
#   ./scripts/soak.sh [--minutes N] [--horizon-ms H] [--sample-s S] [-- RUN_FLAGS...]
#
#   --minutes N      wall time to run (default 10)
#   --horizon-ms H   acceptance horizon (default 7200000, the job's; a
#                    shorter one fills the dedup state sooner: say so when
#                    you quote the result)
#   --sample-s S     seconds between samples (default 30)
#   RUN_FLAGS        more flags for `adclick run`
#
# It prints one table line per sample: elapsed seconds, RSS in MB, clicks
# read so far and the rate since the previous sample. The generator's rate
# is set far above what the pipeline can take, so the pipeline runs flat
# out (its arrival times fall behind the wall clock).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
minutes=10
horizon=7200000
sample=30
extra=()
while [ "$#" -gt 0 ]; do
	case "$1" in
	--minutes) minutes=$2; shift 2 ;;
	--horizon-ms) horizon=$2; shift 2 ;;
	--sample-s) sample=$2; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	-h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
(cd "$ROOT" && go build -o "$work/adclick" ./cmd/adclick)
port=$(( 20000 + RANDOM % 20000 ))
"$work/adclick" run --source gen --data "$work/data" --listen "127.0.0.1:$port" --progress 0 --log-level warn \
	--gen-rate 5000000 --gen-ads 100000 --gen-shards 16 --gen-dup-fraction 0.01 --horizon-ms "$horizon" \
	"${extra[@]}" 2>"$work/stderr" &
pid=$!
printf '%8s %10s %14s %12s\n' elapsed_s rss_mb clicks clicks_per_s
start=$(date +%s)
last=0
lastt=$start
end=$(( start + minutes * 60 ))
while [ "$(date +%s)" -lt "$end" ]; do
	sleep "$sample"
	kill -0 "$pid" 2>/dev/null || { echo "soak.sh: adclick ended early:" >&2; cat "$work/stderr" >&2; exit 1; }
	now=$(date +%s)
	rss=$(awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
	recs=$(curl -fsS "http://127.0.0.1:$port/v1/status" | sed -n 's/^ *"records": *\([0-9]*\).*/\1/p')
	recs=${recs:-0}
	printf '%8d %10d %14d %12d\n' $(( now - start )) "$rss" "$recs" $(( (recs - last) / (now - lastt) ))
	last=$recs
	lastt=$now
done
