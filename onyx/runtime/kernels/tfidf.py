"""TfIdfVectorizer: n-gram counts (with skips) against a pool of int64 or string n-grams."""

from __future__ import annotations

import numpy as np

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


def _encode(ids: np.ndarray, radix: int) -> np.ndarray:
    """Rows of token ids -> one int64 key each (mixed radix); any -1 (unknown token) -> -1."""
    keys = np.zeros(ids.shape[:-1], dtype=np.int64)
    for k in range(ids.shape[-1]):  # n is small: one vectorized pass per position
        keys = keys * radix + ids[..., k]
    return np.where((ids < 0).any(axis=-1), -1, keys)


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
    vocab = np.unique(pool)
    radix = len(vocab) + 1
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
        pool_keys = _encode(grams, radix)
        order = np.argsort(pool_keys)
        sorted_keys = pool_keys[order]
        # a unigram is the same whatever the skip: count it once
        for skip in range(max_skip_count + 1 if n > 1 else 1):
            span = (n - 1) * (skip + 1) + 1
            if span > rows.shape[1]:
                break
            starts = np.arange(rows.shape[1] - span + 1)
            positions = starts[:, None] + np.arange(n) * (skip + 1)  # [starts, n]
            keys = _encode(ids[:, positions], radix)  # [batch, starts]
            at = np.searchsorted(sorted_keys, keys).clip(0, len(sorted_keys) - 1)
            hit = (sorted_keys[at] == keys) & (keys >= 0)
            b = np.broadcast_to(batch, keys.shape)[hit]
            np.add.at(counts, (b, first + order[at[hit]]), 1.0)

    if mode == "IDF":
        counts = np.minimum(counts, 1.0)
    if mode in ("IDF", "TFIDF") and weights is not None:
        counts = counts * np.asarray(weights, dtype=np.float32)
    out = np.zeros((rows.shape[0], n_out), dtype=np.float32)
    np.add.at(out, (slice(None), ngram_indexes), counts)
    return out.reshape(n_out) if X.ndim == 1 else out
