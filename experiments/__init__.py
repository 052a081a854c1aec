"""Reproductions of the papers' analyses with jcalib. Run them from the repository root as
modules, e.g. ``python -m experiments.demo --quick``; shared helpers are in
`experiments.common`."""
