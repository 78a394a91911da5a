"""Shared fixtures: the devices this build can run on, and Fashion-MNIST's location."""
import os

import pytest
import tessera as ts

DEVICES = ts.info()["devices"]
# The CPU backend is the reference; the others run the same checks where they have a device.
FASHION_MNIST = os.environ.get("TESSERA_DATA_DIR", "/usr/share/datasets/fashion-mnist")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
