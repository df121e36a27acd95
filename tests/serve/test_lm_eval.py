"""lm-eval's `local-chat-completions` model against the server, on task-world prompts.

The task (YAML + JSONL + a scorer calling the project's verifiers) is written
by the test; greedy decoding must give lm-eval the same responses as the
project's own sampler and the same score as `evaluation.matrix.evaluate`.
"""

import json
import sys

import numpy as np
import pytest

from nemocascade import generate
from nemocascade.data import tokenizer as tokenizer_lib
from nemocascade.evaluation import matrix
from nemocascade.rollout import modes, sampling_methods
from tests.serve import helpers

lm_eval = pytest.importorskip("lm_eval")

DOMAINS = ("if", "math", "chat")  # chat: a graded rubric score, non-zero on random weights
N = 4  # prompts per domain
MAX_TOKENS = 24

YAML = """task: nemocascade_serve_tiny
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{index}}}}"
process_results: !function score.process_results
generation_kwargs:
  until: []
  max_gen_toks: {max_tokens}
  temperature: 0
  chat_template_kwargs:
    enable_thinking: false
metric_list:
  - metric: score
    aggregation: mean
    higher_is_better: true
"""

SCORER = """from nemocascade.evaluation import matrix
from nemocascade.rewards import pool, registry

EXAMPLES = {{d: matrix.examples_for(d, "eval", {n}) for d in {domains!r}}}


def process_results(doc, results):
    ex = EXAMPLES[doc["domain"]][doc["index"]]
    name = registry.name_for_domain(ex.domain)
    (r,) = pool.VerifierPool(num_workers=0).score([name], [ex.prompt], [results[0]], [ex])
    return {{"score": r.score}}
"""


def _task(root) -> str:
    docs = []
    for domain in DOMAINS:
        for i, ex in enumerate(matrix.examples_for(domain, "eval", N)):
            assert not ex.meta.get("messages")  # single-turn: lm-eval sends the prompt alone
            docs.append({"prompt": ex.prompt, "domain": domain, "index": i})
    task_dir = root / "task"
    task_dir.mkdir()
    (task_dir / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (task_dir / "task.yaml").write_text(
        YAML.format(data=task_dir / "docs.jsonl", max_tokens=MAX_TOKENS)
    )
    (task_dir / "score.py").write_text(SCORER.format(n=N, domains=DOMAINS))
    return str(task_dir)


def test_lm_eval_chat_completions_matches_the_project_eval(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    stage_dir, params = helpers.export_toy(tmp_path)
    task_dir = _task(tmp_path)
    monkeypatch.syspath_prepend(task_dir)
    from lm_eval import evaluator, tasks

    model, engine = helpers.load(stage_dir)
    with helpers.Serving(model, engine) as s:
        out = evaluator.simple_evaluate(
            model="local-chat-completions",
            model_args=(
                f"base_url={s.url}/v1/chat/completions,model=sft,"
                "tokenizer_backend=None,tokenized_requests=False,max_retries=1"
            ),
            tasks=["nemocascade_serve_tiny"],
            task_manager=tasks.TaskManager(include_path=task_dir),
            apply_chat_template=True,
            log_samples=True,
        )
    engine.close()
    served_score = out["results"]["nemocascade_serve_tiny"]["score,none"]

    tok = tokenizer_lib.Tokenizer.load()
    own = matrix.evaluate(
        params,
        helpers.CFG,
        tok,
        domains=DOMAINS,
        modes=("instruct",),
        num_per_domain=N,
        max_new_tokens=MAX_TOKENS,
        thinking_budget=None,
        batch_size=16,
    )
    metric = {"chat": "gold"}  # the rubric value itself; the other domains score 0 or 1
    own_score = float(np.mean([own[f"{d}/instruct/{metric.get(d, 'pass@1')}"] for d in DOMAINS]))
    assert served_score == pytest.approx(own_score, abs=1e-9)

    # Response by response: lm-eval got exactly the project's greedy completions.
    mode = modes.get("instruct", tok)
    for sample in out["samples"]["nemocascade_serve_tiny"]:
        doc = sample["doc"]
        (expected,) = generate.complete(
            params,
            helpers.CFG,
            tok,
            [{"prompt": doc["prompt"]}],
            mode,
            method=sampling_methods.Greedy(),
            max_new_tokens=MAX_TOKENS,
            batch_size=1,
            seed=0,
            mesh=None,
            rules=None,
        )
        assert sample["resps"][0][0] == expected["completion"].strip()
    print(f"lm-eval score {served_score:.4f}, project eval {own_score:.4f}", file=sys.stderr)
