import os
import sys

import pytest

# The package from the build tree (ctest sets PYTHONPATH too); the examples' modules.
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
os.environ.setdefault("MOSAIC_DB", "off")

ONNX_NODE_TESTS = "/usr/share/libonnx-testdata/data/node"


@pytest.fixture
def node_tests():
    if not os.path.isdir(ONNX_NODE_TESTS):
        pytest.skip("the ONNX node tests are not installed (Debian: libonnx-testdata)")
    return ONNX_NODE_TESTS


@pytest.fixture
def cli():
    """The mosaic program of the build tree the package was imported from (build/mosaic)."""
    import mosaic
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(mosaic._mosaic.__file__)))),
                        "mosaic")
    if not os.path.exists(path):
        pytest.skip("no mosaic program beside the package's build tree")
    return path
