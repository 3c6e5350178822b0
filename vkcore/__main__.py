import sys

from vkcore.tools.cli import main

sys.exit(main())
