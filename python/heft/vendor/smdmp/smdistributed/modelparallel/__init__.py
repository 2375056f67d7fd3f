"""``smdistributed.modelparallel`` on heft: the vendor's model-parallel library v1's module
path, on a worker's path only when its job's distribution enables
``smdistributed.modelparallel`` (docs/porting.md)."""
