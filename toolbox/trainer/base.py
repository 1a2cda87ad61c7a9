"""BaseTrainer: the fixed skeleton of every training run (the Template Method).

::

    _prepare_run   resume (resume_from=auto) · write config.yaml · setup()
                   (a failed resume writes nothing; a resumed FINISHED run returns at once)
    run_loop()     the native loop (a backend with its own loop, TRL, replaces this one hook):
      STEP_START → train_step() → scheduler.step() → STEP_END(metrics)   # subclasses write train_step
      every eval_every → evaluate() → EVAL_END
      every save_every → save_checkpoint() → CHECKPOINT_SAVED
      SIGINT/SIGTERM → checkpoint at the current step → TrainingInterrupted (trainer/interrupt.py)
    _finish        final eval (when evaluates_at_end()) · final checkpoint · EXPORT · FIT_END
    teardown()     however fit ends (GRPO shuts its engine down, PPO closes its environments)

Subclasses fill in public hooks only: ``train_step`` (required), ``setup``, ``teardown``,
``evaluate``, ``evaluates_at_end``, ``extra_state``/``load_extra_state`` and, for a backend that
brings its own loop, ``run_loop``; ``fit`` and the private steps of the skeleton are never
overridden. The loop never logs and never writes metrics: it emits events, and callbacks observe them.

The optimizer step (what a subclass's ``train_step`` calls)
------------------------------------------------------------

A ``train_step`` computes its losses and calls two methods of the base, which own everything
between a loss and the updated weights, once for every trainer::

    for micro_batch in ...:
        out = objective(...)                       # a loss summed over out.num_items items
        self.backward(out.loss_sum)                # precision-aware (fp16's GradScaler scales)
        loss_sum += out.loss_sum.item(); items += out.num_items
    metrics = self.optimizer_step(loss_sum, items) # {"loss", "lr", "grad_norm"}

``optimizer_step(loss_sum, num_items, params=None)`` divides the summed gradients by the global
item count (all micro-batches, all ranks: ``world_size / global_items``, as DDP averages over
ranks), unscales (fp16), clips the global norm to ``max_grad_norm`` (0: no clipping, the norm is
still reported), steps the optimizer and zeroes the gradients. It returns ``loss`` (the summed
loss of all ranks over the global item count), the ``lr`` the step used and ``grad_norm``. A
trainer whose loss is already a mean (GRPO's minibatch loss) passes ``num_items=1`` and the mean
as ``loss_sum``: the gradients are left as they are. ``params`` defaults to the model's trainable
parameters. The scheduler steps once per ``train_step`` (after it), however many optimizer steps
it took. ``with self.eval_mode(module):`` runs a block with a module in eval mode, then restores it.

Components a trainer declares: ``uses_reference = True`` makes the ``ExperimentBuilder`` build the
frozen reference (``parts.reference_model``, when the objective ``needs_reference``; from
``trainer.reference_path`` or a copy of the policy as built), ``uses_engine = True`` the inference
engine (``parts.engine``: the run's ``engine`` node, else ``default_engine(settings)``). A trainer
only reads them, never writing into the objective, collator, dataset or engine; what an objective
needs it declares (``needs_reference``, ``needs_entropy``, ``needs_kl_pairs``, ``needs_value_head``).
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from toolbox.core.atomic import atomic_write_text
from toolbox.core.checkpointer import Checkpointer
from toolbox.core.device import rng_state, set_rng_state
from toolbox.core.errors import CheckpointError, ConfigError, TrainingInterrupted
from toolbox.core.events import Event, EventBus
from toolbox.core.registry import registered_name
from toolbox.nn.adapters import adapter_state_dict, is_adapted, with_base_weights
from toolbox.objectives.base import Objective
from toolbox.trainer.activation_checkpointing import enable_activation_checkpointing
from toolbox.trainer.interrupt import StopOnSignal, agree_on_stop
from toolbox.trainer.lean_step import clip_grad_norm, fused_adamw_step, zero_grads

if TYPE_CHECKING:
    from toolbox.experiment.build import Components

log = logging.getLogger(__name__)


class BaseTrainer(ABC):
    #: the objective family this trainer accepts
    objective_family: type[Objective] = Objective
    #: the builder makes ``parts.reference_model`` when this is set and the objective needs_reference
    uses_reference: bool = False
    #: the builder makes ``parts.engine`` (the run's ``engine`` node, else ``default_engine``)
    uses_engine: bool = False

    def __init__(
        self,
        parts: Components,
        max_steps: int = 100,
        eval_every: int = 0,
        save_every: int = 0,
        max_grad_norm: float = 1.0,
        activation_checkpointing: bool = False,
    ) -> None:
        if max_steps < 1:
            raise ConfigError(f"trainer.max_steps: must be at least 1, got {max_steps}.")
        self.parts = parts
        self.cfg = parts.cfg
        self.context = parts.context
        self.strategy = parts.strategy
        self.model = parts.model
        self.tokenizer = parts.tokenizer
        self.objective = parts.objective
        self.optimizer = parts.optimizer
        self.scheduler = parts.scheduler
        self.precision = parts.precision
        self.evaluators = parts.evaluators
        self.callbacks = parts.callbacks
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.save_every = save_every
        self.max_grad_norm = max_grad_norm
        if activation_checkpointing:
            enable_activation_checkpointing(self.strategy.unwrap(self.model))
        self._params = (
            [p for p in self.model.parameters() if p.requires_grad] if self.model is not None else []
        )
        self.step = 0
        self.should_stop = False
        self.stop_reason: str | None = None
        self.last_eval: dict[str, float] = {}
        self.checkpointer = Checkpointer(self.context.run_dir)
        self.bus = EventBus()
        for cb in self.callbacks:
            if self.context.is_main or not cb.main_process_only:
                cb.attach(self.bus)

    @classmethod
    def from_builder(cls, parts: Components, **settings: Any) -> BaseTrainer:
        """Check the objective's family, then construct the trainer from built components."""
        if not isinstance(parts.objective, cls.objective_family):
            from toolbox.core.registries import OBJECTIVES

            valid = [
                n for n, obj in OBJECTIVES if isinstance(obj, type) and issubclass(obj, cls.objective_family)
            ]
            name = registered_name(parts.objective)
            raise ConfigError(
                f"objective: '{name}' is a {parts.objective.family} objective, but trainer "
                f"'{registered_name(cls)}' needs a {cls.objective_family.family} "
                f"objective: choose one of {', '.join(valid) or '(none registered)'}."
            )
        return cls(parts, **settings)

    @classmethod
    def default_engine(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The engine spec of a trainer that ``uses_engine`` when the run selects none."""
        return {"name": "torch"}

    @classmethod
    def engine_on_copy(cls, settings: dict[str, Any]) -> bool:
        """Whether the engine needs its own copy of the policy (it generates while the policy trains)."""
        return False

    # the skeleton ---------------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        try:
            resumed_from = self._prepare_run()
            if resumed_from is not None and self.step >= self.max_steps:
                # resumed from its final checkpoint: nothing to train and nothing appended; only a
                # missing final model is written again (Snakemake and DVC delete a stage's outputs
                # before they rerun it), from the same state, so with the same bytes
                log.info(
                    "the run in %s finished at step %d; nothing to train", self.context.run_dir, self.step
                )
                self.bus.emit(Event.EXPORT, self, self.step, dict(self.last_eval), resumed=True)
                self.strategy.barrier()
                return dict(self.last_eval)
            self.bus.emit(Event.FIT_START, self, self.step, resumed_from=resumed_from)
            self.run_loop()
            return self._finish()
        finally:
            self.teardown()

    def run_loop(self) -> None:
        """Train from ``self.step`` to ``max_steps`` (or a stop request), emitting the step events.

        SIGINT or SIGTERM lets the step in progress finish, saves a checkpoint at it and raises
        ``TrainingInterrupted``; a second signal stops at once.
        """
        with StopOnSignal() as stop:
            while self.step < self.max_steps and not self.should_stop:
                self.bus.emit(Event.STEP_START, self, self.step + 1)
                metrics = self.train_step()
                if self.scheduler is not None:  # once per train step, after it: the lr it reported
                    self.scheduler.step()
                self.step += 1
                self.bus.emit(Event.STEP_END, self, self.step, metrics)
                if self.eval_every and self.step % self.eval_every == 0 and self.step < self.max_steps:
                    self._evaluate()
                if self.save_every and self.step % self.save_every == 0 and self.step < self.max_steps:
                    self.save_checkpoint()
                interrupted = stop.signal_name is not None
                if self.context.world_size > 1:  # one rank's stop request or signal stops them all
                    self.should_stop, interrupted = agree_on_stop(
                        self.strategy, self.should_stop, interrupted
                    )
                if interrupted:
                    self._save_and_stop(stop.signal_name or "a signal", stop.exit_code)

    def _save_and_stop(self, signal_name: str, exit_code: int) -> None:
        if self._latest_step() != self.step:
            self.save_checkpoint()
        self.strategy.barrier()
        raise TrainingInterrupted(
            f"{signal_name} at step {self.step}: checkpoint saved in {self.checkpointer.root}; "
            "add resume_from=auto to the same command to continue.",
            exit_code,
        )

    def _prepare_run(self) -> int | None:
        """Resume, then write config.yaml and call ``setup``: a resume that fails (no usable
        checkpoint) leaves the run's files as they were, and a finished run is not touched."""
        resumed_from = self._resume(self.cfg.get("resume_from"))
        if resumed_from is not None and self.step >= self.max_steps:
            return resumed_from
        run_dir = Path(self.context.run_dir)
        if self.context.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            from omegaconf import OmegaConf

            atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(self.cfg, resolve=True))
        self.setup()
        return resumed_from

    def _finish(self) -> dict[str, float]:
        if self.evaluates_at_end():
            self._evaluate()
        if self.step > 0 and self._latest_step() != self.step:
            self.save_checkpoint()
        self.bus.emit(Event.EXPORT, self, self.step, dict(self.last_eval), resumed=False)
        self.bus.emit(
            Event.FIT_END,
            self,
            self.step,
            dict(self.last_eval),
            stopped_early=self.should_stop,
            stop_reason=self.stop_reason,
        )
        self.strategy.barrier()
        return self.last_eval

    # hooks for subclasses -------------------------------------------------------------------------
    def setup(self) -> None:
        """Called once after resuming, before the first step."""

    def teardown(self) -> None:
        """Called once when ``fit`` ends, however it ends (release engines, threads, environments)."""

    def evaluates_at_end(self) -> bool:
        """Whether ``fit`` evaluates once more after the last step (default: when the run has
        evaluators; a trainer whose ``evaluate`` adds its own metrics returns True)."""
        return bool(self.evaluators)

    @abstractmethod
    def train_step(self) -> dict[str, float]:
        """One optimizer step; return its metrics."""

    # the optimizer step ----------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate ``loss`` (scaled by fp16's GradScaler when there is one)."""
        scaler = self.precision.scaler
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def optimizer_step(
        self, loss_sum: float, num_items: float, params: Iterable[torch.nn.Parameter] | None = None
    ) -> dict[str, float]:
        """Normalise, unscale, clip, step and zero the gradients summed by :meth:`backward`.

        ``loss_sum`` and ``num_items`` are this rank's, over all micro-batches of the step; see the
        module docstring. Returns ``loss`` (all ranks), ``lr`` (the one used) and ``grad_norm``.
        """
        params = self._params if params is None else list(params)
        global_items = self.strategy.all_reduce_sum(float(num_items))
        scale = self.context.world_size / max(global_items, 1.0)  # DDP averages over ranks
        if scale != 1.0:
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, scale)
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        grad_norm = self.clip_gradients(params)
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        elif not fused_adamw_step(self.optimizer):  # torch's kernels without torch's plumbing
            self.optimizer.step()
        lr = self.optimizer.param_groups[0]["lr"]
        zero_grads(self.optimizer)
        loss = self.strategy.all_reduce_sum(float(loss_sum)) / max(global_items, 1.0)
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm}

    def clip_gradients(self, params: list[torch.nn.Parameter]) -> float:
        """Clip the global gradient norm to ``max_grad_norm`` (0: no clipping); return the norm."""
        if self.max_grad_norm and self.max_grad_norm > 0:
            total = clip_grad_norm(params, self.max_grad_norm)  # torch's kernels, leaner (lean_step.py)
            return float(
                torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm) if total is None else total
            )
        norms = [p.grad.detach().norm() for p in params if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0

    @contextlib.contextmanager
    def eval_mode(self, module: torch.nn.Module | None = None) -> Iterator[torch.nn.Module]:
        """Run a block with ``module`` (default: the unwrapped model) in eval mode, then restore its mode."""
        module = self.strategy.unwrap(self.model) if module is None else module
        was_training = module.training
        module.eval()
        try:
            yield module
        finally:
            module.train(was_training)

    def extra_state(self) -> dict[str, Any]:
        """Subclass state to checkpoint (data position, reference models, ...)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # evaluation -----------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        # eval never moves the train RNG
        with self.eval_mode(), torch.random.fork_rng(devices=[]), torch.no_grad():
            for evaluator in self.evaluators:
                metrics.update(evaluator(self.parts))
        return metrics

    def _evaluate(self) -> None:
        self.last_eval = self.evaluate()
        self.bus.emit(Event.EVAL_END, self, self.step, dict(self.last_eval))

    # checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        model_state = self.strategy.model_state_dict(self.model)
        if is_adapted(self.model):  # only the adapter: the base is rebuilt from the config
            model_state = adapter_state_dict(self.model, model_state)
        return {
            "step": self.step,
            "model": model_state,
            "optimizer": self.strategy.optimizer_state_dict(self.model, self.optimizer),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": rng_state(),
            "callbacks": {
                type(cb).__name__: cb.state_dict() for cb in self.callbacks if hasattr(cb, "state_dict")
            },
            "extra": self.extra_state(),
            "last_eval": dict(self.last_eval),  # what fit() returns when a finished run is resumed
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        if is_adapted(self.model) and "model" in state:
            state = {**state, "model": with_base_weights(self.model, state["model"])}
        self.strategy.load_training_state(self.model, self.optimizer, state)  # any strategy, any world size
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        for cb in self.callbacks:
            if hasattr(cb, "load_state_dict") and type(cb).__name__ in state["callbacks"]:
                cb.load_state_dict(state["callbacks"][type(cb).__name__])
        self.load_extra_state(state["extra"])
        self.last_eval = dict(state.get("last_eval") or {})
        set_rng_state(self.strategy.rank_rng_state(state))

    def save_checkpoint(self) -> Path | None:
        state = self.state_dict()
        path = self.strategy.save_checkpoint(self.checkpointer, self.step, state)  # rank 0 returns the folder
        self.bus.emit(Event.CHECKPOINT_SAVED, self, self.step, path=path)
        return path

    def _latest_step(self) -> int:
        done = self.checkpointer.list()
        return int(done[-1].name.split("_")[1]) if done else -1

    def _resume(self, resume_from: str | None) -> int | None:
        if not resume_from:
            return None
        if resume_from == "auto":
            found = self.checkpointer.load_latest()
            if found is None:
                return None  # nothing saved yet: a fresh start is what "auto" means
            path, state = found
        else:
            path = Path(resume_from)
            if not path.exists():
                raise CheckpointError(
                    f"resume_from: {path} does not exist; use resume_from=auto or a checkpoint folder."
                )
            state = self.checkpointer.load(path)
        self.load_state_dict(state)
        log.info("resumed from %s at step %d", path, self.step)
        return self.step

    def request_stop(self, reason: str = "") -> None:
        """Callbacks (early stopping) ask the loop to stop after the current step."""
        self.should_stop = True
        self.stop_reason = reason
