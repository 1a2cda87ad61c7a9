"""The gcn_cora recipe: another Planetoid data set needs only its name."""

from __future__ import annotations

import pytest

from toolbox.core.errors import DataError
from toolbox.experiment import ExperimentBuilder, load_config

pytest.importorskip("torch_geometric")


@pytest.mark.parametrize("experiment", ["gcn_cora", "gat_cora"])
@pytest.mark.parametrize("dataset", ["CiteSeer", "PubMed"])
def test_another_planetoid_set_is_one_override(tmp_path, experiment, dataset) -> None:
    cfg = load_config(
        [f"experiment={experiment}", f"data.source.dataset={dataset}", f"data.source.root={tmp_path}",
         "+data.source.download=false"]
    )  # fmt: skip
    assert cfg.data.source.dataset == dataset and cfg.model.name == "gnn"
    # the same runs read <root>/<dataset>/raw/ (no files here, so it names them)
    with pytest.raises(DataError, match=rf"{dataset}/raw has no ind.{dataset.lower()}.\* files"):
        ExperimentBuilder.from_config(cfg).build_data()
