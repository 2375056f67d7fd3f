"""heft-train's text data in Python: the corpus its GPT trains on and the batches it draws, so
a PyTorch model beside a heft-train run (its twin, a checkpoint moved between them) sees the
same bytes at every step. The sampling is heft-train's own C++ code
(src/heft/parallel/data/text_windows.h, through the extension), not a copy.

    from heft.torch.data import TextWindows
    data = TextWindows(block_size=64, batch_size=8, seed=0)   # the Debian fortunes
    x, y = data.batch(step, rank=dist.get_rank(), ranks=dist.get_world_size())

Inputs and targets are int64 (batch share, block_size); the loss heft-train reports is the
cross-entropy summed over every token of the global batch, divided by batch_size x
block_size."""
import os

from heft.torch._c10d import data as _data

DEFAULT_TEXT_DIR = _data.DEFAULT_TEXT_DIR


class TextWindows:
    """heft-train's "text" task's data: directory (default: heft-train's, the Debian
    fortunes) split 90/10, windows of block_size + 1 bytes, batch_size windows a step drawn
    from (seed, epoch, step), data-parallel rank `rank` of `ranks` taking a contiguous share
    (the first batch_size % ranks ranks one more). Errors: OSError naming an unreadable
    directory, ValueError for text too short or a rank outside the ranks."""

    def __init__(self, directory=None, *, block_size=128, batch_size=16, seed=0):
        self.directory = os.fspath(directory) if directory is not None else DEFAULT_TEXT_DIR
        self.block_size, self.batch_size, self.seed = int(block_size), int(batch_size), int(seed)
        if self.seed < 0:
            raise ValueError(f"TextWindows: seed must be >= 0, got {seed}")
        self.train, self.held_out = _data.load_text(self.directory, self.block_size)

    @property
    def steps_per_epoch(self):
        """Steps in an epoch, as heft-train counts them (at least 1)."""
        return max(1, self.train.numel() // (self.batch_size * self.block_size))

    def batch(self, step, *, epoch=0, rank=0, ranks=1):
        """(inputs, targets) of this rank's share of the global batch of (epoch, step)."""
        return _data.batch(self.train, self.block_size, self.batch_size, self.seed, int(epoch),
                           int(step), int(rank), int(ranks))
