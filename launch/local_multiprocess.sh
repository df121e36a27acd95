#!/usr/bin/env bash
# N local CPU processes forming one JAX runtime (gloo collectives): tests multi-host code paths.
#
#   launch/local_multiprocess.sh -n 2 [--port=12355] [--dry_run] -- \
#       python -m nemocascade.main --config=configs/sft.py:tiny --workdir=/tmp/nc_mp
set -euo pipefail
N=2 PORT=12355 DRY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) N="$2"; shift ;;
    --port=*) PORT="${1#*=}" ;;
    --dry_run) DRY=1 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (usage: $0 -n N [--port=P] [--dry_run] -- CMD...)" >&2; exit 2 ;;
  esac
  shift
done
[[ $# -gt 0 ]] || { echo "need a command after --" >&2; exit 2; }
pids=()
for ((i = 0; i < N; i++)); do
  args=("$@" --coordinator_address="127.0.0.1:$PORT" --num_processes="$N" --process_id="$i")
  if [[ $DRY -eq 1 ]]; then printf '%q ' "${args[@]}"; echo; continue; fi
  "${args[@]}" > "/tmp/nemocascade_proc$i.log" 2>&1 &
  pids+=($!)
done
[[ $DRY -eq 1 ]] && exit 0
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
echo "logs: /tmp/nemocascade_proc*.log"
exit $status
