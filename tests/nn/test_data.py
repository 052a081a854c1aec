"""`jcalib.nn.data.check_training_data`, the one input check of the networks' training data."""

import numpy as np
import pytest

from jcalib.nn.data import check_training_data
from jcalib.parameters import Parameter, ParameterSpace

SPACE = ParameterSpace([Parameter("a", 1.0, 0.0, 2.0), Parameter("b", 5.0, 1.0, 10.0)])
THETAS = np.array([[0.5, 2.0], [1.5, 9.0], [1.0, 5.0]])
XS = np.arange(3 * 4 * 2, dtype=np.float64).reshape(3, 4, 2)


def test_returns_float64_copies():
    thetas, xs = check_training_data(SPACE, THETAS.tolist(), XS.astype(np.float32), "fit", n_times=4,
                                     output_names=("y1", "y2"))
    assert thetas.dtype == xs.dtype == np.float64
    np.testing.assert_array_equal(thetas, THETAS)
    np.testing.assert_array_equal(xs, XS)


def test_messages():
    with pytest.raises(ValueError, match=r"PELSVAE\.fit: thetas must have shape \(n, n_params\)"):
        check_training_data(SPACE, THETAS[:, :1], XS, "PELSVAE.fit")
    with pytest.raises(ValueError, match=r"fit: trajectories must have shape \(n, n_times, n_outputs\) with n = 3 "
                                         r"\(the rows of thetas\); got \(2, 4, 2\)"):
        check_training_data(SPACE, THETAS, XS[:2], "fit", what="trajectories")
    with pytest.raises(ValueError, match="fit: xs have 4 times, the model 5"):
        check_training_data(SPACE, THETAS, XS, "fit", n_times=5)
    with pytest.raises(ValueError, match=r"fit: xs have 2 outputs, expected 3 \(y1, y2, y3\)"):
        check_training_data(SPACE, THETAS, XS, "fit", output_names=("y1", "y2", "y3"))
    bad = THETAS.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"fit: thetas has NaN or inf in rows \[1\]"):
        check_training_data(SPACE, bad, XS, "fit")
    bad = XS.copy()
    bad[2, 3, 1] = np.inf
    with pytest.raises(ValueError, match=r"fit: signals have NaN or inf in samples \[2\] \(1 of 3\); drop failed "
                                         r"simulations first"):
        check_training_data(SPACE, THETAS, bad, "fit", what="signals")
    outside = THETAS.copy()
    outside[2, 1] = 11.0
    with pytest.raises(ValueError, match=r"fit: 1 samples lie outside the parameter bounds, first: row 2, b = 11\.0 "
                                         r"not in \[1\.0, 10\.0\]; widen the bounds"):
        check_training_data(SPACE, outside, XS, "fit")
    thetas, _ = check_training_data(SPACE, outside, XS, "fit", check_bounds=False)
    assert thetas[2, 1] == 11.0
