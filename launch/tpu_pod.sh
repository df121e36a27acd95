#!/usr/bin/env bash
# Runs the same nemocascade command on every worker of a TPU VM pod.
#
#   launch/tpu_pod.sh --tpu=NAME --zone=ZONE [--dry_run] -- \
#       python -m nemocascade.main --config=configs/stage3_long.py:8b --workdir=gs://bucket/run
#
# JAX's multi-controller runtime discovers the pod itself: main.py calls
# jax.distributed.initialize() when TPU_WORKER_HOSTNAMES is set (it is on TPU
# VMs), so the command carries no rank or address. No hyperparameters here.
set -euo pipefail
TPU="" ZONE="" PROJECT="" DRY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tpu=*) TPU="${1#*=}" ;;
    --zone=*) ZONE="${1#*=}" ;;
    --project=*) PROJECT="${1#*=}" ;;
    --dry_run) DRY=1 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (usage: $0 --tpu=NAME --zone=ZONE [--project=P] [--dry_run] -- CMD...)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$TPU" && -n "$ZONE" && $# -gt 0 ]] || { echo "need --tpu, --zone and a command after --" >&2; exit 2; }
CMD="cd ~/nemocascade && $(printf '%q ' "$@")"
ARGS=(compute tpus tpu-vm ssh "$TPU" --zone="$ZONE" --worker=all --command="$CMD")
[[ -n "$PROJECT" ]] && ARGS+=(--project="$PROJECT")
if [[ $DRY -eq 1 ]]; then printf 'gcloud'; printf ' %q' "${ARGS[@]}"; echo; exit 0; fi
exec gcloud "${ARGS[@]}"
