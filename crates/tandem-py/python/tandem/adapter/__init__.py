"""Engine-free logic of Tandem's engine plug-ins (the SGLang storage backend, ``tandem.sglang``,
and the vLLM KV connector, ``tandem.vllm``): importable and testable without torch, SGLang or
vLLM.

Layout (each module owns one thing):

- :mod:`~tandem.adapter.versions`: the engine versions the plug-ins are written against, and
  the refusal at load time on any other.
- :mod:`~tandem.adapter.keys`: request ids that every rank derives alike from the block keys
  of a call, and page ids from an engine's token slots.
- :mod:`~tandem.adapter.ledger`: pairs a rank's own calls with what the group's frames say
  about them (lookups, task starts, outcomes), by position, with deadlines; thread-safe.
- :mod:`~tandem.adapter.group`: one rank's link to its agent (a ``tandem.Session``): the step
  hook (the leader seals, a follower reads), per-rank page binding, and errors turned into
  outcomes.
- :mod:`~tandem.adapter.hicache`: the SGLang storage backend's calls (exists, get, set) over
  the link, every one returning by its deadline and never raising.
- :mod:`~tandem.adapter.offload`: the vLLM connector's scheduler side (lookups, loads, stores,
  staging pages, the step's metadata) and worker side (the copies and the outcomes of a step).

Nothing here imports an engine; the engine classes stay thin and call into these modules.
"""
