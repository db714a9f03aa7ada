"""``python -m dataflex_rl.cli``: the same as the ``dataflex-rl`` command."""

import sys

from dataflex_rl.cli import main

sys.exit(main())
