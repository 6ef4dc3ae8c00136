import sys

from workers.server import main

sys.exit(main())
