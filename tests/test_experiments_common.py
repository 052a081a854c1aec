"""experiments/common.py: the shared command line, output folder, metrics and figures of the
experiments."""

import json
import math
import pathlib

import numpy as np
import pytest

from experiments import common


def test_parser_shared_flags_and_options():
    parser = common.parser("Title line.\n\nMore.", "some_experiment")
    assert parser.description == "Title line." and parser.prog == "python -m experiments.some_experiment"
    args = parser.parse_args([])
    assert (args.out, args.seed, args.quick) == (pathlib.Path("results/some_experiment"), 0, False)
    bare = common.parser("T.", "x", quick_help=None, seed=False).parse_args([])
    assert vars(bare) == {"out": pathlib.Path("results/x")}
    with pytest.raises(SystemExit):
        common.parser("T.", "x", seed=False).parse_args(["--seed", "1"])


def test_prepare_out_creates_or_refuses(tmp_path):
    assert common.prepare_out(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError,
                       match=r"--out '.*file': '.*file' is an existing file, not a folder; choose another path"):
        common.prepare_out(tmp_path / "file")


def test_write_metrics_is_strict_json_and_returns_what_the_file_holds(tmp_path):
    metrics = {"value": np.float64(1.5), "nan": math.nan, "keys": {2: np.arange(2)}, "pair": ("a", np.bool_(True))}
    written = common.write_metrics(tmp_path, metrics)
    assert written == {"value": 1.5, "nan": None, "keys": {"2": [0, 1]}, "pair": ["a", True]}
    text = (tmp_path / "metrics.json").read_text()
    assert json.loads(text) == written and "NaN" not in text
    common.write_metrics(tmp_path, {"a": 1}, name="other.json", indent=1)
    assert (tmp_path / "other.json").read_text() == '{\n "a": 1\n}'


def test_save_writes_the_figure_and_closes_it(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    common.save(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
    common.write_text(tmp_path / "t.md", "# title\n")
    assert (tmp_path / "t.md").read_text() == "# title\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png", "t.md"]  # no temporary files left
