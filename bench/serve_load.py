"""Serving load: 64 concurrent clients x 4 chat requests against one-at-a-time.

    python bench/serve_load.py [--clients=64] [--requests=4] [--max_tokens=64] [--serial=16]
        [--engine=continuous|static]

Exports random `tiny`-preset params as a stage, starts
`python -m nemocascade.serve` on a free 127.0.0.1 port in a subprocess (the
clients do not share the model's interpreter), warms it up with unmeasured
passes of both loads (`--warmup` concurrent ones) (the sampler compiles once per batch and
prompt-length bucket, ~3 s each on CPU), then measures (1) `--serial`
requests sent one at a time and (2) `--clients` clients each sending
`--requests` requests back to back. Prompts are task-world prompts in
thinking mode (the default), sampled at the server's defaults, `max_tokens`
each. Reports p50/p99 request latency and generated tokens/s (completion
tokens from `usage` over wall time) of both, their ratio, and ends with one
JSON line. A bucket first met in the measured pass compiles there (it shows
as a p99 outlier). `joined` counts requests that joined a running sampler
call's free slots (the continuous engine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import flax.linen as nn
import httpx
import jax
import numpy as np

from nemocascade import checkpointing
from nemocascade.evaluation import matrix
from nemocascade.model import presets, transformer


def _random_params(cfg: presets.ModelConfig, seed: int = 0):
    """N(0, 0.02) weights, unit norm scales, drawn on the host (no init compile)."""
    shapes = nn.meta.unbox(
        jax.eval_shape(lambda r: transformer.init_params(cfg, r), jax.random.key(0))
    )
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        if "scale" in jax.tree_util.keystr(path):
            return np.ones(leaf.shape, leaf.dtype)
        return rng.normal(0.0, 0.02, leaf.shape).astype(leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(stage_dir, port, max_batch, wait_ms, max_tokens, engine, chunk_steps):
    cmd = [
        sys.executable, "-m", "nemocascade.serve", f"--workdir={stage_dir}", f"--port={port}",
        f"--max_batch={max_batch}", "--max_queue=1024", f"--batch_wait_ms={wait_ms}",
        "--warmup_prompt_tokens=64", f"--max_tokens={max_tokens}", f"--engine={engine}",
        f"--chunk_steps={chunk_steps}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    deadline = time.monotonic() + 300  # the warm-up compiles first
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not start within 300 s")


async def _one(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> tuple[float, int]:
    body = {"model": "sft", "messages": [{"role": "user", "content": prompt}]}
    t0 = time.perf_counter()
    r = await client.post("/v1/chat/completions", json={**body, "max_tokens": max_tokens})
    r.raise_for_status()
    return time.perf_counter() - t0, r.json()["usage"]["completion_tokens"]


async def _load(url, prompts, clients: int, requests: int, max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def worker(c: int):
            return [
                await _one(client, prompts[(c * requests + k) % len(prompts)], max_tokens)
                for k in range(requests)
            ]

        t0 = time.perf_counter()
        per_client = await asyncio.gather(*(worker(c) for c in range(clients)))
        wall = time.perf_counter() - t0
    done = [x for rows in per_client for x in rows]
    latency = np.asarray([d for d, _ in done])
    tokens = sum(n for _, n in done)
    return {
        "requests": len(done),
        "wall_s": round(wall, 2),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "p50_s": round(float(np.percentile(latency, 50)), 3),
        "p99_s": round(float(np.percentile(latency, 99)), 3),
    }


def _measured(url, prompts, clients: int, requests: int, max_tokens: int) -> dict:
    """`_load` plus the engine's sampler calls, rows per call and busy time during it."""
    before = httpx.get(f"{url}/health").json()["engine"]
    out = asyncio.run(_load(url, prompts, clients, requests, max_tokens))
    after = httpx.get(f"{url}/health").json()["engine"]
    calls = after["calls"] - before["calls"]
    out["calls"] = calls
    out["rows_per_call"] = round((after["rows"] - before["rows"]) / max(calls, 1), 1)
    out["sampler_busy_s"] = round(after["busy_s"] - before["busy_s"], 2)
    out["joined"] = after.get("joined", 0) - before.get("joined", 0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=4, help="Per client, back to back.")
    p.add_argument("--serial", type=int, default=16, help="Requests of the one-at-a-time run.")
    p.add_argument("--max_tokens", type=int, default=64)
    p.add_argument("--warmup", type=int, default=1, help="Unmeasured concurrent passes.")
    p.add_argument("--batch_wait_ms", type=float, default=20.0, help="The server's flag.")
    p.add_argument("--engine", default="continuous", help="The server's flag.")
    p.add_argument("--chunk_steps", type=int, default=8, help="The server's flag.")
    args = p.parse_args()

    prompts = [
        ex.prompt for d in ("math", "if", "chat") for ex in matrix.examples_for(d, "eval", 32)
    ]
    with tempfile.TemporaryDirectory() as root:
        stage_dir = os.path.join(root, "sft")
        checkpointing.export_params(stage_dir, _random_params(presets.get_preset("tiny")))
        port = _port()
        server = _start(
            stage_dir,
            port,
            args.clients,
            args.batch_wait_ms,
            args.max_tokens,
            args.engine,
            args.chunk_steps,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.perf_counter()
            # The same loads, unmeasured: compiles the (batch, prompt) buckets they meet.
            for _ in range(args.warmup):
                asyncio.run(_load(url, prompts, args.clients, args.requests, args.max_tokens))
            asyncio.run(_load(url, prompts, 1, args.serial, args.max_tokens))
            warmup = time.perf_counter() - t0
            serial = _measured(url, prompts, 1, args.serial, args.max_tokens)
            loaded = _measured(url, prompts, args.clients, args.requests, args.max_tokens)
        finally:
            server.terminate()
            server.wait(30)
    speedup = loaded["tokens_per_s"] / serial["tokens_per_s"]
    print(f"warm-up (compiles) {warmup:.1f} s")
    head = (
        "requests",
        "wall_s",
        "tokens_per_s",
        "p50_s",
        "p99_s",
        "calls",
        "rows_per_call",
        "joined",
    )
    print(f"{'run':<16}" + "".join(f"{h:>14}" for h in head + ("busy_s",)))
    for name, r in (("one at a time", serial), (f"{args.clients} concurrent", loaded)):
        print(f"{name:<16}" + "".join(f"{r[h]:>14}" for h in head + ("sampler_busy_s",)))
    print(f"throughput {speedup:.1f}x")
    load1 = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "bench": "serve_load",
                "preset": "tiny",
                "clients": args.clients,
                "requests_per_client": args.requests,
                "max_tokens": args.max_tokens,
                "engine": args.engine,
                "chunk_steps": args.chunk_steps,
                "serial": serial,
                "concurrent": loaded,
                "speedup": round(speedup, 2),
                "loadavg_1m": round(load1, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
