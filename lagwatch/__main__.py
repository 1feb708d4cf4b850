"""`python -m lagwatch ...`: the same as the `lagwatch` command."""

import sys

from lagwatch.cli import main

sys.exit(main())
