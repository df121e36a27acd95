#!/usr/bin/env bash
# The prepared GPU session: Pallas GPU lowering of the fused log-prob kernel,
# its agreement with the chunked XLA path, and side-by-side timings, at three
# sizes, then the forward tile sweep; then flash attention (Pallas GPU, cuDNN
# via dot_product, chunked XLA vs the reference) and the shard_map log-prob
# (bench/attention_gpu_check.py, one JSON line). Writes everything to
# ${OUT:-/tmp}/gpu_check.log.
#
#     OUT=/tmp/out bash bench/gpu_device_check.sh
set -u
out="${OUT:-/tmp}/gpu_check.log"
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  "$py" -c "import jax, jaxlib; print('jax', jax.__version__, jaxlib.__version__, jax.devices())"
  for args in "--n=4096 --d=1024 --v=32768 --dtype=float32" \
              "--n=8192 --d=2048 --v=65536 --dtype=bfloat16" \
              "--n=16384 --d=4096 --v=151936 --dtype=bfloat16"; do
    echo "=== fused_logprob_gpu_check $args"
    timeout 200 "$py" bench/fused_logprob_gpu_check.py $args || echo "exit status $?"
  done
  echo "=== fused_logprob_gpu_tune (forward only)"
  timeout 200 "$py" bench/fused_logprob_gpu_tune.py || echo "exit status $?"
  echo "=== attention_gpu_check (flash attention, sharded log-prob)"
  timeout 240 "$py" bench/attention_gpu_check.py || echo "exit status $?"
} 2>&1 | tee "$out"
