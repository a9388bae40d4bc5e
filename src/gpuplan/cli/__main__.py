"""`python -m gpuplan.cli ...` (the console script is `gpuplan = gpuplan.cli:main`)."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
