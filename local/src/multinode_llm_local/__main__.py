"""``python -m multinode_llm_local``: the same as the ``multinode-llm-local`` command."""

import sys

from multinode_llm_local.cli import main

sys.exit(main())
