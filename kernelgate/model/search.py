"""A search over bindings by words: which of dozens or thousands of bindings fit a task.

A model given a thousand tools cannot read them all on every turn; the anchors let it
search instead (Anthropic's tool search, Cloudflare's search + execute, FastMCP's BM25 over
the tool schemas). This is Okapi BM25 over each binding's words: its namespace and name
(split at ``_``, ``-``, ``.`` and camelCase, and weighted up), its docstring, and its
parameters' names and descriptions. Written here rather than taken from a package because
it is small (one index, one scoring loop), stdlib only, and has to run wherever the host
does; at 1,000 bindings a query takes well under a millisecond (docs/benchmarks.md).

>>> index = BindingIndex([("tracker", "create_issue", "Open a new issue."),
...                       ("files", "read_file", "Read a file's text.")])
>>> index.search("new issue")
[('tracker', 'create_issue')]
>>> index.search("tracker.create_issue", 5)
[('tracker', 'create_issue')]
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .docstrings import parse_docstring

__all__ = ["BindingIndex", "binding_words", "tokens"]

#: BM25's usual constants: term frequency saturation and length normalisation.
_K1 = 1.2
_B = 0.75
#: A binding's name words count this many times (a name says most about what it does).
_NAME_WEIGHT = 3
_WORD = re.compile(r"[A-Za-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOP = frozenset(
    "a an and are as at be by for from in is it of on or the to with this that".split()
)


def _stem(word: str) -> str:
    """A plural's singular, roughly (``issues`` -> ``issue``): enough for tool words."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """``text`` as lower-case search words: camelCase and snake_case split, stop words
    dropped, plurals folded.

    >>> tokens("listOpenIssues by_label")
    ['list', 'open', 'issue', 'label']
    """
    out = []
    for word in _WORD.findall(_CAMEL.sub(" ", text)):
        word = word.lower()
        if word not in _STOP:
            out.append(_stem(word))
    return out


def binding_words(namespace: str, name: str, spec: Mapping[str, Any]) -> str:
    """What a binding is searched by, from its spec (``doc``, ``params``, ``schema``)."""
    doc = parse_docstring(str(spec.get("doc") or ""))
    parts = [doc.text]
    params = spec.get("params")
    if isinstance(params, list):
        parts.extend(str(p[0]) for p in params if isinstance(p, list) and p)
    parts.extend(f"{k} {v}" for k, v in doc.params.items())
    schema = spec.get("schema")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(props, Mapping):
        for key, prop in props.items():
            text = prop.get("description") if isinstance(prop, Mapping) else None
            parts.append(f"{key} {text or ''}")
    return "\n".join(parts)


class BindingIndex:
    """BM25 over ``(namespace, name, text)`` documents, built once."""

    def __init__(self, documents: Iterable[tuple[str, str, str]]) -> None:
        self._keys: list[tuple[str, str]] = []
        self._freqs: list[Counter[str]] = []
        self._lengths: list[int] = []
        postings: dict[str, list[int]] = {}
        for namespace, name, text in documents:
            words = tokens(text) + (tokens(f"{namespace} {name}") * _NAME_WEIGHT)
            freq = Counter(words)
            i = len(self._keys)
            self._keys.append((namespace, name))
            self._freqs.append(freq)
            self._lengths.append(len(words))
            for word in freq:
                postings.setdefault(word, []).append(i)
        self._postings = postings
        n = len(self._keys)
        self._average = (sum(self._lengths) / n) if n else 0.0
        self._idf = {
            word: math.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            for word, docs in postings.items()
        }

    def __len__(self) -> int:
        return len(self._keys)

    def search(self, query: str, limit: int = 5) -> list[tuple[str, str]]:
        """The bindings that match ``query`` best, best first (at most ``limit``; none
        when no word of it occurs). A binding's own ``namespace.name`` comes first."""
        exact = [
            k for k in self._keys if f"{k[0]}.{k[1]}" == query.strip() or k[1] == query.strip()
        ]
        scores: dict[int, float] = {}
        for word in set(tokens(query)):
            docs = self._postings.get(word)
            if not docs:
                continue
            idf = self._idf[word]
            for i in docs:
                tf = self._freqs[i][word]
                norm = _K1 * (1 - _B + _B * self._lengths[i] / (self._average or 1))
                scores[i] = scores.get(i, 0.0) + idf * tf * (_K1 + 1) / (tf + norm)
        ranked = sorted(scores, key=lambda i: (-scores[i], self._keys[i]))
        out = list(exact)
        for i in ranked:
            if len(out) >= limit:
                break
            if self._keys[i] not in out:
                out.append(self._keys[i])
        return out[:limit]
