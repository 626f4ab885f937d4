"""Calibration of DSpark's confidence head: sequential temperature scaling, ECE, AUC.

Held-out pairs are rounds verified at full length: c (N, gamma) raw confidences and
accept_len (N,) in 0..gamma. The prefix-survival estimate a_k = prod_{i<=k} c_i should equal
P(accept_len >= k). Sequential temperature scaling (STS, paper 3.2.1) rescales each position's
logit, c'_k = sigmoid(logit(c_k) / t_k), choosing t_1, t_2, ... left to right by grid search so
that the ECE of the cumulative product a'_k is smallest with t_1..t_{k-1} held fixed
(applying the temperature to the logit of c_k is our reading [I]). Order-preserving per k.
numpy only.
"""

from __future__ import annotations

import numpy as np

from common.survival import survival_labels

GRID = np.exp(np.linspace(np.log(0.05), np.log(20.0), 241))


def _logit(c: np.ndarray) -> np.ndarray:
    c = np.clip(c, 1e-7, 1 - 1e-7)
    return np.log(c) - np.log1p(-c)


def apply_temperatures(c: np.ndarray, temps: np.ndarray) -> np.ndarray:
    """c (N, gamma), temps (gamma,) -> sigmoid(logit(c) / t)."""
    return 1.0 / (1.0 + np.exp(-_logit(np.asarray(c, dtype=np.float64)) / temps))


def ece(prob: np.ndarray, label: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error with equal-width bins: sum_b n_b/N |mean p - mean y|."""
    prob, label = np.asarray(prob, dtype=np.float64), np.asarray(label, dtype=np.float64)
    if prob.size == 0:
        return 0.0
    idx = np.minimum((prob * bins).astype(int), bins - 1)
    n = np.bincount(idx, minlength=bins)
    gap = np.abs(np.bincount(idx, prob, bins) - np.bincount(idx, label, bins))
    return float(gap.sum() / prob.size) if n.sum() else 0.0


def reliability(
    prob: np.ndarray, label: np.ndarray, bins: int = 10
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin: mean predicted, observed frequency (nan if empty) and count."""
    prob, label = np.asarray(prob, dtype=np.float64), np.asarray(label, dtype=np.float64)
    idx = np.minimum((prob * bins).astype(int), bins - 1)
    n = np.bincount(idx, minlength=bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.bincount(idx, prob, bins) / n, np.bincount(idx, label, bins) / n, n)


def survival_ece(c: np.ndarray, accept_len: np.ndarray, bins: int = 15) -> np.ndarray:
    """(gamma,) ECE of a_k = cumprod(c)_k against 1[accept_len >= k]."""
    a = np.cumprod(c, axis=1)
    y = survival_labels(accept_len, c.shape[1])
    return np.array([ece(a[:, k], y[:, k], bins) for k in range(c.shape[1])])


def fit_sts(c: np.ndarray, accept_len: np.ndarray, bins: int = 15) -> np.ndarray:
    """Sequential temperature scaling: temps (gamma,) fitted left to right on held-out pairs."""
    c = np.asarray(c, dtype=np.float64)
    n, gamma = c.shape
    y = survival_labels(accept_len, gamma)
    logits = _logit(c)
    temps = np.ones(gamma)
    prefix = np.ones(n)
    for k in range(gamma):
        scaled = 1.0 / (1.0 + np.exp(-logits[:, k][None, :] / GRID[:, None]))  # (G, N)
        errs = [ece(prefix * s, y[:, k], bins) for s in scaled]
        temps[k] = GRID[int(np.argmin(errs))]
        prefix = prefix * scaled[int(np.argmin(errs))]
    return temps


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties averaged); nan without both classes."""
    score, label = np.asarray(score, dtype=np.float64), np.asarray(label).astype(bool)
    pos, neg = int(label.sum()), int((~label).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(score.size)
    sorted_s = score[order]
    ranks[order] = np.arange(1, score.size + 1)
    _, first, counts = np.unique(sorted_s, return_index=True, return_counts=True)
    for f, k in zip(first, counts):
        if k > 1:
            ranks[order[f : f + k]] = f + (k + 1) / 2.0
    return float((ranks[label].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def conditional_auc(c: np.ndarray, accept_len: np.ndarray) -> np.ndarray:
    """(gamma,) AUC of c_k for 'draft k accepted' among rounds whose drafts 1..k-1 were."""
    out = []
    for k in range(c.shape[1]):
        reached = accept_len >= k
        out.append(auc(c[reached, k], accept_len[reached] >= k + 1))
    return np.array(out)
