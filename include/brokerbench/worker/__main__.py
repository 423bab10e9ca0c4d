import sys

from brokerbench.worker.cli import main

sys.exit(main())
