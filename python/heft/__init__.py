"""heft: distributed training in C++ on LibTorch. This package brings heft's collectives
to PyTorch scripts: ``import heft.torch`` registers the torch.distributed backend ``heft``.
See docs/python.md."""

__version__ = "0.1.0"
