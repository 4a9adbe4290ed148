import sys

from tileinfer_profiling.cli import main

sys.exit(main())
