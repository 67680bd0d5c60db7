"""``python -m demo``: what ``make demo`` runs."""

import sys

from .app import main

sys.exit(main())
