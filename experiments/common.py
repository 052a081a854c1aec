"""Helpers shared by the experiment scripts: command line, output folder, metrics, figures.

Every experiment is a module run from the repository root (``python -m experiments.<name>``)
whose ``main(argv)`` builds its command line with `parser` (``--out``, ``--seed``,
``--quick``), checks its output folder with `prepare_out` before any work, and writes
``metrics.json`` with `write_metrics` and its figures with `save` (both atomic).
"""

from __future__ import annotations

import argparse
import os
import pathlib
from collections.abc import Sequence

from jcalib.fileio import atomic_write_text, prepare_output_dir, save_figure, write_json
from jcalib.jsonable import to_jsonable

__all__ = ["parser", "prepare_out", "save", "write_metrics", "write_text"]


def parser(doc: str, name: str, quick_help: str | None = "tiny sizes, for CI", seed: bool = True
           ) -> argparse.ArgumentParser:
    """The command line every experiment shares; the script adds its own flags.

    Args:
        doc: the script's docstring; its first line is the description.
        name: the experiment's name; ``--out`` defaults to ``results/<name>``.
        quick_help: the help of ``--quick`` (what the smoke run changes); None: no
            ``--quick`` (the script adds its own, e.g. in a group of sizes).
        seed: whether to add ``--seed`` (default 0).

    Returns:
        An `argparse.ArgumentParser` with ``--out`` and, as asked, ``--seed`` and ``--quick``.
    """
    result = argparse.ArgumentParser(prog=f"python -m experiments.{name}", description=doc.splitlines()[0])
    result.add_argument("--out", type=pathlib.Path, default=pathlib.Path(f"results/{name}"),
                        help="output folder (default %(default)s)")
    if seed:
        result.add_argument("--seed", type=int, default=0)
    if quick_help is not None:
        result.add_argument("--quick", action="store_true", help=quick_help)
    return result


def prepare_out(path: str | os.PathLike) -> pathlib.Path:
    """Create the output folder ``path`` (``--out``) or accept an existing writable one,
    before any computation.

    Raises:
        ValueError: ``path`` or one of its parents is a file, or it cannot be created or
            written to.
    """
    return prepare_output_dir(path, "--out")


def write_metrics(out: str | os.PathLike, metrics: dict, name: str = "metrics.json", indent: int = 2) -> dict:
    """Write ``metrics`` to ``out/name`` as strict JSON, atomically.

    Returns:
        What the file holds (`jcalib.jsonable.to_jsonable` of ``metrics``: plain Python
        types, string keys, NaN and inf as None).
    """
    metrics = to_jsonable(metrics)
    write_json(pathlib.Path(out) / name, metrics, indent=indent)
    return metrics


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file (a report, a table) atomically."""
    atomic_write_text(path, text)


def save(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """Save a matplotlib figure atomically (format from the extension), then close it."""
    import matplotlib.pyplot as plt

    save_figure(fig, path, dpi=dpi)
    plt.close(fig)


def write_paper_comparison(out: str | os.PathLike, title: str, rows: list[dict], quick: bool = False,
                           notes: Sequence[str] = ()) -> str:
    """Write ``paper_comparison.md``: one table row per claim of the paper.

    Args:
        out: the experiment's output folder (next to metrics.json).
        title: the paper and case, e.g. "Wulkow et al. 2021, Example 1 (four substances)".
        rows: ``{"claim", "paper", "ours", "match", "why"}`` each; ``match`` is True, False or None
            (not comparable at this size, e.g. in --quick mode); ``why`` explains a mismatch.
        quick: the run used --quick sizes (stated in the header: its numbers are not the paper's setting).
        notes: paragraphs after the table: the run's numbers behind the claims (computed by the run).

    Returns:
        The Markdown text written.
    """
    def cell(value) -> str:
        return " ".join(str(value).split()).replace("|", "\\|")

    mark = {True: "yes", False: "no", None: "n/a"}
    lines = [f"# {title}: paper versus jcalib", ""]
    if quick:
        lines += ["Quick run (CI sizes): our numbers are not at the paper's settings; matches are indicative only.", ""]
    lines += ["| claim | paper | ours | match | why not |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {cell(row['claim'])} | {cell(row['paper'])} | {cell(row['ours'])} | "
                     f"{mark[row['match']]} | {cell(row.get('why', ''))} |")
    n_yes = sum(row["match"] is True for row in rows)
    n_no = sum(row["match"] is False for row in rows)
    lines += ["", f"{n_yes} of {len(rows)} claims match, {n_no} do not."]
    for note in notes:
        lines += ["", note]
    text = "\n".join(lines) + "\n"
    atomic_write_text(pathlib.Path(out) / "paper_comparison.md", text)
    return text
