import sys

from pipeline.entry import main

sys.exit(main())
