"""``smdistributed.dataparallel.torch``: ``torch_smddp`` (the current API: backend ``smddp``),
``distributed`` and ``parallel.distributed`` (the older one), all on heft (docs/porting.md)."""
