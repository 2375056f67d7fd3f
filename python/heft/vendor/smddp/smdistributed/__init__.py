"""heft's stand-in for the cloud vendor's ``smdistributed`` package (docs/porting.md): on a
worker's path only when the job's distribution enables ``smdistributed.dataparallel``."""
