"""The demo: a stochastic local model server (:mod:`.server`), an agent on the real ``openai`` SDK
(:mod:`.agent`), and ``forkpoint demo`` (:mod:`.run`), which records the agent, replays it offline
twice and shows that a live re-run takes another path. Nothing is imported here, so the agent's
process loads only what the agent uses."""
