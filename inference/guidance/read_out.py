"""Constrained read-out: the guidance may only be the plan's own sentences, each whole and at most once, then EOS.

With strict guarding (the default, and the bundled model's), the engine masks every next token that would leave
the plan's text, so no off-protocol sentence can be generated at all; the model still chooses which sentences
to read and in which order, and when to stop. The stream guard keeps judging every sentence (it is what holds
a model that is not constrained: vLLM servers, or a similarity threshold).

The sentences are given as token ids, as the model writes them after the prompt (each preceded by its space):
a token trie over them, walked one token at a time. Costs: building O(total plan tokens); ``allowed`` O(k s)
for k candidate tokens at the current node and s sentences (the root has one candidate per unused sentence);
``advance`` O(s).
No torch, no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class ReadOutConstraint:
    def __init__(self, sentences: Sequence[Sequence[int]], eos_token_id: int) -> None:
        self._children: list[dict[int, int]] = [{}]
        self._below: list[set[int]] = [set()]  # the sentences whose path passes through each node
        self._ends: dict[int, int] = {}  # node -> the sentence it completes
        for index, ids in enumerate(sentences):
            node = 0
            self._below[0].add(index)
            for token in ids:
                child = self._children[node].get(token)
                if child is None:
                    child = len(self._children)
                    self._children[node][token] = child
                    self._children.append({})
                    self._below.append(set())
                node = child
                self._below[node].add(index)
            self._ends.setdefault(node, index)
        self._eos = eos_token_id
        self._node = 0
        self._used: set[int] = set()
        self.finished = False  # EOS taken

    @classmethod
    def from_text(cls, sentences: Sequence[str], encode: Callable[[str], list[int]], eos_token_id: int
                  ) -> ReadOutConstraint:
        """Each sentence as the model writes it after the prompt or the previous sentence: after a space."""
        return cls([encode(" " + s) for s in sentences if s.strip()], eos_token_id)

    def allowed(self) -> list[int]:
        """The token ids that keep the output on the plan: the current sentence's next tokens; at a sentence's
        end also the first tokens of the sentences not read yet, and EOS."""
        if self.finished:
            return [self._eos]
        options = self._continuations(self._node)
        if self._node in self._ends:
            options |= self._continuations(0)
            options.add(self._eos)
        if not options:  # nothing left to read
            options.add(self._eos)
        return sorted(options)

    def advance(self, token_id: int) -> None:
        """The model chose ``token_id`` (one of ``allowed()``)."""
        if token_id == self._eos:
            self.finished = True
            return
        child = self._children[self._node].get(token_id)
        if child is None or not self._below[child] - self._used:
            child = self._children[0][token_id]  # the sentence ended; the next one starts
        self._node = child
        if child in self._ends:
            self._used.add(self._ends[child])

    def clone(self) -> ReadOutConstraint:
        """A copy at the same point that advances on its own (a speculative draft walks it); the trie is shared."""
        twin = object.__new__(ReadOutConstraint)
        twin.__dict__.update(self.__dict__)
        twin._used = set(self._used)
        return twin

    def _continuations(self, node: int) -> set[int]:
        return {t for t, child in self._children[node].items() if self._below[child] - self._used}
