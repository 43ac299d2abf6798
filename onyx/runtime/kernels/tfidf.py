"""TfIdfVectorizer: n-gram counts (with skips) against a pool of int64 or string n-grams."""

from __future__ import annotations

import numpy as np

from ...utils import unique
from ..registry import op


def _pool_ngrams(pool: np.ndarray, ngram_counts: list[int]) -> dict[int, tuple[np.ndarray, int]]:
    """n -> (pool n-grams as an [k, n] array, index of the first of them among all pool n-grams).

    ``ngram_counts[g]`` is the element offset in the pool where the (g+1)-grams start.
    """
    bounds = [*ngram_counts, len(pool)]
    groups, first = {}, 0
    for g in range(len(ngram_counts)):
        n = g + 1
        chunk = pool[bounds[g] : bounds[g + 1]]
        groups[n] = (chunk.reshape(-1, n), first)
        first += len(chunk) // n
    return groups


def _match(pool_grams: np.ndarray, grams: np.ndarray) -> np.ndarray:
    """Index into ``pool_grams`` [k, n] of each of ``grams`` [..., n] (token ids), or -1.

    Rows of both are numbered together by np.unique, so any vocabulary size and n work.
    """
    k, n = pool_grams.shape
    _, row_id = np.unique(
        np.concatenate([pool_grams, grams.reshape(-1, n)]), axis=0, return_inverse=True
    )
    row_id = row_id.reshape(-1)
    to_pool = np.full(row_id.max() + 1, -1, dtype=np.int64)
    to_pool[row_id[:k]] = np.arange(k)
    return to_pool[row_id[k:]].reshape(grams.shape[:-1])


@op("TfIdfVectorizer", since=9)
def tfidf_vectorizer(
    X,
    *,
    mode,
    min_gram_length,
    max_gram_length,
    max_skip_count,
    ngram_counts,
    ngram_indexes,
    pool_int64s=None,
    pool_strings=None,
    weights=None,
):
    X = np.asarray(X)
    rows = X.reshape(1, -1) if X.ndim == 1 else X
    pool = np.asarray(pool_strings, dtype=object) if pool_strings is not None else None
    if pool is None:
        pool = np.asarray(pool_int64s, dtype=np.int64)
        rows = rows.astype(np.int64)
    # tokens -> ids in the pool's vocabulary (-1 when a token never occurs in the pool)
    vocab = unique(pool)
    pos = np.searchsorted(vocab, rows.reshape(-1)).clip(0, max(len(vocab) - 1, 0))
    found = vocab[pos] == rows.reshape(-1) if len(vocab) else np.zeros(rows.size, bool)
    ids = np.where(found, pos, -1).reshape(rows.shape)
    pool_ids = np.searchsorted(vocab, pool)

    n_out = max(ngram_indexes) + 1
    ngram_indexes = np.asarray(ngram_indexes, dtype=np.int64)
    counts = np.zeros((rows.shape[0], len(ngram_indexes)), dtype=np.float32)
    batch = np.arange(rows.shape[0])[:, None]
    for n, (grams, first) in _pool_ngrams(pool_ids, list(ngram_counts)).items():
        if not (min_gram_length <= n <= max_gram_length) or not len(grams):
            continue
        # a unigram is the same whatever the skip: count it once
        for skip in range(max_skip_count + 1 if n > 1 else 1):
            span = (n - 1) * (skip + 1) + 1
            if span > rows.shape[1]:
                break
            starts = np.arange(rows.shape[1] - span + 1)
            positions = starts[:, None] + np.arange(n) * (skip + 1)  # [starts, n]
            found = _match(grams, ids[:, positions])  # [batch, starts]; unknown tokens never match
            hit = found >= 0
            b = np.broadcast_to(batch, found.shape)[hit]
            np.add.at(counts, (b, first + found[hit]), 1.0)

    if mode == "IDF":
        counts = np.minimum(counts, 1.0)
    if mode in ("IDF", "TFIDF") and weights is not None:
        counts = counts * np.asarray(weights, dtype=np.float32)
    out = np.zeros((rows.shape[0], n_out), dtype=np.float32)
    np.add.at(out, (slice(None), ngram_indexes), counts)
    return out.reshape(n_out) if X.ndim == 1 else out
