"""A served toy model: random params exported like a stage, uvicorn on a free local port."""

from __future__ import annotations

import socket
import threading
import time

import openai
import uvicorn

from nemocascade import checkpointing
from nemocascade.serve import app as app_lib, cli
from tests.rollout import helpers

CFG = helpers.TOY_MODEL_1K  # the shipped tokenizer's vocabulary, 512-token context
FLAGS = ("--budget_low=4", "--budget_medium=12", "--max_tokens=16", "--max_batch=16")


def export_toy(root) -> tuple[str, dict]:
    """(stage directory, params) of a random toy model saved as a stage's export."""
    params = helpers.random_params(CFG, head_scale=5.0)
    stage_dir = str(root / "sft")
    checkpointing.export_params(stage_dir, params, {"stage": "sft"})
    return stage_dir, params


def load(stage_dir: str, *flags: str):
    return cli.load(cli.parse_args([f"--workdir={stage_dir}", *FLAGS, *flags]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serving:
    """Context manager: the app served on 127.0.0.1 from a background thread."""

    def __init__(self, model: app_lib.Model, engine):
        self.engine = engine
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app_lib.build_app(model, engine),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, **kw)
