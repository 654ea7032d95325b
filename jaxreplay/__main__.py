import sys

from jaxreplay.cli import main

sys.exit(main())
