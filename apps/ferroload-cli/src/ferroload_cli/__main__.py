"""`python -m ferroload_cli`: the `ferroload` command."""

from ferroload_cli import run

run()
