"""Only for CPU dry runs under TRITON_INTERPRET=1 (no effect on a GPU run): Triton 3.6's interpreter turns a scalar
into an index with int(ndarray), which numpy >= 2.4 refuses for a 1-element array of one dimension."""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    import numpy as np
    import triton.runtime.interpreter as _interp

    _original = _interp._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        _original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    _interp._patch_lang_tensor = _patch_lang_tensor
