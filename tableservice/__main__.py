import sys

from tableservice.cli import main

sys.exit(main())
