"""When a value is a secret: the policies (``POLICIES``) that a key's name selects
(:func:`key_policy`), and the test of a value under one (:func:`is_secret`). The shapes around
values are in :mod:`.secret_shapes`; :mod:`.secrets` finds and masks them."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from types import MappingProxyType
from typing import NamedTuple
from urllib.parse import unquote

from oomdoctor.extract.lazy import LazyPattern
from oomdoctor.report.secret_shapes import ENV_ONLY, KEY_SHAPES, SECRETISH, TOKEN_CHARS

MASK = "<redacted>"


class Policy(NamedTuple):
    """When a value beside a secret-naming key is a secret."""

    numbers_from: int | None  # a plain number of at least this many digits (None: never)
    words: bool  # a plain word (letters only, at most 12) is masked too
    min_len: int  # shorter values are kept
    tokenish: bool  # only token characters, and at least two classes (lower, upper, digit, sign)
    names: bool  # a name made of short pieces (``Llama-3.1-8B``, a UUID) is kept
    entropy: float  # at least this many bits per character


POLICIES = MappingProxyType(
    {
        # password, secret, credential, signature, cookie, auth*, api key, any query parameter
        "strong": Policy(4, True, 1, False, False, 0.0),
        # another ``*_key``: ``access_key``, ``private_key``
        "key": Policy(None, False, 4, False, False, 0.0),
        # ``*_token``: ``hf_token``, ``AWS_SESSION_TOKEN`` (``new_token: 3`` is a count)
        "token": Policy(None, False, 6, True, False, 0.0),
        # a lone ``key`` / ``token``: ``{'key': 'lm_head'}`` is not a secret
        "bare": Policy(None, False, 16, True, True, 3.0),
        # a string after a secret word with no key shape: ``HF token hf...``
        "near": Policy(None, False, 20, True, True, 3.0),
    }
)

AUTH_SCHEMES = frozenset({"basic", "bearer", "token", "digest", "negotiate", "apikey"})
TRIVIAL = frozenset(
    {
        "", "none", "null", "nil", "undefined", "true", "false", "yes", "no", "on", "off", "auto",
        "default", "unset", "empty", "disabled", "enabled", "required", "optional", "n/a", "na",
        "{}", "[]", "()", "''", '""', "-", "***", "...", "redacted",
    }
)  # fmt: skip


def _normalise(key: str) -> str:
    if "%" in key:
        key = unquote(key)  # api%5Fkey
    if not key.isascii():
        key = unicodedata.normalize("NFKC", key)  # full-width letters
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key)
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


def key_policy(key: str) -> Policy | None:
    """The policy for a value under ``key``, or None when the name names no secret."""
    if not SECRETISH.search(key):
        return None
    norm = _normalise(key)
    if ENV_ONLY.fullmatch(norm):
        return POLICIES["strong"] if key.upper() == key else None
    for pattern, policy in KEY_SHAPES:
        if pattern.fullmatch(norm):
            return None if policy is None else POLICIES[policy]
    return None


_NUMBER = LazyPattern(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = LazyPattern(r"[A-Za-z]{1,12}")
_TOKENISH = LazyPattern(TOKEN_CHARS + r"+")
_PIECES = LazyPattern(r"[/\-._:]+")


_CLASSES = tuple(LazyPattern(p) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))


def _classes(s: str) -> int:
    return sum(p.search(s) is not None for p in _CLASSES)


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(k / n * math.log2(k / n) for k in Counter(s).values())


def is_secret(policy: Policy, value: str) -> bool:
    """Whether ``value`` (quotes removed) is a secret under ``policy``."""
    s = value.strip()
    if s.lower() in TRIVIAL or MASK in s or s.startswith("$") or set(s) <= {"*", "x", "X"}:
        return False
    if _NUMBER.fullmatch(s):
        return policy.numbers_from is not None and sum(c.isdigit() for c in s) >= (
            policy.numbers_from
        )
    if len(s) < policy.min_len or (not policy.words and _WORD.fullmatch(s)):
        return False
    if policy.tokenish and (not _TOKENISH.fullmatch(s) or _classes(s) < 2):
        return False
    if policy.names:
        pieces = [p for p in _PIECES.split(s) if p]
        if len(pieces) >= 2 and max(len(p) for p in pieces) <= 12:
            return False  # Llama-3.1-8B-Instruct, a UUID, a dotted version
    return _entropy(s) >= policy.entropy
