"""``python -m jcalib.cli``: the ``jcalib`` command."""

from jcalib.cli.app import app

app()
