"""``smdistributed.dataparallel.torch.parallel`` on heft (docs/porting.md)."""
