"""Decoding modes as data: instruct and deep thinking differ only in the values below.

A `Mode` carries the chat template, the stop tokens, the thinking budget (and
the tokens forced when it runs out), the answer budget and the parser of the
generated ids. The sampler, the RL engine and the evaluation matrix take a
`Mode` and never branch on its name, so both modes share one code path (and,
since budgets are per-row arrays in the sampler, one batch).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

from nemocascade.data import chat_template, tokenizer as tokenizer_lib
from nemocascade.tasks import base as tasks_base

NAMES = tasks_base.MODES


@dataclasses.dataclass(frozen=True)
class Mode:
    """How to prompt, stop, budget and parse one decoding mode.

    Attributes:
      name: "thinking" or "instruct" (selects the template's flag/opener).
      template: chat template options.
      stop_ids: ids that end generation.
      thinking_budget: completion tokens allowed inside the open think block
        before the sampler forces `think_close_ids`; None = unlimited.
      answer_budget: tokens allowed after a forced close; None = unlimited.
      think_close_ids: ids forced when the thinking budget runs out.
      think_end_id: the `</think>` id, which closes the block naturally.
      parser: generated ids -> {completion, thinking, answer, finished}.
    """

    name: str
    template: chat_template.Template
    stop_ids: tuple[int, ...]
    thinking_budget: int | None
    answer_budget: int | None
    think_close_ids: tuple[int, ...]
    think_end_id: int
    parser: Callable[[Sequence[int]], dict]

    def prompt(self, tok: tokenizer_lib.Tokenizer, messages: Sequence[dict]) -> list[int]:
        """Prompt ids of a conversation ending with a user turn."""
        return chat_template.render_prompt(tok, messages, self.name, self.template)

    def example_prompt(self, tok: tokenizer_lib.Tokenizer, example: tasks_base.Example):
        return chat_template.render_example_prompt(tok, example, self.name, self.template)


def get(
    name: str,
    tok: tokenizer_lib.Tokenizer,
    template: chat_template.Template = chat_template.DEFAULT,
    thinking_budget: int | None = None,
    answer_budget: int | None = None,
) -> Mode:
    """The named mode; budgets apply to "thinking" only (instruct has no think block)."""
    if name not in NAMES:
        raise ValueError(f"mode must be one of {NAMES}, got {name!r}")
    for field, value in (("thinking_budget", thinking_budget), ("answer_budget", answer_budget)):
        if value is not None and value < 0:
            raise ValueError(f"{field} must be >= 0 or None, got {value}")
    thinking = name == "thinking"
    return Mode(
        name=name,
        template=template,
        stop_ids=tuple(chat_template.mode_stop_ids(tok)),
        thinking_budget=thinking_budget if thinking else None,
        answer_budget=answer_budget if thinking and thinking_budget is not None else None,
        think_close_ids=tuple(chat_template.think_close_ids(tok)),
        think_end_id=tok.token_id(tokenizer_lib.THINK_CLOSE),
        parser=functools.partial(chat_template.parse_completion, tok, mode=name, template=template),
    )


def sampler_kwargs(rows: Sequence[Mode]) -> dict:
    """`sampler.generate` keyword arguments for a batch whose row i decodes in `rows[i]`.

    Stop and think-close tokens must agree across rows (they do for modes of
    one tokenizer); budgets become per-row lists.
    """
    stops = {m.stop_ids for m in rows}
    closes = {(m.think_close_ids, m.think_end_id) for m in rows}
    if len(stops) != 1 or len(closes) != 1:
        raise ValueError("modes in one sampler call must share stop and think-close tokens")
    ((close_ids, end_id),) = closes
    return dict(
        stop_ids=next(iter(stops)),
        thinking_budget=[m.thinking_budget for m in rows],
        answer_budget=[m.answer_budget for m in rows],
        think_close_ids=close_ids,
        think_end_id=end_id,
    )
