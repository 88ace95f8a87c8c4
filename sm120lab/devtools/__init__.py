"""Developer tools that record facts into ``data/`` (``sm120lab dev ...``); nothing at run time imports them.

- :mod:`.api_check`: the Python APIs the FlashInfer / vLLM MoE adapters call, read from the real
  wheels (``sm120lab dev api-check``); the adapters' own claims are
  :class:`sm120lab.moe.backends.api_claim.ApiClaim`.
- :mod:`.arch_suffix`: does FlashInfer's SM120 MoE device code depend on 120a vs 120f
  (``sm120lab dev arch-suffix``)?
"""
