import sys

from brokerbench.worker.command import main

sys.exit(main())
