"""What a serving head's supervisor sees: the one HeadFacts the unit tests and the status-server
process of the flood tests answer with."""

from multinode_llm.health.state import HeadFacts

SERVING = HeadFacts(
    ray_running=True,
    engine_started=True,
    engine_running=True,
    engine_healthy=True,
    model_listed=True,
    engine_answered_once=True,
    nodes=2,
    expected_nodes=2,
    gpus=2,
    expected_gpus=2,
    group_formed=True,
)
