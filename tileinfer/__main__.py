import sys

from tileinfer.cli import main

sys.exit(main())
