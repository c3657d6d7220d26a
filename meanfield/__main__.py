import sys

from meanfield.cli import main

sys.exit(main())
