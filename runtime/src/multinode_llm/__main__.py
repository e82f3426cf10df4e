"""`python -m multinode_llm` is the same as the `multinode-llm` command."""

import sys

from multinode_llm.cli import main

sys.exit(main())
