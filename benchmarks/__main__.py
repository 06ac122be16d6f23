"""``python -m benchmarks``: the results pages and what makes each (shared/pages.py)."""

import sys

from benchmarks.shared.pages import main

sys.exit(main())
