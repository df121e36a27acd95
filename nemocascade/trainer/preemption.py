"""Step-boundary services of every training loop: preemption and profiling.

Preemption: on SIGTERM (what a preemptible TPU VM, SLURM or Kubernetes sends
before it stops a job) the stage finishes the step it is in, saves a
checkpoint with the data position, and exits with status `EXIT_CODE` (75,
EX_TEMPFAIL: "try again"); rerunning the same command resumes from that
checkpoint exactly as if uninterrupted. Multi-host runs also stop when
orbax's `reached_preemption` says the cluster is being preempted (every
process agrees on the step).

Profiling: `train.profile_steps=START,END` writes a `jax.profiler` trace of
steps START..END (inclusive) into the stage's TensorBoard directory
(`<stage>/tb/plugins/profile/<run>/*.xplane.pb`, viewable in TensorBoard's
profile tab or Perfetto).
"""

from __future__ import annotations

import logging
import signal
import threading

import jax

EXIT_CODE = 75


class Preempted(Exception):
    """The stage saved a checkpoint at `step` and stopped on a preemption notice."""

    def __init__(self, stage: str, step: int, directory: str):
        super().__init__(
            f"[{stage}] preempted: saved step {step} in {directory}; rerun the same command "
            "to resume"
        )
        self.step = step


class Watcher:
    """Notes SIGTERM (installed on the main thread only; the previous handler is restored)."""

    def __init__(self):
        self._event = threading.Event()
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame):
        del frame
        logging.warning("received signal %d: saving at the end of this step", signum)
        self._event.set()

    def requested(self, step: int, manager) -> bool:
        """Stop after `step`? (SIGTERM here, or a cluster preemption on any host)."""
        if self._event.is_set():
            return True
        return jax.process_count() > 1 and manager.reached_preemption(step)

    def close(self):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


def stop_here(stage: str, step: int, state, data_state, manager) -> None:
    """Saves step `step` (state and data position) and raises `Preempted`."""
    manager.save(step, state, data_state(), force=True)
    manager.wait()
    raise Preempted(stage, step, manager.directory)


class Profiler:
    """Traces steps `start`..`end` into `log_dir`; inert when `steps` is empty."""

    def __init__(self, steps: tuple[int, ...], log_dir: str):
        self._start, self._end = (steps[0], steps[-1]) if steps else (0, -1)
        self._log_dir = log_dir
        self._active = False

    def before(self, step: int) -> None:
        if step == self._start and not self._active:
            jax.profiler.start_trace(self._log_dir)
            self._active = True
            logging.info("profiling steps %d..%d into %s", self._start, self._end, self._log_dir)

    def after(self, step: int, outputs=None) -> None:
        if self._active and step >= self._end:
            jax.block_until_ready(outputs)
            jax.profiler.stop_trace()
            self._active = False

    def close(self) -> None:
        if self._active:
            jax.profiler.stop_trace()
            self._active = False


class StepServices:
    """Preemption and profiling for a hand-written step loop (the on-policy stages).

    with StepServices(stage, cfg.train.profile_steps, f"{stage_dir}/tb") as services:
        for step in ...:
            services.before(step)
            state, m = train_step(...)
            services.after(step, m)
            ...
            services.check(step, total_steps, state, data_state, manager)
    """

    def __init__(self, stage: str, profile_steps: tuple[int, ...], profile_dir: str):
        self._stage = stage
        self.watcher = Watcher()
        self.profiler = Profiler(profile_steps, profile_dir)

    def __enter__(self) -> StepServices:
        return self

    def __exit__(self, *exc) -> None:
        self.watcher.close()
        self.profiler.close()

    def before(self, step: int) -> None:
        self.profiler.before(step)

    def after(self, step: int, outputs=None) -> None:
        self.profiler.after(step, outputs)

    def check(self, step: int, total_steps: int, state, data_state, manager) -> None:
        """After a step's own checkpoint/eval: save and stop on a preemption notice."""
        if step != total_steps and self.watcher.requested(step, manager):
            stop_here(self._stage, step, state, data_state, manager)
