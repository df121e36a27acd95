"""Sweeps: grid expansion, names, validation before running, local runs, launchers, end to end."""

import json
import os
import subprocess
import sys

import pytest

from nemocascade import config as config_lib, overrides, sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGE2 = "configs/stage2_medium.py:tiny"
# Toy sizes (as tests/trainer/test_rl_stage.py): a 1-layer model, 2 prompts x 4
# rollouts of 8 tokens, one-prompt evals on math/thinking only.
TOY = (
    "model.d_model=32;model.num_layers=1;model.num_heads=2;model.num_kv_heads=1;"
    "model.head_dim=16;model.d_ff=64;train.steps=2;train.batch_size=8;train.num_microbatches=1;train.progress=False;"
    "train.checkpoint_every=100;rl.prompts_per_step=2;rl.group_size=4;rl.eval_num=1;"
    "rl.max_new_tokens=8;rl.verifier_workers=0;rl.curriculum=();eval.num_per_domain=1;"
    "eval.max_new_tokens=8;eval.thinking_budget=4;eval.batch_size=8;"
    "eval.domains=('math',);eval.modes=('thinking',)"
)


@pytest.fixture(scope="module")
def base():
    return overrides.load_config_file(STAGE2)


def test_expand_is_the_ordered_product():
    axes = sweep.parse_axes("optim.lr=1e-6,3e-6;rl.group_size=4,8")
    assert sweep.expand(axes) == [
        {"optim.lr": 1e-6, "rl.group_size": 4},
        {"optim.lr": 1e-6, "rl.group_size": 8},
        {"optim.lr": 3e-6, "rl.group_size": 4},
        {"optim.lr": 3e-6, "rl.group_size": 8},
    ]
    kinds = sweep.expand([("rl.kl_kind", ["k1", "k3"])])
    assert kinds == [{"rl.kl_kind": "k1"}, {"rl.kl_kind": "k3"}]
    with pytest.raises(config_lib.ConfigError, match="--sweep is empty"):
        sweep.parse_axes(" ; ")


def test_run_names_are_short_unique_and_path_safe():
    assert sweep.run_name({"optim.lr": 1e-6, "rl.group_size": 4}) == "lr-1e-06__group_size-4"
    assert sweep.run_name({"eval.domains": ("math", "code")}) == "domains-math+code"
    assert sweep.run_name({"init.init_from": "/tmp/a b"}) == "init_from-tmp_a_b"
    # Two swept fields with the same name keep their sections.
    assert sweep.run_name({"rl.max_new_tokens": 8, "eval.max_new_tokens": 16}) == (
        "rl.max_new_tokens-8__eval.max_new_tokens-16"
    )


