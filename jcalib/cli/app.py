"""The ``jcalib`` command: one typer app, each command a function of its own module.

Importing it switches on float64 (an entry point: simulations run in float64) and JAX's persistent
compilation cache (`persistent_compilation_cache`)."""

from __future__ import annotations

import os
import pathlib

import jax

jax.config.update("jax_enable_x64", True)


def persistent_compilation_cache() -> pathlib.Path | None:
    """Keep compiled programs between runs of the command: a large model's gradient compiles for
    a minute or more, a later run of the same command reads it back. JAX's persistent cache in
    ``$XDG_CACHE_HOME/jcalib/jax`` (default ``~/.cache``), unless JAX already has a cache folder
    (``JAX_COMPILATION_CACHE_DIR``) or ``JCALIB_COMPILATION_CACHE=0``. Returns the folder in use."""
    if jax.config.jax_compilation_cache_dir:
        return pathlib.Path(jax.config.jax_compilation_cache_dir)
    if os.environ.get("JCALIB_COMPILATION_CACHE", "1") == "0":
        return None
    folder = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "jcalib" / "jax"
    jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder


persistent_compilation_cache()

import typer  # noqa: E402

from jcalib.cli.amortize import amortize  # noqa: E402
from jcalib.cli.bench import bench  # noqa: E402
from jcalib.cli.calibrate import calibrate  # noqa: E402
from jcalib.cli.common import _OneLineErrors  # noqa: E402
from jcalib.cli.identify import identify  # noqa: E402
from jcalib.cli.models import models_list, models_show, simulate  # noqa: E402
from jcalib.cli.petab import petab  # noqa: E402
from jcalib.cli.sample import sample  # noqa: E402
from jcalib.cli.sensitivity import sensitivity  # noqa: E402

__all__ = ["app", "main", "persistent_compilation_cache"]

app = typer.Typer(help="Calibrate dynamic simulation models with JAX.", no_args_is_help=True,
                  pretty_exceptions_enable=False, cls=_OneLineErrors)
models_app = typer.Typer(help="Built-in models.", invoke_without_command=True)
models_app.callback()(models_list)
models_app.command("show")(models_show)
app.add_typer(models_app, name="models")
for command in (simulate, sensitivity, calibrate, sample, amortize, identify, petab, bench):
    app.command()(command)


def main():  # pragma: no cover - console entry
    app()
