import sys

from deploy.threads import apply_from_argv

apply_from_argv(sys.argv[1:])  # before numpy loads: it reads its thread count once

from workers.command_line import main

sys.exit(main())
