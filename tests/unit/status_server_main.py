"""The real status server alone in a process, for the flood tests: ``python status_server_main.py
PORT NOFILE``.

It lowers its own RLIMIT_NOFILE first (a connection flood shows as fd exhaustion only below the
limit), answers as a serving head, prints ``listening`` and runs until SIGTERM.
"""

import asyncio
import resource
import signal
import sys

from head_facts import SERVING
from multinode_llm.health.server import StatusServer
from multinode_llm.health.state import HealthState


async def main(port: int) -> None:
    state = HealthState(role="head")
    state.update(SERVING)
    server = StatusServer(state, port, host="127.0.0.1")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("listening", flush=True)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    nofile = int(sys.argv[2])
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    asyncio.run(main(int(sys.argv[1])))
