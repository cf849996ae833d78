import sys

from verlenv.cli import main

sys.exit(main())
