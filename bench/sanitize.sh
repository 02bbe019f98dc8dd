#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck over bench/sanitize_cases.py, on a GPU.
# SANITIZE_TOOLS picks the tools (initcheck too: kernel reads of never-written device memory.
# It runs without host-API checks, so host copies of partly written buffers, e.g. attention's
# partial for idle splits, are not flagged; with them a run over every case outlasted its 420 s
# limit (GDN eleventh round). Without them every attention variant took 172 s and every GDN
# variant 49 s on an H100, bench/RESULTS.md "Validation, session 45").
# Usage: bash bench/sanitize.sh OUTDIR [sanitize_cases.py options, e.g. --family gdn]
#        (logs: OUTDIR/sanitize_<tool>.log; summary on stdout)
set -u
out=${1:-${OUT:-sanitize_out}}
shift || true
mkdir -p "$out"
cd "$(dirname "$0")/.."
status=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
  extra=""
  [ "$tool" = memcheck ] && extra="--large"
  api=""
  [ "$tool" = initcheck ] && api="--check-api-memory-access no"
  compute-sanitizer --tool "$tool" $api --error-exitcode 9 --print-limit 20 \
      python3 bench/sanitize_cases.py $extra "$@" > "$out/sanitize_$tool.log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$out/sanitize_$tool.log" | tail -2 | tr '\n' ' ')
  echo "$tool: exit $rc; $summary"
  [ $rc -eq 0 ] || status=1
done
exit $status
