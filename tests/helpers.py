"""Shared test helpers: analytic references and finite differences."""

import numpy as np


def central_differences(fn, x, rel_step=1e-6):
    """Jacobian of ``fn`` at ``x`` by central differences, shape ``fn(x).shape + x.shape``."""
    x = np.asarray(x, dtype=np.float64)
    columns = []
    for i in range(x.size):
        h = rel_step * max(abs(x[i]), 1e-300)
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        columns.append((np.asarray(fn(up)) - np.asarray(fn(down))) / (2 * h))
    return np.stack(columns, axis=-1)
