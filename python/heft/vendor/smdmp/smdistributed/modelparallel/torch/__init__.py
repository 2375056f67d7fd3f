"""``import smdistributed.modelparallel.torch as smp``: heft.torch.smp (docs/porting.md)."""
import sys

import heft.torch.smp as _smp

sys.modules[__name__] = _smp
