import sys

from coordinator.server import main

sys.exit(main())
