"""``smdistributed.dataparallel`` on heft: the vendor's data-parallel library's module paths,
each backed by heft's torch.distributed backend (docs/porting.md)."""
__version__ = "heft"
