import sys

from ayci.cli import main

sys.exit(main())
