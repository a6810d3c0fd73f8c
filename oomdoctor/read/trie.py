"""One regex that finds any of many words, fast enough in Python's engine."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: A trie node: next byte → node; the key -1 marks the end of a word.
_Trie = dict[int, "_Trie"]
#: Words longer than this join the alternation as they are (a deep trie nests as many groups,
#: and Python's regex compiler recurses on each).
TRIE_DEPTH = 96


def alternation(words: Iterable[bytes]) -> bytes:
    """The words as one regex written as a trie (`Pre(?:fill|empt)`): Python's engine then tries
    a handful of branches at each position instead of every word (about 6× faster with ~300
    anchors). Only whether and where some word starts is meant to be used."""
    trie: _Trie = {}
    long = []
    for word in words:
        if len(word) > TRIE_DEPTH:
            long.append(re.escape(word))
            continue
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[-1] = {}
    return b"|".join([_branches(trie), *long] if trie else long)


def _branches(node: _Trie) -> bytes:
    alts = [re.escape(bytes([c])) + _branches(node[c]) for c in sorted(k for k in node if k >= 0)]
    if not alts:
        return b""
    body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
    return b"(?:" + body + b")?" if -1 in node else body
