import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """The kernels' CPU paths run single-threaded in the bench; tests do the same (2-core CI, less noise)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