def test_plan_validates_every_point_before_running(base, tmp_path):
    axes = sweep.parse_axes("optim.lr=1e-6,3e-6;rl.group_size=4,8")
    runs = sweep.plan(STAGE2, base, axes, {"train.steps": 3}, str(tmp_path))
    assert [r.name for r in runs] == [
        "lr-1e-06__group_size-4",
        "lr-1e-06__group_size-8",
        "lr-3e-06__group_size-4",
        "lr-3e-06__group_size-8",
    ]
    run = runs[1]
    assert run.values == {"optim.lr": 1e-6, "rl.group_size": 8}
    assert run.argv == (
        "-m",
        "nemocascade.main",
        f"--config={STAGE2}",
        f"--workdir={tmp_path}/lr-1e-06__group_size-8",
        "--config.train.steps=3",
        "--config.optim.lr=1e-06",
        "--config.rl.group_size=8",
    )
    assert run.stage_dirs == (f"{tmp_path}/lr-1e-06__group_size-8/stage2_medium",)

    with pytest.raises(config_lib.ConfigError) as e:
        sweep.plan(STAGE2, base, sweep.parse_axes("rl.lr=1e-6,3e-6"), {}, str(tmp_path))
    assert str(e.value) == "unknown field config.rl.lr (did you mean config.optim.lr?)"
    # The bad value is the last grid point: nothing may have been started.
    with pytest.raises(config_lib.ConfigError, match="config.rl.group_size must be >= 2"):
        sweep.plan(STAGE2, base, sweep.parse_axes("rl.group_size=4,1"), {}, str(tmp_path))
    with pytest.raises(config_lib.ConfigError, match="in both --overrides and --sweep"):
        sweep.plan(STAGE2, base, axes, {"optim.lr": 1e-3}, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_cascade_run_writes_one_dir_per_stage(tmp_path):
    cd = overrides.load_config_file("configs/cascade.py:tiny")
    axes = [("cascade.stages", ["sft,rm", "sft"])]
    runs = sweep.plan("configs/cascade.py:tiny", cd, axes, {}, str(tmp_path))
    assert [r.stage_dirs for r in runs] == [
        (f"{tmp_path}/stages-sft_rm/sft", f"{tmp_path}/stages-sft_rm/rm"),
        (f"{tmp_path}/stages-sft/sft",),
    ]


def test_run_local_skips_finished_and_goes_on_after_a_failure(base, tmp_path):
    axes = sweep.parse_axes("optim.lr=1e-6,2e-6,3e-6")
    runs = sweep.plan(STAGE2, base, axes, {}, str(tmp_path))
    os.makedirs(runs[0].stage_dirs[0])
    open(os.path.join(runs[0].stage_dirs[0], "DONE"), "w").close()
    calls = []

    def runner(argv, log_path, env):
        calls.append((argv, env["MARK"]))
        with open(log_path, "w") as f:
            f.write("log")
        return 1 if "--config.optim.lr=2e-06" in argv else 0

    records = sweep.run_local(runs, str(tmp_path), env={"MARK": "x"}, runner=runner)
    assert [r["status"] for r in records] == ["skipped", "failed", "done"]
    assert [a for a, _ in calls] == [runs[1].argv, runs[2].argv]
    assert records[1]["returncode"] == 1
    with open(records[1]["log"]) as f:
        assert f.read() == "log"


def test_launcher_commands_use_the_launch_scripts(base, tmp_path):
    (run,) = sweep.plan(STAGE2, base, [("optim.lr", [1e-6])], {}, str(tmp_path))
    main = f"python -m nemocascade.main --config={STAGE2} --workdir={tmp_path}/lr-1e-06 "
    main += "--config.optim.lr=1e-06"
    tpu = sweep.launcher_command("tpu_pod", run, None)
    assert tpu.endswith(f'launch/tpu_pod.sh --tpu="$TPU" --zone="$ZONE" -- {main}')
    slurm = sweep.launcher_command("slurm", run, "--nodes=2")
    assert slurm.startswith(f"mkdir -p {tmp_path}/lr-1e-06 && sbatch --job-name=lr-1e-06 ")
    assert f"--output={tmp_path}/lr-1e-06/slurm-%j.out --nodes=2 " in slurm
    assert slurm.endswith(f"launch/gpu_slurm.sbatch {main}")


def _cli(*args, cwd=ROOT):
    argv = [sys.executable, "-m", "nemocascade.sweep", f"--config={STAGE2}", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_cli_rejects_an_unknown_field_in_one_line(tmp_path):
    p = _cli("--sweep=rl.lr=1e-6,3e-6;rl.group_size=4,8", f"--workdir={tmp_path / 'sw'}")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        "sweep error: unknown field config.rl.lr (did you mean config.optim.lr?)"
    )
    assert not (tmp_path / "sw").exists()


def test_cli_dry_run_and_launcher_print_commands(tmp_path):
    sw = tmp_path / "sw"
    p = _cli("--sweep=optim.lr=1e-6,3e-6", f"--workdir={sw}", "--dry_run")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == [
        f"python -m nemocascade.main --config={STAGE2} --workdir={sw}/lr-{v} --config.optim.lr={v}"
        for v in ("1e-06", "3e-06")
    ]
    p = _cli("--sweep=optim.lr=1e-6,3e-6", f"--workdir={sw}", "--launcher=slurm")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [line.split(" && ")[1].split()[0] for line in p.stdout.splitlines()] == ["sbatch"] * 2
    assert not sw.exists()  # printing commands writes nothing


def test_cli_report_only_collects_finished_runs(tmp_path):
    """After cluster runs: the table from what is on disk, whatever the launcher flag."""
    sw = tmp_path / "sw"
    stage = sw / "lr-1e-06" / "stage2_medium"
    stage.mkdir(parents=True)
    (stage / "metrics.jsonl").write_text('{"step": 3, "reward_mean": 0.25}\n')
    (stage / "DONE").write_text("")
    args = ("--sweep=optim.lr=1e-6,3e-6", f"--workdir={sw}", "--report_only", "--launcher=slurm")
    p = _cli(*args)
    assert p.returncode == 0, p.stderr[-2000:]
    table = (sw / "sweep.md").read_text()
    assert "| lr-1e-06 | done | 1e-06 | 3 | 0.25 |" in table
    assert "| lr-3e-06 | pending | 3e-06 | – | – |" in table


def test_quoted_values_may_hold_separators():
    axes = sweep.parse_axes("cascade.set='sft.optim.lr=1e-3;rm.optim.lr=1e-4','sft.optim.lr=2e-3'")
    assert axes == [("cascade.set", ["sft.optim.lr=1e-3;rm.optim.lr=1e-4", "sft.optim.lr=2e-3"])]


@pytest.mark.slow  # 55-75 s on 2 cores: four nemocascade.main processes and a rerun
def test_two_by_two_sweep_end_to_end(tmp_path):
    """Four real toy runs; the axes leave compiled shapes alone, so runs 2-4 hit the cache."""
    sw = tmp_path / "sw"
    # The 8-token toy rollouts are all truncated: with math RL's overlong
    # filter no row would reach the loss, so it is off here.
    toy = TOY + ";rl.overlong=none"
    args = ("--sweep=train.seed=0,1;rl.num_prompts=8,16", f"--overrides={toy}", f"--workdir={sw}")
    p = _cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    names = ["seed-0__num_prompts-8", "seed-0__num_prompts-16"]
    names += ["seed-1__num_prompts-8", "seed-1__num_prompts-16"]
    result = json.loads((sw / "sweep.json").read_text())
    assert [r["name"] for r in result["runs"]] == names
    assert [r["status"] for r in result["runs"]] == ["done"] * 4
    assert result["axes"] == {"train.seed": [0, 1], "rl.num_prompts": [8, 16]}
    for r in result["runs"]:
        m = r["metrics"]
        assert m["step"] == 2
        assert 0.0 <= m["reward_mean"] <= 1.0
        assert m["entropy"] > 0  # over trained tokens (overlong filtering off, above)
        assert 0.0 <= m["eval/math/thinking/pass@1"] <= 1.0
        assert 0.0 <= m["matrix/math/thinking"] <= 1.0
        assert (sw / r["name"] / "stage2_medium" / "DONE").exists()
    table = (sw / "sweep.md").read_text()
    for name in names:
        assert f"| {name} | done |" in table
    assert (sw / "sweep_curves.png").stat().st_size > 1000

    # The same command again skips every finished run.
    p = _cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads((sw / "sweep.json").read_text())
    assert [r["status"] for r in result["runs"]] == ["skipped"] * 4
    assert all(r["metrics"]["step"] == 2 for r in result["runs"])
