"""Side by side with the peers: one GRPO step and greedy decoding in nemocascade, TRL and Tunix.

    python bench/peers.py [--peers_python=/tmp/peers_venv/bin/python] [--workdir=/tmp/peers]
    python bench/peers.py --tiny          # 1-layer model, one step each: seconds, for tests

The peers live in their own environment (`pip install -e '.[peers]'` into a
virtualenv: TRL pins another transformers); `--peers_python` names its
interpreter (default: this one). A peer that does not import is skipped with a
message. Each framework runs in its own subprocess (its own threads and
memory; the peers' imports stay out of this process), in the order
nemocascade, TRL, Tunix, after `peers_run_nemocascade.py prepare` has drawn
the one model (Qwen3 shape, 4 layers, d=256, the built-in 1,024-token
vocabulary) and exported it with `convert --to_hf`.

Measured, on the same weights (max abs float32 logit difference on a fixed
batch, checked against `--logit_tol`) and the same prompt ids:

* GRPO: `--steps` steps of 16 task-world math prompts x 8 samples, 128 new
  tokens, temperature 1.0, the project's math verifier as the reward, no
  KL, one AdamW step per batch; medians of steps >= `--timed_from`:
  step, generation, reward and train seconds, generated tokens/s.
* Decoding: greedy, no stop token, 256 new tokens at batch 16 and 64; best
  of `--repeats` timed calls after a warm-up; tokens/s and the rows whose
  greedy tokens equal the project's.

Prints a table and ends with one JSON line (ratios > 1 mean nemocascade is
faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import peers_common

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS = {"trl": ("trl", "peers_run_trl.py"), "tunix": ("tunix", "peers_run_tunix.py")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="/tmp/nemocascade_peers")
    p.add_argument("--peers_python", default=os.environ.get("PEERS_PYTHON", sys.executable))
    p.add_argument("--frameworks", default="nemocascade,trl,tunix")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--timed_from", type=int, default=3)
    p.add_argument("--prompts_per_step", type=int, default=16)
    p.add_argument("--group_size", type=int, default=8)
    p.add_argument("--grpo_new_tokens", type=int, default=128)
    p.add_argument("--decode_batches", default="16,64")
    p.add_argument("--decode_new_tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    p.add_argument("--logit_tol", type=float, default=1e-4)
    p.add_argument("--tiny", action="store_true", help="1-layer d=64 model, one step, 8 tokens")
    return p.parse_args(argv)


def make_spec(args) -> peers_common.Spec:
    tiny = args.tiny
    return peers_common.Spec(
        workdir=args.workdir,
        src_dir=os.path.join(args.workdir, "src"),
        hf_dir=os.path.join(args.workdir, "hf"),
        model=peers_common.TINY_MODEL_FIELDS if tiny else peers_common.MODEL_FIELDS,
        prompts_per_step=2 if tiny else args.prompts_per_step,
        group_size=2 if tiny else args.group_size,
        grpo_steps=1 if tiny else args.steps,
        timed_from=1 if tiny else args.timed_from,
        grpo_new_tokens=8 if tiny else args.grpo_new_tokens,
        temperature=1.0,
        lr=1e-6,
        decode_batches=(2,) if tiny else tuple(int(b) for b in args.decode_batches.split(",")),
        decode_new_tokens=8 if tiny else args.decode_new_tokens,
        decode_repeats=1 if tiny else args.repeats,
        threads=args.threads,
    )


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, HERE, env.get("PYTHONPATH")) if p)
    return env


def missing_peer(python: str, module: str) -> str | None:
    """None when `python` imports `module`, else why not (the skip message)."""
    probe = subprocess.run(
        [python, "-c", f"import {module}"], capture_output=True, text=True, env=_env()
    )
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return (
        f"{module} does not import with {python} ({last}); "
        "install the peers: pip install -e '.[peers]' (a separate virtualenv)"
    )


def _run(python: str, script: str, *args: str) -> None:
    subprocess.run([python, os.path.join(HERE, script), *args], check=True, cwd=REPO, env=_env())


def _load(spec, name: str) -> dict | None:
    path = spec.out(name, "result.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def compare(spec, results: dict) -> dict:
    """Same-weights and greedy-agreement figures of each peer against nemocascade."""
    out = {}
    ref_logits = np.load(spec.out("nemocascade", "logits.npy"))
    for name in results:
        if name == "nemocascade":
            continue
        logits = np.load(spec.out(name, "logits.npy"))
        agree = {}
        for b in spec.decode_batches:
            ours = np.load(spec.out("nemocascade", f"greedy_{b}.npy"))
            theirs = np.load(spec.out(name, f"greedy_{b}.npy"))
            agree[str(b)] = int((ours == theirs).all(-1).sum())
        out[name] = {
            "max_abs_logit_diff": float(np.abs(logits - ref_logits).max()),
            "greedy_identical_rows": agree,
        }
    return out


def ratios(results: dict, spec) -> dict:
    """nemocascade speed / peer speed for every figure both sides have."""
    ours, out = results["nemocascade"], {}
    for name, peer in results.items():
        if name == "nemocascade":
            continue
        tag = "transformers" if name == "trl" else name
        for b in spec.decode_batches:
            mine, theirs = ours["decode"][str(b)]["tok_s"], peer["decode"][str(b)]["tok_s"]
            out[f"decode_b{b}_vs_{tag}"] = round(mine / theirs, 3)
        out[f"decode_vs_{tag}"] = out[f"decode_b{max(spec.decode_batches)}_vs_{tag}"]
        g, pg = ours.get("grpo"), peer.get("grpo")
        if g and pg:
            out[f"grpo_step_vs_{name}"] = round(pg["step_s"] / g["step_s"], 3)
            for part in ("generation_s", "train_s"):
                if part in g and part in pg:
                    out[f"grpo_{part[:-2]}_vs_{name}"] = round(pg[part] / g[part], 3)
            out[f"grpo_tokens_per_s_vs_{name}"] = round(
                g["step_tokens_per_s"] / pg["step_tokens_per_s"], 3
            )
    return out


def table(results: dict, spec) -> str:
    bs = spec.decode_batches
    head = "| framework | version | GRPO step s | generation s | reward s | train s |"
    head += " gen tok/s (step) | mean len |"
    head += "".join(f" decode b{b} tok/s |" for b in bs)
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in results.items():
        g = r.get("grpo", {})

        def f(key, fmt="{:.2f}", g=g):
            return fmt.format(g[key]) if key in g else "-"

        mean_len = g["tokens"] / (spec.prompts_per_step * spec.group_size) if g else None
        row = f"| {name} | {r['version']} | {f('step_s')} | {f('generation_s')} | "
        row += f"{f('reward_s')} | {f('train_s')} | {f('step_tokens_per_s', '{:,.0f}')} | "
        row += ("-" if mean_len is None else f"{mean_len:.1f}") + " |"
        row += "".join(f" {r['decode'][str(b)]['tok_s']:,.0f} |" for b in bs)
        lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    spec = make_spec(args)
    shutil.rmtree(spec.workdir, ignore_errors=True)
    os.makedirs(spec.workdir)
    spec_path = os.path.join(spec.workdir, "spec.json")
    spec.save(spec_path)
    _run(sys.executable, "peers_run_nemocascade.py", "prepare", spec_path)
    wanted = args.frameworks.split(",")
    skipped = {}
    if "nemocascade" in wanted:
        _run(sys.executable, "peers_run_nemocascade.py", "run", spec_path)
    for name, (module, script) in PEERS.items():
        if name not in wanted:
            continue
        why = missing_peer(args.peers_python, module)
        if why:
            skipped[name] = why
            print(f"skipping {name}: {why}", flush=True)
            continue
        _run(args.peers_python, script, spec_path)
    results = {n: r for n in wanted if (r := _load(spec, n)) is not None}
    summary = {"bench": "peers", "tiny": args.tiny, "skipped": skipped}
    summary["versions"] = {n: r["version"] for n, r in results.items()}
    if "trl" in results:
        summary["versions"].update(
            transformers=results["trl"]["transformers"], torch=results["trl"]["torch"]
        )
        summary["trl_tokenizer_same_ids"] = results["trl"]["tokenizer_same_ids"]
    if "nemocascade" in results:
        checks = compare(spec, results)
        summary["same_weights"] = checks
        summary["same_weights_ok"] = all(
            c["max_abs_logit_diff"] <= args.logit_tol for c in checks.values()
        )
        summary["ratios"] = ratios(results, spec)
        summary["grpo"] = {
            n: {k: v for k, v in r["grpo"].items() if k != "steps"}
            for n, r in results.items()
            if "grpo" in r
        }
        print(table(results, spec))
        for name, c in checks.items():
            print(
                f"{name}: max abs logit diff {c['max_abs_logit_diff']:.2e}, "
                f"greedy identical rows {c['greedy_identical_rows']}"
            )
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
