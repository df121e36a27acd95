"""The continuous engine's serving hooks: requests joining a running call, tokens per chunk.

Requests handed over by `more` while the call decodes land in free slots and
get exactly the rows the static sampler gives the whole list (their request
indices follow the initial ones, so even sampled rows agree); `on_tokens`
reports growing prefixes of each live row's final tokens.
"""

import jax
import numpy as np
import pytest

from nemocascade.rollout import continuous, decoding
from tests.rollout import helpers
from tests.rollout.test_continuous import BUDGETS, MAX_NEW, METHODS, PROMPTS, _assert_same, _kw

CFG = helpers.TOY_MODEL
FIRST = 3  # requests given to the call; the rest join while it runs


@pytest.fixture(scope="module")
def params():
    return helpers.random_params()


def _joining(after_chunks: int, finished: list):
    """`more`: nothing for the first polls, then PROMPTS[FIRST:] two at a time.

    Also records, per joining request, whether an initial request was still decoding.
    """
    polls, queue, overlapped = [0], list(range(FIRST, len(PROMPTS))), []

    def more(room):
        polls[0] += 1
        if polls[0] <= after_chunks or not queue:
            return []
        take = [queue.pop(0) for _ in range(min(2, room, len(queue)))]
        done = {i for idx in finished for i in idx}
        overlapped.extend(not set(range(FIRST)) <= done for _ in take)
        return [continuous.Request(PROMPTS[i], BUDGETS[i], 3) for i in take]

    return more, queue, overlapped


@pytest.mark.parametrize("name", sorted(METHODS))
def test_joined_requests_get_the_rows_of_one_whole_call(params, name):
    kw = _kw(METHODS[name])
    static = decoding.generate(params, CFG, PROMPTS, **kw)
    finished, stats = [], {}
    more, queue, overlapped = _joining(2, finished)
    cont = continuous.generate(
        params,
        CFG,
        PROMPTS[:FIRST],
        num_slots=4,
        chunk_steps=2,
        prompt_bucket=32,  # the bucket of the longest joiner (and of the static call)
        more=more,
        on_finish=lambda idx, rows: finished.append(idx.tolist()),
        stats=stats,
        **{**kw, "thinking_budget": BUDGETS[:FIRST]},
    )
    assert not queue and stats["joined"] == len(PROMPTS) - FIRST
    _assert_same(static, cont)
    assert sorted(i for idx in finished for i in idx) == list(range(len(PROMPTS)))
    assert overlapped[0]  # the first joiners decoded beside initial requests


def test_a_joining_prompt_must_fit_the_bucket(params):
    def more(room):
        return [continuous.Request(list(range(1, 40)))]  # 39 tokens > P = 16

    kw = {**_kw(METHODS["greedy"]), "thinking_budget": None}
    with pytest.raises(ValueError, match="prompt bucket 16"):
        continuous.generate(params, CFG, PROMPTS[:2], more=more, **kw)


def test_on_tokens_reports_growing_prefixes_of_the_selected_rows(params):
    kw = _kw(METHODS["greedy"])
    seen: dict[int, list[int]] = {}

    def on_tokens(indices, tokens, lengths):
        for i, t, n in zip(indices.tolist(), tokens, lengths.tolist(), strict=True):
            assert n >= len(seen.get(i, []))
            seen.setdefault(i, [])
            seen[i] = t[:n].tolist()
            counts[i] = counts.get(i, 0) + 1

    counts: dict[int, int] = {}
    out = continuous.generate(
        params,
        CFG,
        PROMPTS,
        num_slots=4,
        chunk_steps=2,
        on_tokens=on_tokens,
        token_rows=lambda idx: idx[idx % 2 == 0],  # even requests only
        **kw,
    )
    assert seen and all(i % 2 == 0 for i in seen)
    for i, ids in seen.items():
        n = int(out.lengths[i])
        assert 0 < len(ids) < n or n <= 2  # reported before the row finished
        np.testing.assert_array_equal(ids, out.completion_tokens[i, : len(ids)])
    assert max(counts.values()) > 1  # a long row was reported after several chunks


def test_hooks_change_nothing_when_unused(params):
    kw = _kw(METHODS["sample"], seed=5)
    ref = continuous.generate(params, CFG, PROMPTS, num_slots=4, chunk_steps=4, **kw)
    out = continuous.generate(
        params,
        CFG,
        PROMPTS,
        num_slots=4,
        chunk_steps=4,
        more=lambda room: [],
        on_tokens=lambda *a: None,
        **kw,
    )
    _assert_same(ref, out)
    assert jax.tree.leaves(out)  # a full rollout


def test_a_row_limit_frees_the_slot_like_a_shorter_call(params):
    kw = _kw(METHODS["sample"], seed=6)
    limits = [5, None, 6, 16, 5, 7, 9, None]
    stats = {}
    out = continuous.generate(
        params, CFG, PROMPTS, num_slots=3, chunk_steps=2, max_tokens=limits, stats=stats, **kw
    )
    assert stats["cut"] > 0
    for i, limit in enumerate(limits):
        alone = decoding.generate(
            params, CFG, PROMPTS, **{**kw, "max_new_tokens": limit or MAX_NEW}
        )
        n = limit or MAX_NEW
        np.testing.assert_array_equal(out.completion_tokens[i, :n], alone.completion_tokens[i])
        assert (out.completion_mask[i, n:] == 0).all()
        assert out.lengths[i] == alone.lengths[i] and out.truncated[i] == alone.truncated[i]
