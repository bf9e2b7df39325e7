"""`python -m ferroload_cli`: the `ferroload` command."""

import sys

from ferroload_cli import main

sys.exit(main())
