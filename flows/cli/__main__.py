"""`python -m kbflow.flows.cli …` runs the `kbflow` command."""

import sys

from kbflow.flows.cli import main

sys.exit(main())
