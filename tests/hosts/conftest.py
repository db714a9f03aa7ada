"""Fixtures for the tests that drive real verl; each such test file starts with
``pytest.importorskip("verl")``, so nothing here imports verl at module level."""

import pytest


@pytest.fixture(scope="session")
def verl_runtime():
    """One in-process Ray + TransferQueue for the whole session (start-up is most of the cost)."""
    pytest.importorskip("verl")
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture
def tq_train(verl_runtime):
    """An empty ``train`` partition, emptied again afterwards."""
    import transfer_queue as tq

    def clear():
        listing = tq.kv_list("train") or {}
        keys = list(listing.get("train", {}))
        if keys:
            tq.kv_clear(keys=keys, partition_id="train")

    clear()
    yield
    clear()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "e2e: runs verl's whole pipeline in a subprocess (about 1.5 min per run on 2 cores)",
    )
